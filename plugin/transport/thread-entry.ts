/**
 * The plugin's thread: a Bun worker started by plugin/index.ts (plugin/transport/channel.ts `workerChannel`), holding
 * everything that does work (the adapter, the memory service and its database pool, the embedded compactor:
 * plugin/transport/plugin-side.ts). Why a thread: docs/opencode-notes.md "The plugin's thread".
 */
import { ownProcessRunner } from "../host/runner.js";
import { handingOver } from "./local-server/hand-off.js";
import { servePlugin } from "./plugin-side.js";
import type { ToOpencodeSide, ToPluginSide } from "./protocol.js";
import { ClosableRegistry } from "./shutdown.js";

declare const self: {
  postMessage(message: ToOpencodeSide): void;
  onmessage: ((event: { data: ToPluginSide }) => void) | null;
};

// An error nothing caught must not end the thread (Bun ends a worker on one, and memory would then be off until
// OpenCode restarts): in OpenCode's own thread such an error was only printed, and so it is here.
process.on("unhandledRejection", (reason) => {
  process.stderr.write(`optchat (plugin thread): unhandled rejection: ${describeError(reason)}\n`);
});
process.on("uncaughtException", (error) => {
  process.stderr.write(`optchat (plugin thread): uncaught exception: ${describeError(error)}\n`);
});

function describeError(error: unknown): string {
  return error instanceof Error ? (error.stack ?? error.message) : String(error);
}

// No signal arrives in this thread: OpenCode's side forwards them, and the registry closes or flushes the adapters.
const registry = new ClosableRegistry();
const side = servePlugin(
  (message) => self.postMessage(message),
  registry,
  (init) =>
    ownProcessRunner(
      "thread",
      (target, budgetMs) => registry.register(target, budgetMs),
      // The local server starting for this process takes its queue at close (plugin/transport/local-server/hand-off.ts).
      init.handOffSocket ? handingOver(init.handOffSocket) : undefined,
    ),
);
self.onmessage = ({ data }) => side.receive(data);
