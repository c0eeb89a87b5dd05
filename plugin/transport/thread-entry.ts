/**
 * The plugin's thread: a Bun worker started by plugin/transport/remote-hooks.ts, holding everything that does work (the
 * adapter, the memory service and its database pool, the embedded compactor: plugin/transport/plugin-side.ts). Why a thread:
 * docs/opencode-notes.md "The plugin's thread".
 */
import { hostPlugin } from "./plugin-side.js";
import type { ToMainThread, ToPluginThread } from "./protocol.js";
import { closeRegistered, flushRegistered } from "./shutdown.js";
import { markPluginThread } from "./thread-state.js";

declare const self: {
  postMessage(message: ToMainThread): void;
  onmessage: ((event: { data: ToPluginThread }) => void) | null;
};

markPluginThread("thread");

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

// The adapters register with closeOnSignals in this thread, where no signal arrives: the main thread forwards them.
const host = hostPlugin((message) => self.postMessage(message), {
  closeAll: closeRegistered,
  flushAll: flushRegistered,
});
self.onmessage = ({ data }) => host.receive(data);
