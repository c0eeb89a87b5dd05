import type { Hooks, PluginInput } from "@opencode-ai/plugin";
import { type ResolvedPluginConfig, resolvePluginConfig } from "../base/config.js";
import { compactorModel } from "../opencode/compactor-model.js";
import type { HostMessage, HostMessageInfo, HostPart } from "../opencode/messages.js";
import type { ParamsModel, RequestChecks } from "../request/checks.js";
import { memoryTools } from "../tools/tools.js";
import { bounded } from "../transport/shutdown.js";
import { PromptRefused } from "../turns/lease.js";
import type { OpencodeAdapter } from "./adapter.js";
import { type AdapterHost, IN_PROCESS_HOST, openAdapterLazily } from "./adapter-opener.js";
import { clientLookups, withTimeout } from "./client-lookups.js";

/** One plugin instance: its hooks, and what the plugin's thread sends back beside a transformed request. */
export interface OptchatInstance {
  readonly hooks: Hooks;
  /** The session's request checks after its transform (plugin/request/checks.ts); undefined without an adapter. */
  requestChecks(hostSessionId: string): Promise<RequestChecks | undefined>;
}

/**
 * The optchat plugin's hooks, run where the adapter lives: in the plugin's thread (plugin/transport/thread-entry.ts), or in
 * OpenCode's own thread with OPTCHAT_PLUGIN_THREAD=off (plugin/index.ts decides).
 */
export async function optchatHooks(input: PluginInput, options?: Record<string, unknown>): Promise<Hooks> {
  return (await optchatInstance(input, options)).hooks;
}

/** Where an instance runs: the environment its settings come from, and its adapter's host. */
export interface InstanceHost extends AdapterHost {
  readonly env: Readonly<Record<string, string | undefined>>;
}

/**
 * The plugin's hooks with what the plugin's thread reads beside them (plugin/transport/plugin-side.ts). `host` is OpenCode's
 * process by default; the local server passes the OpenCode process's environment and its shared pools.
 */
export async function optchatInstance(
  input: PluginInput,
  options?: Record<string, unknown>,
  host: InstanceHost = { ...IN_PROCESS_HOST, env: process.env },
): Promise<OptchatInstance> {
  const log = (level: "info" | "warn" | "error", message: string) => {
    // OpenCode shows plugin stderr in its log; the client's app.log would need a round trip per line.
    if (level !== "info" || host.env.OPTCHAT_DEBUG) process.stderr.write(`${message}\n`);
  };
  let config: ResolvedPluginConfig;
  try {
    config = resolvePluginConfig(options, host.env);
  } catch (error) {
    // Every prompt is refused with the configuration error: running silently without memory would hide it.
    const message = error instanceof Error ? error.message : String(error);
    log("error", message);
    return {
      hooks: {
        "chat.message": async () => {
          throw new PromptRefused(message);
        },
      },
      requestChecks: async () => undefined,
    };
  }

  const lookups = clientLookups(input);
  // The embedded compactor's model: OpenCode's small_model, else a cheap model of the main provider (issue 13 item 2).
  const compactor = compactorModel(
    {
      configGet: () => withTimeout(input.client.config.get()),
      configProviders: () => withTimeout(input.client.config.providers()),
    },
    config.core,
    log,
  );
  const { ready, unavailable, unregister } = openAdapterLazily(input, config, lookups, compactor, log, host);
  const withAdapter = (work: (adapter: OpencodeAdapter) => void | Promise<void>) =>
    ready()
      .then(work, () => undefined)
      .catch((error) => log("error", `optchat: ${String(error)}`));

  const hooks: Hooks = {
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
      try {
        await adapter.admit(
          hookInput.sessionID,
          output.message as unknown as HostMessageInfo,
          output.parts as unknown as HostPart[],
        );
      } catch (error) {
        if (error instanceof PromptRefused) {
          // OpenCode 1.18.33 reports a chat.message throw only as "Unexpected server error" (the prompt is not
          // stored, which is the point): the reason goes to stderr, and to adapter_problems for memory_inspect.
          await adapter.problem("lease", hookInput.sessionID, error);
          throw error;
        }
        await adapter.problem("admit", hookInput.sessionID, error);
      } finally {
        adapter.recordTiming("chat.message", started);
      }
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

    "chat.params": async (hookInput) => {
      let adapter: OpencodeAdapter | undefined;
      try {
        adapter = await ready();
      } catch {
        return;
      }
      // 1.18.33 passes a v2-shaped model ({id, providerID, limit}); `provider.info` is absent.
      const model = hookInput.model as unknown as ParamsModel | undefined;
      let refusal: string | undefined;
      try {
        if (model?.providerID && model.id) adapter.noteModelLimits(model.providerID, model.id, model.limit);
        // The title request runs beside the turn's own requests, often with another model: never checked.
        if (hookInput.agent !== "title") {
          adapter.noteRequestSent();
          refusal = adapter.checkParams(hookInput.sessionID, model);
        }
      } catch (error) {
        await adapter.problem("params", hookInput.sessionID, error);
      }
      // Strict readiness and budget errors stop the request here, where OpenCode reports the error to the user
      // (docs/opencode-notes.md "Errors thrown by hooks"); the transform itself must never throw.
      if (refusal) throw new PromptRefused(refusal);
    },

    "experimental.session.compacting": async (hookInput) => {
      await withAdapter((adapter) => adapter.noteCompacting(hookInput.sessionID));
    },

    // JSON Schema arguments (plugin/tools/args.ts): @opencode-ai/plugin's types only describe zod ones.
    tool: memoryTools(ready) as unknown as Hooks["tool"],

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
  return {
    hooks,
    requestChecks: (hostSessionId) =>
      ready().then(
        (adapter) => adapter.requestChecks(hostSessionId),
        () => undefined,
      ),
  };
}
