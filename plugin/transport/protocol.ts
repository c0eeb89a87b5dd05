/**
 * The messages over a channel (plugin/transport/channel.ts) between OpenCode's side (plugin/transport/remote-hooks.ts,
 * in OpenCode's own JavaScript thread) and the plugin's side (plugin/transport/plugin-side.ts: in the plugin's thread,
 * in the local server, or in OpenCode's thread over the loopback). Everything in them is structured-cloneable data
 * (and JSON for the local server's socket): each side picks the fields it passes.
 */

import type { PluginRunner } from "../base/identity.js";
import type { RequestChecks } from "../request/checks.js";

/**
 * The hooks the main thread forwards (the event hook is posted without an answer; the system prompt, a compaction's
 * start and `chat.params` are answered but not waited for).
 */
export type ForwardedHook =
  | "chat.message"
  | "chat.params"
  | "experimental.chat.messages.transform"
  | "experimental.chat.system.transform"
  | "experimental.session.compacting"
  | "dispose";

/** What the plugin's thread may ask of OpenCode's client (plugin/host/client-lookups.ts, compactor-model.ts). */
export type ClientCall = "session.get" | "session.messages" | "config.get" | "config.providers";

/** What the main thread passes of OpenCode's PluginInput: the data, not the client (it stays on the main thread). */
export interface InitInput {
  readonly project: { readonly id: string } & Record<string, unknown>;
  readonly worktree: string;
  readonly directory: string;
}

export type ToOpencodeSide =
  /** The answer to a request (`id`), with the hook's output where the hook changes it. */
  | { readonly type: "reply"; readonly id: number; readonly value?: unknown; readonly error?: SideError }
  /** A call of OpenCode's client on the thread's behalf; answered with a `client-reply`. */
  | { readonly type: "client"; readonly id: number; readonly call: ClientCall; readonly args: unknown };

/** What a channel says of its runner in `init` (plugin/transport/channel.ts `Channel.init`). */
export interface RunnerInit {
  readonly runner: PluginRunner;
  /** The OpenCode process's settings from its environment (to the local server, which has its own). */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** The OpenCode process (to the local server: it holds the sessions' leases in that process's name). */
  readonly pid?: number;
  /** The local server starting for this process (to its own thread): the queue is handed to it at close. */
  readonly handOffSocket?: string;
}

export type InitMessage = RunnerInit & {
  readonly type: "init";
  readonly input: InitInput;
  readonly options: Record<string, unknown> | undefined;
};

export type ToPluginSide =
  | InitMessage
  | {
      readonly type: "hook";
      readonly id: number;
      readonly hook: ForwardedHook;
      readonly input: unknown;
      readonly output: unknown;
    }
  | { readonly type: "event"; readonly event: unknown }
  | {
      readonly type: "tool";
      readonly id: number;
      readonly name: string;
      readonly args: unknown;
      readonly context: ToolCallContext;
    }
  /** A stop signal the main thread received: SIGTERM/SIGHUP close every adapter, SIGINT flushes them. */
  | { readonly type: "signal"; readonly id: number; readonly signal: "close" | "flush" }
  | { readonly type: "client-reply"; readonly id: number; readonly value?: unknown; readonly error?: SideError };

/**
 * The thread's answer to a forwarded `experimental.chat.messages.transform`: the messages (replacing OpenCode's in
 * place) and the session's request checks as the transform left them, from which the main thread answers the request's
 * `chat.params` without asking the thread (plugin/request/checks.ts).
 */
export interface TransformReply {
  readonly messages?: unknown[];
  readonly checks?: RequestChecks;
}

/** The fields of OpenCode's ToolContext the memory tools read (its abort signal and callbacks do not cross threads). */
export interface ToolCallContext {
  readonly sessionID: string;
  readonly messageID: string;
  readonly agent: string;
  readonly directory: string;
  readonly worktree: string;
}

/** An error as it crosses threads: its class name (PromptRefused is rebuilt as one) and message. */
export interface SideError {
  readonly name: string;
  readonly message: string;
}

export function sideError(error: unknown): SideError {
  if (error instanceof Error) return { name: error.name, message: error.message };
  return { name: "Error", message: String(error) };
}
