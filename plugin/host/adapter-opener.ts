import type { PluginInput } from "@opencode-ai/plugin";
import { type Memory, redactUrl, startWorker, WORKER_RUNS_IN } from "../../src/memory/index.js";
import { type Clock, systemClock } from "../base/clock.js";
import type { ResolvedPluginConfig } from "../base/config.js";
import type { Log } from "../base/diagnostics.js";
import type { CompactorModel } from "../opencode/compactor-model.js";
import { OpencodeAdapter } from "./adapter.js";
import type { HostLookups } from "./client-lookups.js";
import { type CompactorHandle, EmbeddedWorker } from "./embedded-worker.js";
import type { Runner } from "./runner.js";

/** How soon after a failed database open the next hook call tries again. */
const REOPEN_AFTER_MS = 10_000;

export interface LazyAdapter {
  /** The adapter once the database is open; rejects while it cannot be (tried again after REOPEN_AFTER_MS). */
  ready(): Promise<OpencodeAdapter>;
  /** Why memory is unavailable (with the setting to check), while it is. */
  unavailable(): string | undefined;
  /** Stops closing the adapter on signals (after its dispose). */
  unregister(): void;
}

/**
 * The database is opened in the background so OpenCode starts at once; the first prompt waits for it. A failed open
 * (Postgres down, schema not migrated) is tried again at the next hook call after REOPEN_AFTER_MS, so fixing the
 * database does not need an OpenCode restart. The adapter gets its embedded worker (started when needed), the pass
 * over the project's stuck turns, and a flush when OpenCode is told to stop (plugin/transport/shutdown.ts).
 */
export function openAdapterLazily(
  input: PluginInput,
  config: ResolvedPluginConfig,
  lookups: HostLookups,
  compactor: CompactorModel,
  log: Log,
  host: Runner,
  clock: Clock = systemClock,
): LazyAdapter {
  let unavailable: string | undefined;
  let failedAt = 0;
  let unregister = () => {};
  const open = async (): Promise<OpencodeAdapter> => {
    const memory = await host.openMemory(config.core);
    const adapter = new OpencodeAdapter(
      memory,
      config,
      {
        ...{ id: input.project.id, worktree: input.worktree, directory: input.directory },
        ...{ hostPid: host.hostPid, rememberedLimits: host.rememberedLimits },
      },
      lookups,
      log,
      clock,
    );
    adapter.attachWorker(compactorOf(adapter, memory, config, compactor, host));
    adapter.scheduleProjectReconcile();
    unregister = host.register(adapter, config.plugin.closeFlushMs);
    unavailable = undefined;
    return adapter;
  };
  const attempt = (): Promise<OpencodeAdapter> => {
    const pending = open();
    pending.catch((error: unknown) => {
      failedAt = clock.now();
      unavailable = `optchat: memory is unavailable: ${error instanceof Error ? error.message : String(error)} (database ${redactUrl(config.core.databaseUrl)}; setting DATABASE_URL or plugin option databaseUrl; optchat retries at the next prompt)`;
      log("error", unavailable);
    });
    return pending;
  };
  let current = attempt();
  return {
    ready: () => {
      if (unavailable !== undefined && clock.now() - failedAt >= REOPEN_AFTER_MS) current = attempt();
      return current;
    },
    unavailable: () => unavailable,
    unregister: () => unregister(),
  };
}

/**
 * The adapter's compactor worker: its own embedded worker, unless its runner supplies one when the worker is on (the
 * local server's, or the own one handing its queue to a local server at close: plugin/host/runner.ts `compactor`).
 */
function compactorOf(
  adapter: OpencodeAdapter,
  memory: Memory,
  config: ResolvedPluginConfig,
  compactor: CompactorModel,
  host: Runner,
): CompactorHandle {
  const own = () =>
    new EmbeddedWorker(
      config.plugin.embeddedWorker,
      (reason) => {
        adapter.noteWorkerEvent({ type: `starting (${reason})` });
        return startWorker(memory, config.core, (event) => adapter.noteWorkerEvent(event as { type: string }), {
          concurrency: config.plugin.embeddedWorkerConcurrency,
          summarizer: compactor.summarizer,
          runsIn: WORKER_RUNS_IN.opencode,
        });
      },
      (error) => adapter.problem("worker", undefined, error, { background: true }),
      config.plugin.embeddedWorkerStartMs,
    );
  if (host.compactor && config.plugin.embeddedWorker) return host.compactor({ memory, config, model: compactor }, own);
  return own();
}
