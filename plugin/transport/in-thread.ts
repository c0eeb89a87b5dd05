/**
 * The plugin's side in OpenCode's own thread, over the loopback (plugin/transport/channel.ts `loopbackChannel`):
 * setting `thread` off, a runtime without Bun's workers, or a thread that could not start. Imported only then: it
 * brings the whole plugin into OpenCode's thread.
 */
import { ownProcessRunner } from "../host/runner.js";
import { type Channel, loopbackChannel } from "./channel.js";
import { servePlugin } from "./plugin-side.js";
import { ClosableRegistry } from "./shutdown.js";

/** The loopback to a plugin's side whose adapters close when OpenCode's side forwards a stop signal. */
export function inThreadChannel(): Channel {
  const registry = new ClosableRegistry();
  return loopbackChannel((send) =>
    servePlugin(send, registry, () => ownProcessRunner("opencode", (target, ms) => registry.register(target, ms))),
  );
}
