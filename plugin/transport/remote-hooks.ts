// size: the forwarding hook table is one object literal of OpenCode's hooks, each entry a few lines.
/**
 * The hooks OpenCode gets: each forwards its call over a channel (plugin/transport/channel.ts) to the plugin's side,
 * waiting for an answer only where OpenCode needs one (a refused prompt, the transformed messages, a tool's result, the
 * flush at close). The only module of OpenCode's side that decides anything: it holds the one `chat.params` answer
 * (from the checks the side sent back with the request's transform, plugin/request/checks.ts) and the one refusal
 * path (the side's PromptRefused, or a side that is gone; never with the words OpenCode retries on).
 *
 * Why here, whatever runs the plugin (issue 9 item 2, issue 35; docs/opencode-notes.md "The plugin's thread"):
 * OpenCode runs plugins on its one JavaScript thread, so this module imports only what it needs (the channel, the
 * tools' declarations); the work runs beside OpenCode in the plugin's thread or the local server. OpenCode gets these
 * hooks at once, before the channel is set up (`channel` a promise): OpenCode waits for each plugin's function before
 * it goes on with its start, and the first hook comes later; calls made meanwhile wait and go over in order.
 */
import { appendFileSync } from "node:fs";
import type { Hooks, PluginInput } from "@opencode-ai/plugin";
import { PromptRefused } from "../base/prompt-refused.js";
import { givenSetting, PLUGIN_SETTINGS } from "../base/settings.js";
import { HOST_EVENT_TYPES, readHostEvent } from "../opencode/events.js";
import { checkRequestParams, type ParamsModel, type RequestChecks } from "../request/checks.js";
import { declaredMemoryTools } from "../tools/specs.js";
import type { Channel } from "./channel.js";
import type { ForwardedHook, ToolCallContext, TransformReply } from "./protocol.js";
import { RemoteSide } from "./remote-side.js";
import { closeOnSignals } from "./shutdown.js";

/** Settings OpenCode's side reads itself (plugin/base/settings.ts), before the side has resolved the configuration. */
interface RemoteSettings {
  readonly partial: boolean;
  /** OPTCHAT_TIMINGS_FILE: how long OpenCode waited for each forwarded hook, measured here (`bench plugin`). */
  readonly timingsFile: string | undefined;
  /** OPTCHAT_CLOSE_FLUSH_MS: a stop signal's wait for the side's flush (plus 1.5 s for the round trip). */
  readonly closeFlushMs: number;
  /** How long the dispose waits for the side's flush before it ends the channel anyway. */
  readonly disposeBoundMs: number;
}

/** Leniently: a bad value is the default here, and the side's configuration check refuses every prompt naming it. */
function remoteSettings(options: Record<string, unknown> | undefined, env: NodeJS.ProcessEnv): RemoteSettings {
  const given = givenSetting("closeFlushMs", options, env);
  const flush = given === undefined ? PLUGIN_SETTINGS.closeFlushMs.default : Number(given);
  const closeFlushMs = Number.isFinite(flush) ? Math.min(Math.max(flush, 0), 60_000) : 10_000;
  const timings = givenSetting("timingsFile", options, env);
  return {
    partial: givenSetting("readiness", options, env) === "partial",
    timingsFile: typeof timings === "string" && timings !== "" ? timings : undefined,
    closeFlushMs,
    // The side bounds its own flush by closeFlushMs (plus 500 ms); this only guards against a side that hangs.
    disposeBoundMs: closeFlushMs + 2_000,
  };
}

export interface RemoteOptions {
  /** False leaves the process's signals alone (tests). */
  readonly listenToSignals?: boolean;
}

/**
 * The hooks OpenCode gets, forwarding to the plugin's side over `channel` (or over the channel it resolves to; a
 * rejection refuses prompts with why).
 */
export function remoteHooks(
  input: PluginInput,
  options: Record<string, unknown> | undefined,
  channel: Channel | Promise<Channel>,
  { listenToSignals = true }: RemoteOptions = {},
): Hooks {
  const settings = remoteSettings(options, process.env);
  const side = new RemoteSide(input);
  const attach = (ready: Channel) => {
    const data = { project: input.project as never, worktree: input.worktree, directory: input.directory };
    side.attach(ready, { type: "init", input: data, options, ...ready.init });
    if (listenToSignals && !side.stopped) side.unregister = closeOnSignals(side, settings.closeFlushMs + 1_500);
  };
  if (channel instanceof Promise) channel.then(attach, (error: unknown) => side.setUpFailed(error));
  else attach(channel);
  return forwardedHooks(side, settings);
}

