// size: the instance's hook table is one object literal of OpenCode's hooks, each entry a few lines.
/**
 * One plugin instance's hooks, run on the plugin's side (plugin/transport/plugin-side.ts) with the data OpenCode's
 * side forwards: each hands its call to the adapter. Nothing here decides what OpenCode sees of a refusal or of
 * `chat.params`: OpenCode's side does (plugin/transport/remote-hooks.ts); the only throw is a refused prompt.
 */
import type { Hooks, PluginInput } from "@opencode-ai/plugin";
import { bounded } from "../base/closing.js";
import { type ResolvedPluginConfig, resolvePluginConfig } from "../base/config.js";
import { PromptRefused } from "../base/prompt-refused.js";
import { compactorModel } from "../opencode/compactor-model.js";
import type { HostMessage, HostMessageInfo, HostPart } from "../opencode/messages.js";
import type { ParamsModel, RequestChecks } from "../request/checks.js";
import { memoryTools } from "../tools/tools.js";
import type { OpencodeAdapter } from "./adapter.js";
import { type LazyAdapter, openAdapterLazily } from "./adapter-opener.js";
import { clientLookups, withTimeout } from "./client-lookups.js";
import type { Runner } from "./runner.js";

/** One plugin instance: its hooks, and what the plugin's side sends back beside a transformed request. */
export interface OptchatInstance {
  readonly hooks: Hooks;
  /** The session's request checks after its transform (plugin/request/checks.ts); undefined without an adapter. */
  requestChecks(hostSessionId: string): Promise<RequestChecks | undefined>;
}

/** What `chat.params` forwards: the model OpenCode passed, and the checks as OpenCode's side decided them. */
interface ParamsInput {
  readonly sessionID: string;
  readonly agent?: string;
  readonly model?: ParamsModel;
  readonly checks?: RequestChecks;
}

type Log = (level: "info" | "warn" | "error", message: string) => void;

/** An instance that refuses every prompt with why: a configuration error, or a start that failed. */
export function refusingInstance(message: string): OptchatInstance {
  return {
    hooks: {
      "chat.message": async () => {
        throw new PromptRefused(message);
      },
    },
    requestChecks: async () => undefined,
  };
}

/**
 * The plugin's hooks with what the plugin's side reads beside them. `runner` is what runs it (plugin/host/runner.ts):
 * the environment its settings come from, its pool, who closes it.
 */
export async function optchatInstance(
  input: PluginInput,
  options: Record<string, unknown> | undefined,
  runner: Runner,
): Promise<OptchatInstance> {
  const log: Log = (level, message) => {
    // OpenCode shows plugin stderr in its log; the client's app.log would need a round trip per line.
    if (level !== "info" || runner.env.OPTCHAT_DEBUG) process.stderr.write(`${message}\n`);
  };
  let config: ResolvedPluginConfig;
  try {
    config = resolvePluginConfig(options, runner.env);
  } catch (error) {
    // Every prompt is refused with the configuration error: running silently without memory would hide it.
    const message = error instanceof Error ? error.message : String(error);
    log("error", message);
    return refusingInstance(message);
  }
  // The embedded compactor's model: OpenCode's small_model, else a cheap model of the main provider (issue 13 item 2).
  const compactor = compactorModel(
    {
      configGet: () => withTimeout(input.client.config.get()),
      configProviders: () => withTimeout(input.client.config.providers()),
    },
    config.core,
    log,
  );
  const lazy = openAdapterLazily(input, config, clientLookups(input), compactor, log, runner);
  return {
    hooks: instanceHooks(config, compactor, lazy, runner, log),
    requestChecks: (hostSessionId) =>
      lazy.ready().then(
        (adapter) => adapter.requestChecks(hostSessionId),
        () => undefined,
      ),
  };
}

