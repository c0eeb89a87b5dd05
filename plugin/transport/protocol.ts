/**
 * The messages between the plugin's main thread (plugin/transport/remote-hooks.ts, inside OpenCode's own JavaScript thread) and
 * the plugin's thread (plugin/transport/thread-entry.ts, a Bun worker that holds the adapter, the database pool and the
 * embedded compactor). Everything in them is structured-cloneable data: each side picks the fields it passes.
 */

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

export type ToMainThread =
  /** The answer to a request (`id`), with the hook's output where the hook changes it. */
  | { readonly type: "reply"; readonly id: number; readonly value?: unknown; readonly error?: ThreadError }
  /** A call of OpenCode's client on the thread's behalf; answered with a `client-reply`. */
  | { readonly type: "client"; readonly id: number; readonly call: ClientCall; readonly args: unknown };

export type ToPluginThread =
  | {
      readonly type: "init";
      readonly input: InitInput;
      readonly options: Record<string, unknown> | undefined;
      /** The OpenCode process's settings from its environment (to the local server, which has its own). */
      readonly env?: Readonly<Record<string, string | undefined>>;
      /** The OpenCode process (to the local server: it holds the sessions' leases in that process's name). */
      readonly pid?: number;
      /** The local server starting for this process (to its own thread): the queue is handed to it at close. */
      readonly handOffSocket?: string;
    }
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
  | { readonly type: "client-reply"; readonly id: number; readonly value?: unknown; readonly error?: ThreadError };

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
export interface ThreadError {
  readonly name: string;
  readonly message: string;
}

export function threadError(error: unknown): ThreadError {
  if (error instanceof Error) return { name: error.name, message: error.message };
  return { name: "Error", message: String(error) };
}
