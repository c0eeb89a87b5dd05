/**
 * The plugin's main thread: what runs inside OpenCode's own JavaScript thread when the plugin runs in its thread
 * (OPTCHAT_PLUGIN_THREAD=on, the default under OpenCode's Bun). It starts the plugin's thread (plugin/transport/thread-entry.ts),
 * declares the memory tools, and forwards every hook to the thread, waiting for an answer only where OpenCode needs
 * one (a refused prompt, the transformed messages, a tool's result, the flush at close).
 *
 * Why (issue 9 item 2, docs/opencode-notes.md "The plugin's thread"): OpenCode runs plugins on its one JavaScript
 * thread, so every millisecond of the plugin's work (importing ~100 modules, the database client, planning an ingest,
 * the embedded compactor) was a millisecond OpenCode's own work waited for. Here the main thread imports only this
 * module and the tools' declarations, and the thread's work runs beside OpenCode's on another core.
 */
import { appendFileSync } from "node:fs";
import type { Hooks, PluginInput } from "@opencode-ai/plugin";
import { PromptRefused } from "../base/prompt-refused.js";
import { withoutRetryTriggers } from "../base/retry-triggers.js";
import { HOST_EVENT_TYPES, readHostEvent } from "../opencode/events.js";
import { checkRequestParams, type ParamsModel, type RequestChecks } from "../request/checks.js";
import { declaredMemoryTools } from "../tools/specs.js";
import { callClient } from "./client-calls.js";
import {
  type ForwardedHook,
  type ThreadError,
  type ToMainThread,
  type ToolCallContext,
  type ToPluginThread,
  type TransformReply,
  threadError,
} from "./protocol.js";
import { type Closable, closeOnSignals } from "./shutdown.js";

/** The part of Bun's Worker (a web Worker) the bridge uses; the project's types know no DOM or Bun globals. */
export interface BunWorker {
  postMessage(message: unknown): void;
  addEventListener(type: "message", listener: (event: { data: ToMainThread }) => void): void;
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

interface Pending {
  resolve(value: unknown): void;
  reject(error: Error): void;
}

/**
 * One plugin thread and the requests waiting for its answers. It is the Closable that plugin/transport/shutdown.ts closes or
 * flushes on a stop signal (signals reach only OpenCode's thread): it has the thread do it.
 */
class ThreadBridge implements Closable {
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  /** Why the thread is gone (it failed, or it was stopped after the dispose), once it is. */
  stopped: string | undefined;
  /** Stops closing this bridge on signals (set once registered). */
  unregister: () => void = () => {};

  constructor(
    private readonly worker: BunWorker,
    private readonly input: PluginInput,
    /** What the other side is, in messages: "the plugin's thread" or "the optchat local server". */
    readonly sideName: string,
  ) {
    worker.addEventListener("message", (event) => this.receive(event.data));
    worker.addEventListener("error", (event) => this.fail(`it failed: ${event.message ?? "unknown error"}`));
    worker.addEventListener("close", () => this.fail("it ended"));
  }