/** The hook table: each forwards its call (waiting only where OpenCode needs an answer). */
function forwardedHooks(side: RemoteSide, settings: RemoteSettings): Hooks {
  /** Waits for the channel (undefined: none could be set up, and prompts are refused with why). */
  const ready = (): Promise<Channel | undefined> => side.ready.catch(() => undefined);
  const hook = (name: ForwardedHook, hookInput: unknown, output: unknown) =>
    side.whenReady(() => side.request({ type: "hook", hook: name, input: hookInput, output }));
  /**
   * A hook OpenCode waits for, timed from OpenCode's side: the side's own timings leave out the trips over the channel
   * and the wait for OpenCode's event loop (docs/opencode-notes.md "The plugin's thread").
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
  /** Only a refused prompt reaches OpenCode; a side that is gone refuses prompts unless readiness is partial. */
  const refuseWhenStopped = (): void => {
    const refusal = side.refusalWhenStopped(settings.partial);
    if (refusal) throw refusal;
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
      await side.whenReady(() => {
        try {
          side.post({ type: "event", event });
        } catch (error) {
          process.stderr.write(
            `optchat: an OpenCode event could not be passed to ${side.sideName}: ${String(error)}\n`,
          );
        }
      });
    },

    "experimental.chat.messages.transform": async (hookInput, output) => {
      // As the adapter finds the session (plugin/host/adapter.ts `transform`).
      const sessionId = (output.messages.at(-1)?.info as { sessionID?: string } | undefined)?.sessionID;
      if (sessionId) checks.delete(sessionId);
      try {
        const changed = (await waited("experimental.chat.messages.transform", hookInput, {
          messages: output.messages,
        })) as TransformReply | undefined;
        // OpenCode reads the array it passed: the side's result replaces its contents in place.
        if (changed?.messages) output.messages.splice(0, output.messages.length, ...(changed.messages as never[]));
        if (sessionId && changed?.checks) checks.set(sessionId, { ...changed.checks });
      } catch {
        // Never throws (a throw kills the turn in OpenCode 1.18.33); the side records its own problems.
      }
    },

    // Not waited for (this hook and compacting only note something for the side's next hooks, and change no output):
    // the side handles its messages in order, so the note is there before the request's chat.params or the next
    // transform asks. Waiting cost each step 1-11 ms (the thread was storing the previous step meanwhile).
    "experimental.chat.system.transform": async (hookInput, output) => {
      void hook(
        "experimental.chat.system.transform",
        { sessionID: hookInput.sessionID },
        { system: output.system },
      ).catch(() => undefined);
    },

    // Answered here, from the checks the request's transform sent back (plugin/request/checks.ts), and only here: the
    // side is told what was decided (and notes the model's limits and the request) without being waited for. Waiting
    // cost each request 1-16 ms, most of it the answer's wait for OpenCode's busy event loop.
    "chat.params": async (hookInput) => {
      const model = hookInput.model as unknown as ParamsModel | undefined;
      const picked = { id: model?.id, providerID: model?.providerID, limit: model?.limit };
      // The title request runs beside the turn's own requests, often with another model: never checked.
      const sessionChecks = hookInput.agent === "title" ? undefined : checks.get(hookInput.sessionID);
      const refusal = sessionChecks ? checkRequestParams(sessionChecks, picked) : undefined;
      const decided = sessionChecks ? { ...sessionChecks } : undefined;
      const forwarded = { sessionID: hookInput.sessionID, agent: hookInput.agent, model: picked, checks: decided };
      void hook("chat.params", forwarded, {}).catch(() => undefined);
      await side.whenReady(refuseWhenStopped);
      if (refusal) throw new PromptRefused(refusal);
    },

    "experimental.session.compacting": async (hookInput) => {
      void hook("experimental.session.compacting", { sessionID: hookInput.sessionID }, {}).catch(() => undefined);
    },

    tool: forwardedTools(side) as Hooks["tool"],

    dispose: async () => {
      const channel = await ready();
      if (!channel) return;
      if (channel.outlivesProcess) {
        // The server flushes and closes this process's adapter after the process has gone (measured: `dispose` was
        // waited for 15-22 ms per run with the server, 40-55 ms with a thread, all of it on the run's exit path).
        const started = performance.now();
        void hook("dispose", {}, {}).catch(() => undefined);
        side.stop();
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
      side.stop();
    },
  };
}

/** The memory tools as OpenCode's side declares them (plugin/tools/specs.ts); each call runs on the plugin's side. */
function forwardedTools(side: RemoteSide): Record<string, unknown> {
  return declaredMemoryTools(async (name, args, context) => {
    const picked: ToolCallContext = {
      sessionID: context.sessionID,
      messageID: context.messageID,
      agent: context.agent,
      directory: context.directory,
      worktree: context.worktree,
    };
    return (await side.whenReady(() => side.request({ type: "tool", name, args, context: picked }))) as string;
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
  side: "local server" | "thread" | "opencode",
  load: { readonly started: number; readonly waitedMs: number | undefined },
): void {
  const file = remoteSettings(options, process.env).timingsFile;
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
