/**
 * The one seam between OpenCode's side of the plugin (plugin/transport/remote-hooks.ts) and the side that does the work
 * (plugin/transport/plugin-side.ts): a `Channel`. Three carry it: a Bun worker (the plugin's thread, `workerChannel`),
 * the local server's Unix socket (plugin/transport/local-server/client.ts `SocketChannel`), and the loopback in
 * OpenCode's own thread (`loopbackChannel`, setting `thread` off). The hooks' logic exists once, above the channel;
 * which runner serves the other end travels in the channel's `init`.
 */
import type { PluginRunner } from "../base/identity.js";
import type { RunnerInit, ToOpencodeSide, ToPluginSide } from "./protocol.js";

/** What OpenCode's side hears from its channel. */
export interface ChannelReceiver {
  message(data: ToOpencodeSide): void;
  /** The other side is gone (it failed, or it ended), with why; requests still waiting are refused. */
  failed(reason: string): void;
}

/** OpenCode's end of the way to the plugin's side. */
export interface Channel {
  /** The runner on the other end and what it needs to know of this process: sent with `init`. */
  readonly init: RunnerInit;
  /** What the other side is called in messages ("the plugin's thread", "the optchat local server", …). */
  readonly sideName: string;
  /**
   * The other side outlives this process (the local server): `dispose` hands it the flush without waiting for it. It
   * flushes the same way when the connection ends, so a dispose message lost with the process changes nothing.
   */
  readonly outlivesProcess: boolean;
  /** Sends one message; throws when it cannot be sent at all. */
  post(message: ToPluginSide): void;
  /** Sets the receiver (once); messages that came before are handed to it then, in order. */
  listen(receiver: ChannelReceiver): void;
  /** Holds the process open while a hook waits for an answer; `unref` lets it go again. */
  ref(): void;
  unref(): void;
  /** Ends the channel (after OpenCode's dispose). */
  close(): void;
}

/** How the plugin's side answers over a channel. */
export type SendToOpencode = (message: ToOpencodeSide) => void;

/** The plugin's side as a channel's other end drives it (plugin/transport/plugin-side.ts `servePlugin`). */
export interface PluginSide {
  receive(message: ToPluginSide): void;
  /** OpenCode's side is gone: its client calls still waiting fail. */
  disconnected(reason: string): void;
}

/** What each runner is called in OpenCode's messages. */
export const SIDE_NAMES: Readonly<Record<PluginRunner, string>> = {
  opencode: "the plugin (in OpenCode's thread)",
  thread: "the plugin's thread",
  "local server": "the optchat local server",
};

/** The part of Bun's Worker (a web Worker) the channel uses; the project's types know no DOM or Bun globals. */
export interface BunWorker {
  postMessage(message: unknown): void;
  addEventListener(type: "message", listener: (event: { data: ToOpencodeSide }) => void): void;
  addEventListener(type: "error", listener: (event: { message?: string }) => void): void;
  addEventListener(type: "close", listener: () => void): void;
  terminate(): void;
  ref(): void;
  unref(): void;
}

/** Bun's global Worker, when this runtime has one. */
export function workerClass(): (new (url: string) => BunWorker) | undefined {
  const found = (globalThis as { Worker?: unknown }).Worker;
  return typeof found === "function" ? (found as new (url: string) => BunWorker) : undefined;
}

/**
 * The plugin's thread as a channel. A value that cannot be cloned (a function somewhere in an event) goes as its JSON
 * form, which is what the hooks read; `post` throws when even that fails. `handOffSocket`: the local server starting
 * for this process, to which the thread hands its queue at close.
 */
export function workerChannel(worker: BunWorker, handOffSocket?: string): Channel {
  return {
    init: { runner: "thread", ...(handOffSocket ? { handOffSocket } : {}) },
    sideName: SIDE_NAMES.thread,
    outlivesProcess: false,
    post(message) {
      try {
        worker.postMessage(message);
      } catch {
        worker.postMessage(JSON.parse(JSON.stringify(message)) as ToPluginSide);
      }
    },
    listen(receiver) {
      worker.addEventListener("message", (event) => receiver.message(event.data));
      worker.addEventListener("error", (event) => receiver.failed(`it failed: ${event.message ?? "unknown error"}`));
      worker.addEventListener("close", () => receiver.failed("it ended"));
    },
    ref: () => worker.ref(),
    unref: () => worker.unref(),
    close: () => worker.terminate(),
  };
}

/**
 * The plugin's side in OpenCode's own thread (setting `thread` off, or a runtime without Bun's workers). Messages pass
 * as they are, OpenCode's own objects included (so a hook changes OpenCode's output in place, as a hook does), each a
 * microtask later: the forwarding hooks work as over any other channel.
 */
export function loopbackChannel(serve: (send: SendToOpencode) => PluginSide): Channel {
  let receiver: ChannelReceiver | undefined;
  const early: ToOpencodeSide[] = [];
  const side = serve((message) => queueMicrotask(() => (receiver ? receiver.message(message) : early.push(message))));
  return {
    init: { runner: "opencode" },
    sideName: SIDE_NAMES.opencode,
    outlivesProcess: false,
    post: (message) => queueMicrotask(() => side.receive(message)),
    listen(given) {
      receiver = given;
      for (const message of early.splice(0)) given.message(message);
    },
    ref: () => {},
    unref: () => {},
    close: () => side.disconnected("OpenCode's dispose ended it"),
  };
}