  /**
   * Sends a request and waits for its answer; rejects at once when the thread is gone. While any request waits, the
   * thread holds the process open (an unreferenced one would let `opencode run` exit in the middle of a hook); idle, it
   * never does.
   */
  request(message: DistributiveOmit<Extract<ToPluginThread, { id: number }>, "id">): Promise<unknown> {
    if (this.stopped) return Promise.reject(new Error(`optchat: ${this.sideName} stopped: ${this.stopped}`));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (this.pending.size === 0) this.worker.ref();
      this.pending.set(id, { resolve, reject });
      try {
        this.post({ ...message, id } as ToPluginThread);
      } catch (error) {
        this.settle(id)?.reject(error instanceof Error ? error : new Error(String(error)));
      }
    });
  }

  /**
   * Sends without waiting (events); dropped once the thread is gone. A value that cannot be cloned (a function
   * somewhere in an event) goes as its JSON form, which is what the hooks read; throws when even that fails.
   */
  post(message: ToPluginThread): void {
    if (this.stopped) return;
    try {
      this.worker.postMessage(message);
    } catch {
      this.worker.postMessage(JSON.parse(JSON.stringify(message)) as ToPluginThread);
    }
  }

  /** SIGTERM/SIGHUP (plugin/transport/shutdown.ts): the thread flushes and closes its adapters. */
  async close(): Promise<void> {
    await this.request({ type: "signal", signal: "close" }).catch(() => undefined);
  }

  /** SIGINT: the thread flushes, keeping everything open. */
  async flush(): Promise<unknown> {
    return await this.request({ type: "signal", signal: "flush" }).catch(() => undefined);
  }

  /** Ends the thread (after its dispose): requests still waiting are refused. */
  stop(): void {
    this.fail("it was stopped after OpenCode's dispose", false);
    this.worker.terminate();
  }

  private fail(reason: string, report = true): void {
    if (this.stopped) return;
    this.stopped = reason;
    this.unregister();
    if (report) process.stderr.write(`optchat: ${this.sideName} stopped: ${reason}\n`);
    for (const [id, pending] of this.pending) {
      this.settle(id);
      pending.reject(new Error(`optchat: ${this.sideName} stopped: ${reason}`));
    }
  }

  /** Takes a request off the waiting list; the last one lets the thread go unreferenced again. */
  private settle(id: number): Pending | undefined {
    const pending = this.pending.get(id);
    if (!pending) return undefined;
    this.pending.delete(id);
    if (this.pending.size === 0) this.worker.unref();
    return pending;
  }

  private receive(message: ToMainThread): void {
    if (message.type === "client") {
      const answer = (reply: Omit<Extract<ToPluginThread, { type: "client-reply" }>, "type" | "id">) => {
        try {
          this.post({ type: "client-reply", id: message.id, ...reply });
        } catch (error) {
          this.post({ type: "client-reply", id: message.id, error: threadError(error) });
        }
      };
      void callClient(this.input.client, message.call, message.args).then(
        (value) => answer({ value }),
        (error: unknown) => answer({ error: threadError(error) }),
      );
      return;
    }
    const pending = this.settle(message.id);
    if (!pending) return;
    if (message.error) pending.reject(rebuild(message.error));
    else pending.resolve(message.value);
  }
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** The thread's error as the main thread throws it: a refused prompt stays a PromptRefused. */
function rebuild(error: ThreadError): Error {
  if (error.name === "PromptRefused") return new PromptRefused(withoutRetryTriggers(error.message));
  return Object.assign(new Error(error.message), { name: error.name });
}

/** Settings the main thread reads itself, before the thread has resolved the whole configuration. */
interface MainSettings {
  readonly partial: boolean;
  /** OPTCHAT_TIMINGS_FILE: how long OpenCode waited for each forwarded hook, measured here (`bench plugin`). */
  readonly timingsFile: string | undefined;
  /** OPTCHAT_CLOSE_FLUSH_MS: a stop signal's wait for the thread's flush (plus 1.5 s for the round trip). */
  readonly closeFlushMs: number;
  /** How long the dispose waits for the thread's flush before it stops the thread anyway. */
  readonly disposeBoundMs: number;
}

function mainSettings(options: Record<string, unknown> | undefined, env: NodeJS.ProcessEnv): MainSettings {
  const readiness = options?.readiness ?? env.OPTCHAT_READINESS;
  // As plugin/base/config.ts reads them: an option wins, an empty variable is unset.
  const given = options?.closeFlushMs ?? (env.OPTCHAT_CLOSE_FLUSH_MS || undefined);
  const flush = given === undefined ? 10_000 : Number(given);
  const closeFlushMs = Number.isFinite(flush) ? Math.min(Math.max(flush, 0), 60_000) : 10_000;
  const timings = options?.timingsFile ?? env.OPTCHAT_TIMINGS_FILE;
  return {
    partial: readiness === "partial",
    timingsFile: typeof timings === "string" && timings !== "" ? timings : undefined,
    closeFlushMs,
    // The thread bounds its own flush by closeFlushMs (plus 500 ms); this only guards against a thread that hangs.
    disposeBoundMs: closeFlushMs + 2_000,
  };
}

/**
 * The hooks OpenCode gets when the plugin runs in its thread. `entry` is the thread's module (plugin/transport/thread-entry.ts);
 * `listenToSignals` false leaves the process's signals alone (tests).
 */
export function threadedHooks(
  input: PluginInput,
  options: Record<string, unknown> | undefined,
  entry: URL,
  WorkerClass: new (url: string) => BunWorker,
  bridgeOptions: BridgeOptions = {},
): Hooks {
  return bridgedHooks(input, options, new WorkerClass(entry.href), bridgeOptions);
}

export interface BridgeOptions {
  /** False leaves the process's signals alone (tests). */
  readonly listenToSignals?: boolean;
  /** The settings' environment to send with `init` (to the local server, whose own environment is another's). */
  readonly env?: Readonly<Record<string, string>>;
  /**
   * The other side outlives this process (the local server): `dispose` hands it the flush without waiting for it. It
   * flushes the same way when the connection ends, so a dispose message lost with the process changes nothing.
   */
  readonly flushOutlivesProcess?: boolean;
  /** The local server this process would have used, starting meanwhile: the thread hands it its queue at close. */
  readonly handOffSocket?: string;
}