function instanceHooks(
  config: ResolvedPluginConfig,
  compactor: ReturnType<typeof compactorModel>,
  { ready, unavailable, unregister }: LazyAdapter,
  runner: Runner,
  log: Log,
): Hooks {
  const withAdapter = (work: (adapter: OpencodeAdapter) => void | Promise<void>) =>
    ready()
      .then(work, () => undefined)
      .catch((error) => log("error", `optchat: ${String(error)}`));
  return {
    "chat.message": async (hookInput, output) => {
      // The whole hook, the wait for the database's open included: what OpenCode waits for before it goes on.
      const started = performance.now();
      let adapter: OpencodeAdapter;
      try {
        adapter = await ready();
      } catch {
        // Strict readiness: say why memory is missing instead of answering without it; partial: run natively.
        if (config.plugin.readiness === "strict")
          throw new PromptRefused(`${unavailable()} (or set OPTCHAT_READINESS=partial to continue without memory)`);
        return;
      }
      // No usable compactor model (strict, never the fake in its place): say what to set instead of going on.
      const noModel = compactor.problem();
      if (noModel) throw new PromptRefused(noModel);
      await admit(adapter, hookInput.sessionID, output.message, output.parts).finally(() =>
        adapter.recordTiming("chat.message", started),
      );
    },

    event: async ({ event }) => {
      await withAdapter((adapter) =>
        adapter.onEvent(event as unknown as { type?: string; properties?: Record<string, unknown> }),
      );
    },

    "experimental.chat.messages.transform": async (_hookInput, output) => {
      // Never throws (a throw kills the turn in OpenCode 1.18.33): the adapter catches and records everything.
      await withAdapter((adapter) => adapter.transform(output.messages as unknown as HostMessage[]));
    },

    "experimental.chat.system.transform": async (hookInput, output) => {
      await withAdapter((adapter) => {
        if (hookInput.sessionID) adapter.noteSystemPrompt(hookInput.sessionID, output.system);
      });
    },

    // Only notes: the model's limits, the request on its way, and what OpenCode's side decided of it.
    "chat.params": async (hookInput) => {
      await withAdapter(async (adapter) => {
        const { sessionID, agent, model, checks } = hookInput as unknown as ParamsInput;
        try {
          // 1.18.33 passes a v2-shaped model ({id, providerID, limit}); `provider.info` is absent.
          if (model?.providerID && model.id) adapter.noteModelLimits(model.providerID, model.id, model.limit);
          // The title request runs beside the turn's own requests, often with another model: never checked.
          if (agent === "title") return;
          adapter.noteRequestSent();
          if (checks) adapter.noteRequestChecks(sessionID, checks);
        } catch (error) {
          await adapter.problem("params", sessionID, error);
        }
      });
    },

    "experimental.session.compacting": async (hookInput) => {
      await withAdapter((adapter) => adapter.noteCompacting(hookInput.sessionID));
    },

    // JSON Schema arguments (plugin/tools/args.ts): @opencode-ai/plugin's types only describe zod ones.
    tool: memoryTools(ready, runner.kind) as unknown as Hooks["tool"],

    dispose: async () => {
      // Bounded: OpenCode 1.18.33 awaits this before it goes on disposing the instance.
      const started = performance.now();
      await withAdapter(async (adapter) => {
        await bounded(adapter.close(config.plugin.closeFlushMs), config.plugin.closeFlushMs + 500);
        adapter.recordTiming("dispose", started);
        // OpenCode may load the plugin again in this process (a new instance); this adapter is done.
        unregister();
      });
    },
  };
}

/** `chat.message`'s admission; a refused prompt is recorded and thrown, anything else only recorded. */
async function admit(adapter: OpencodeAdapter, sessionId: string, message: unknown, parts: unknown): Promise<void> {
  try {
    await adapter.admit(sessionId, message as HostMessageInfo, parts as HostPart[]);
  } catch (error) {
    if (error instanceof PromptRefused) {
      // OpenCode 1.18.33 reports a chat.message throw only as "Unexpected server error" (the prompt is not
      // stored, which is the point): the reason goes to stderr, and to adapter_problems for memory_inspect.
      await adapter.problem("lease", sessionId, error);
      throw error;
    }
    await adapter.problem("admit", sessionId, error);
  }
}
