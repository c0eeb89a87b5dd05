import type { Hooks, Plugin, PluginInput } from "@opencode-ai/plugin";
import { openMemory, redactUrl, startWorker } from "../src/memory/index.js";
import { type HostLookups, OpencodeAdapter } from "./adapter.js";
import { compactorModel } from "./compactor-model.js";
import { type ResolvedPluginConfig, resolvePluginConfig } from "./config.js";
import { EmbeddedWorker } from "./embedded-worker.js";
import { PromptRefused } from "./lease.js";
import type { HostMessage, HostMessageInfo, HostPart } from "./messages.js";
import { bounded, closeOnSignals } from "./shutdown.js";
import { memoryTools } from "./tools.js";

/** How long a hook waits for one OpenCode client lookup before going on without it. */
const LOOKUP_TIMEOUT_MS = 2_000;
/** How soon after a failed database open the next hook call tries again. */
const REOPEN_AFTER_MS = 10_000;

/**
 * The optchat plugin for OpenCode 1.18.33. Add it to opencode.json as
 * `"plugin": [["/absolute/path/to/optchat/plugin/index.ts", { "databaseUrl": "postgres://…" }]]`
 * (or a plain path string, with settings from the environment). See README "Use it with OpenCode".
 */
export const OptchatPlugin: Plugin = async (input: PluginInput, options?: Record<string, unknown>): Promise<Hooks> => {
  const log = (level: "info" | "warn" | "error", message: string) => {
    // OpenCode shows plugin stderr in its log; the client's app.log would need a round trip per line.
    if (level !== "info" || process.env.OPTCHAT_DEBUG) process.stderr.write(`${message}\n`);
  };
  let config: ResolvedPluginConfig;
  try {
    config = resolvePluginConfig(options, process.env);
  } catch (error) {
    // Every prompt is refused with the configuration error: running silently without memory would hide it.
    const message = error instanceof Error ? error.message : String(error);
    log("error", message);
    return {
      "chat.message": async () => {
        throw new PromptRefused(message);
      },
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
  // The database is opened in the background so OpenCode starts at once; the first prompt waits for it. A failed
  // open (Postgres down, schema not migrated) is tried again at the next hook call after REOPEN_AFTER_MS, so fixing
  // the database does not need an OpenCode restart.
  let unavailable: string | undefined;
  let failedAt = 0;
  let unregister = () => {};
  const open = async (): Promise<OpencodeAdapter> => {
    const memory = await openMemory(config.core, { applicationName: `optchat-opencode-${process.pid}` });
    const adapter = new OpencodeAdapter(
      memory,
      config,
      { id: input.project.id, worktree: input.worktree, directory: input.directory },
      lookups,
      log,
    );
    adapter.attachWorker(
      new EmbeddedWorker(
        config.plugin.embeddedWorker,
        (reason) => {
          adapter.noteWorkerEvent({ type: `starting (${reason})` });
          return startWorker(memory, config.core, (event) => adapter.noteWorkerEvent(event as { type: string }), {
            concurrency: config.plugin.embeddedWorkerConcurrency,
            summarizer: compactor.summarizer,
          });
        },
        (error) => adapter.problem("worker", undefined, error),
        config.plugin.embeddedWorkerStartMs,
      ),
    );
    adapter.scheduleProjectReconcile();
    // Pending ingestion and outcomes are flushed when OpenCode is told to stop (plugin/shutdown.ts).
    unregister = closeOnSignals(adapter, config.plugin.closeFlushMs);
    unavailable = undefined;
    return adapter;
  };
  const attempt = (): Promise<OpencodeAdapter> => {
    const pending = open();
    pending.catch((error: unknown) => {
      failedAt = Date.now();
      unavailable = `optchat: memory is unavailable: ${error instanceof Error ? error.message : String(error)} (database ${redactUrl(config.core.databaseUrl)}; setting DATABASE_URL or plugin option databaseUrl; optchat retries at the next prompt)`;
      log("error", unavailable);
    });
    return pending;
  };
  let current = attempt();
  const ready = (): Promise<OpencodeAdapter> => {
    if (unavailable !== undefined && Date.now() - failedAt >= REOPEN_AFTER_MS) current = attempt();
    return current;
  };
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
          throw new PromptRefused(`${unavailable} (or set OPTCHAT_READINESS=partial to continue without memory)`);
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
      try {
        // 1.18.33 passes a v2-shaped model ({id, providerID, limit}); `provider.info` is absent.
        const model = hookInput.model as unknown as {
          id?: string;
          providerID?: string;
          limit?: { context?: number; output?: number };
        };
        if (model?.providerID && model.id) {
          adapter.noteModelLimits(model.providerID, model.id, model.limit);
          // The title request runs beside the turn's own requests, often with another model.
          if (hookInput.agent !== "title")
            adapter.checkUnsized(hookInput.sessionID, `${model.providerID}/${model.id}`, model.limit);
        }
      } catch (error) {
        await adapter.problem("params", hookInput.sessionID, error);
      }
      // Strict readiness and budget errors stop the request here, where OpenCode reports the error to the user
      // (docs/opencode-notes.md "Errors thrown by hooks"); the transform itself must never throw.
      if (hookInput.agent !== "title") {
        adapter.noteRequestSent();
        const pending = adapter.takePendingError(hookInput.sessionID);
        if (pending) throw new PromptRefused(pending);
      }
    },

    "experimental.session.compacting": async (hookInput) => {
      await withAdapter((adapter) => adapter.noteCompacting(hookInput.sessionID));
    },

    tool: memoryTools(ready),

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
};

/** What `client.config.providers()` answers, as far as the plugin reads it. */
interface ProvidersAnswer {
  data?: { providers?: { id: string; models?: Record<string, { limit?: { context?: number; output?: number } }> }[] };
}

function clientLookups(input: PluginInput): HostLookups {
  const client = input.client;
  let providers: Promise<ProvidersAnswer | undefined> | undefined;
  return {
    async parentOf(hostSessionId) {
      const result = await withTimeout(client.session.get({ path: { id: hostSessionId } }));
      const info = (result as { data?: { parentID?: string } } | undefined)?.data;
      return info?.parentID;
    },
    async modelLimits(providerId, modelId) {
      // Kept once OpenCode answered with its providers. A request that failed or answered nothing is forgotten, and
      // a lookup that timed out leaves the request running for the next one: a slow answer (OpenCode still starting
      // its providers under load) must never stand in for the model's limits for the rest of the process (it made a
      // 6k-token model's request go out unrefused, sized for the assumed 32k window).
      providers ??= client.config.providers().then(
        (result) => {
          if (!(result as ProvidersAnswer | undefined)?.data?.providers) providers = undefined;
          return result as ProvidersAnswer | undefined;
        },
        () => {
          providers = undefined;
          return undefined;
        },
      );
      const result = await withTimeout(providers);
      const provider = result?.data?.providers?.find((p) => p.id === providerId);
      const limit = provider?.models?.[modelId]?.limit;
      return limit?.context ? { context: limit.context, output: limit.output ?? 4096 } : undefined;
    },
    async transcript(hostSessionId) {
      // `GET /session/:id/message`: [{info, parts}] oldest first (works inside `opencode run` too: the client calls
      // the in-process app; docs/opencode-notes.md).
      const result = await withTimeout(client.session.messages({ path: { id: hostSessionId } }));
      const data = (result as { data?: unknown } | undefined)?.data;
      return Array.isArray(data) ? (data as HostMessage[]) : undefined;
    },
  };
}

async function withTimeout<T>(promise: Promise<T>): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), LOOKUP_TIMEOUT_MS);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