/**
 * The hooks OpenCode gets when the plugin's work runs beside it: in its thread, or in the local server
 * (plugin/transport/local-server/client.ts), `channel` being either.
 */
export function bridgedHooks(
  input: PluginInput,
  options: Record<string, unknown> | undefined,
  channel: BunWorker,
  { listenToSignals = true, env, flushOutlivesProcess = false, handOffSocket }: BridgeOptions = {},
): Hooks {
  const settings = mainSettings(options, process.env);
  // Never keeps OpenCode alive by itself: `opencode run` exits once its dispose returned.
  channel.unref();
  const bridge = new ThreadBridge(
    channel,
    input,
    flushOutlivesProcess ? "the optchat local server" : "the plugin's thread",
  );
  if (listenToSignals) bridge.unregister = closeOnSignals(bridge, settings.closeFlushMs + 1_500);
  bridge.post({
    type: "init",
    input: { project: input.project as never, worktree: input.worktree, directory: input.directory },
    options,
    ...(env ? { env, pid: process.pid } : {}),
    ...(handOffSocket ? { handOffSocket } : {}),
  });

  return forwardedHooks(bridge, settings, flushOutlivesProcess);
}

/** The hooks of the main thread: each forwards its call to the thread (waiting only where OpenCode needs an answer). */
function forwardedHooks(bridge: ThreadBridge, settings: MainSettings, flushOutlivesProcess: boolean): Hooks {
  const hook = (name: ForwardedHook, hookInput: unknown, output: unknown) =>
    bridge.request({ type: "hook", hook: name, input: hookInput, output });
  /**
   * A hook OpenCode waits for, timed from OpenCode's side: the thread's own timings leave out the trips between the
   * threads and the wait for OpenCode's event loop (docs/opencode-notes.md "The plugin's thread").
   */
  const waited = async (name: ForwardedHook, hookInput: unknown, output: unknown): Promise<unknown> => {
    const started = performance.now();
    try {
      return await hook(name, hookInput, output);
    } finally {
      if (settings.timingsFile) recordWait(settings.timingsFile, name, started);
    }
  };
  /** Each session's request checks, as its last transform left them (answered by `chat.params` here). */
  const checks = new Map<string, RequestChecks>();
  /** Only a refused prompt reaches OpenCode; a thread that is gone refuses prompts unless readiness is partial. */
  const refuseWhenStopped = (): void => {
    if (bridge.stopped && !settings.partial)
      // Without retry triggers ("unavailable", "terminated"...): a chat.params throw matching one is retried by
      // OpenCode for ~77 s (plugin/base/retry-triggers.ts).
      throw new PromptRefused(
        withoutRetryTriggers(
          `optchat: memory is unavailable: ${bridge.sideName} stopped (${bridge.stopped}); restart OpenCode, or set OPTCHAT_READINESS=partial to continue without memory`,
        ),
      );
  };
  const refusals = (error: unknown): void => {
    if (error instanceof PromptRefused) throw error;
    refuseWhenStopped();
  };

  return {
    "chat.message": async (hookInput, output) => {
      await waited("chat.message", hookInput, { message: output.message, parts: output.parts }).catch(refusals);
    },

    event: async ({ event }) => {
      // Only the events the adapter reads (plugin/opencode/events.ts): streamed deltas and the rest never cross.
      if (!HOST_EVENT_TYPES.has((event as { type?: string }).type ?? "")) return;
      // A session's next request comes with a new transform: its checks are not kept past the session's idle.
      const ended = readHostEvent(event as never);
      if (ended?.type === "idle" || ended?.type === "deleted") checks.delete(ended.hostSessionId);
      try {
        bridge.post({ type: "event", event });
      } catch (error) {
        process.stderr.write(
          `optchat: an OpenCode event could not be passed to ${bridge.sideName}: ${String(error)}\n`,
        );
      }
    },

    "experimental.chat.messages.transform": async (hookInput, output) => {
      // As the adapter finds the session (plugin/host/adapter.ts `transform`).
      const sessionId = (output.messages.at(-1)?.info as { sessionID?: string } | undefined)?.sessionID;
      if (sessionId) checks.delete(sessionId);
      try {
        const changed = (await waited("experimental.chat.messages.transform", hookInput, {
          messages: output.messages,
        })) as TransformReply | undefined;
        // OpenCode reads the array it passed: the thread's result replaces its contents in place.
        if (changed?.messages) output.messages.splice(0, output.messages.length, ...(changed.messages as never[]));
        if (sessionId && changed?.checks) checks.set(sessionId, { ...changed.checks });
      } catch {
        // Never throws (a throw kills the turn in OpenCode 1.18.33); the thread records its own problems.
      }
    },

    // Not waited for (this hook and compacting only note something for the thread's next hooks, and change no output):
    // the thread handles its messages in order, so the note is there before the request's chat.params or the next
    // transform asks. Waiting cost each step 1-11 ms (the thread was storing the previous step meanwhile).
    "experimental.chat.system.transform": async (hookInput, output) => {
      void hook(
        "experimental.chat.system.transform",
        { sessionID: hookInput.sessionID },
        { system: output.system },
      ).catch(() => undefined);
    },

    // Answered here, from the checks the request's transform sent back (plugin/request/checks.ts): the thread runs the
    // same decision on its own state, and notes the model's limits and the request, without being waited for. Waiting
    // cost each request 1-16 ms, most of it the answer's wait for OpenCode's busy event loop.
    "chat.params": async (hookInput) => {
      const model = hookInput.model as unknown as ParamsModel | undefined;
      const picked = { id: model?.id, providerID: model?.providerID, limit: model?.limit };
      void hook("chat.params", { sessionID: hookInput.sessionID, agent: hookInput.agent, model: picked }, {}).catch(
        () => undefined,
      );
      refuseWhenStopped();
      if (hookInput.agent === "title") return;
      const sessionChecks = checks.get(hookInput.sessionID);
      const refusal = sessionChecks ? checkRequestParams(sessionChecks, picked) : undefined;
      if (refusal) throw new PromptRefused(refusal);
    },

    "experimental.session.compacting": async (hookInput) => {
      void hook("experimental.session.compacting", { sessionID: hookInput.sessionID }, {}).catch(() => undefined);
    },

    tool: forwardedTools(bridge) as Hooks["tool"],

    dispose: async () => {
      if (flushOutlivesProcess) {
        // The server flushes and closes this process's adapter after the process has gone (measured: `dispose` was
        // waited for 15-22 ms per run with the server, 40-55 ms with a thread, all of it on the run's exit path).
        const started = performance.now();
        void hook("dispose", {}, {}).catch(() => undefined);
        bridge.stop();
        if (settings.timingsFile) recordWait(settings.timingsFile, "dispose", started);
        return;
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        waited("dispose", {}, {}).catch(() => undefined),
        new Promise((resolve) => {
          timer = setTimeout(resolve, settings.disposeBoundMs);
        }),
      ]).finally(() => clearTimeout(timer));
      bridge.stop();
    },
  };
}

/** The memory tools as OpenCode's thread declares them (plugin/tools/specs.ts); each call runs in the thread. */
function forwardedTools(bridge: ThreadBridge): Record<string, unknown> {
  return declaredMemoryTools(async (name, args, context) => {
    const picked: ToolCallContext = {
      sessionID: context.sessionID,
      messageID: context.messageID,
      agent: context.agent,
      directory: context.directory,
      worktree: context.worktree,
    };
    return (await bridge.request({ type: "tool", name, args, context: picked })) as string;
  });
}

/** One line of the timings file: `{"op":"awaited","hook":…,"ms":…,"at":…}`. */
function recordWait(file: string, hook: ForwardedHook, started: number): void {
  appendTiming(file, { op: "awaited", hook, ms: msSince(started) });
}

/**
 * With OPTCHAT_TIMINGS_FILE: where the plugin's work runs, how long OpenCode waited for the plugin's function
 * (`waitedMs`) and how long its side took to be ready from the call (`readyMs`):
 * `{"op":"load","side":"local server"|"thread",…}`. `bench plugin` counts the runs the local server served (one that
 * was not paid a thread's start) and reports the waits (docs/opencode-notes.md "Eighth pass").
 */
export function recordLoad(
  options: Record<string, unknown> | undefined,
  side: "local server" | "thread",
  load: { readonly started: number; readonly waitedMs: number | undefined },
): void {
  const file = mainSettings(options, process.env).timingsFile;
  const waitedMs = load.waitedMs === undefined ? null : Math.round(load.waitedMs * 1000) / 1000;
  if (file) appendTiming(file, { op: "load", side, waitedMs, readyMs: msSince(load.started) });
}

function msSince(started: number): number {
  return Math.round((performance.now() - started) * 1000) / 1000;
}

/** Appends one JSON line with the time; a write that fails is left out. */
function appendTiming(file: string, entry: Record<string, unknown>): void {
  try {
    appendFileSync(file, `${JSON.stringify({ ...entry, at: Date.now() })}\n`);
  } catch {
    // Timings are for benchmarks: a failed write must not touch the hook.
  }
}
