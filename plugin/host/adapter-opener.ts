import type { PluginInput } from "@opencode-ai/plugin";
import {
  type Config,
  type Memory,
  openMemory,
  redactUrl,
  type SummarizerSettings,
  startWorker,
  WORKER_RUNS_IN,
} from "../../src/memory/index.js";
import type { ResolvedPluginConfig } from "../base/config.js";
import type { Log } from "../base/diagnostics.js";
import type { CompactorModel } from "../opencode/compactor-model.js";
import type { RememberedLimits } from "../request/model-limits.js";
import type { LocalServerHold } from "../transport/local-server/client.js";
import { closeOnSignals, type RegisterClosable } from "../transport/shutdown.js";
import { type HostLookups, OpencodeAdapter } from "./adapter.js";
import { type CompactorHandle, EmbeddedWorker, type LocalHandOff } from "./embedded-worker.js";

/** How soon after a failed database open the next hook call tries again. */
const REOPEN_AFTER_MS = 10_000;

/** What runs the adapter provides it: its database and who closes it (OpenCode's process, or the local server). */
export interface AdapterHost {
  /** Opens the memory service; the local server (plugin/transport/local-server/server.ts) shares one per configuration. */
  openMemory(config: Config): Promise<Memory>;
  /** Registers the adapter to be flushed and closed when its runner stops. */
  readonly register: RegisterClosable;
  /** The OpenCode process served, when it is not this one (the local server): the adapter's lease holder. */
  readonly hostPid?: number;
  /** Model limits the local server's earlier processes learned (plugin/request/model-limits.ts); none in a process's own. */
  readonly rememberedLimits?: RememberedLimits;
  /**
   * The local server: the compactor of a process it serves is its own worker for the database `config` names
   * (plugin/transport/local-server/workers.ts), given the process's compactor model; the process starts none.
   */
  readonly serverCompactor?: (
    config: Config,
    settings: () => Promise<SummarizerSettings>,
    concurrency: number,
  ) => CompactorHandle;
  /**
   * A process that runs its own thread while its local server starts: it holds a connection to the server from its
   * start and gives it its database and compactor model (plugin/transport/local-server/client.ts `holdLocalServer`), whose
   * worker then drains the queue.
   */
  readonly holdServer?: () => LocalServerHold;
}

/** The adapter inside OpenCode's process (its own thread or OpenCode's): its own pool, closed on the process's signals. */
export const IN_PROCESS_HOST: AdapterHost = {
  openMemory: (config) => openMemory(config, { applicationName: `optchat-opencode-${process.pid}` }),
  register: closeOnSignals,
};

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
  host: AdapterHost = IN_PROCESS_HOST,
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
    );
    adapter.attachWorker(compactorOf(adapter, memory, config, compactor, host), handOffOf(config, compactor, host));
    adapter.scheduleProjectReconcile();
    unregister = host.register(adapter, config.plugin.closeFlushMs);
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
  return {
    ready: () => {
      if (unavailable !== undefined && Date.now() - failedAt >= REOPEN_AFTER_MS) current = attempt();
      return current;
    },
    unavailable: () => unavailable,
    unregister: () => unregister(),
  };
}

/** The adapter's compactor worker: the local server's for a process it serves, else one in this process. */
function compactorOf(
  adapter: OpencodeAdapter,
  memory: Memory,
  config: ResolvedPluginConfig,
  compactor: CompactorModel,
  host: AdapterHost,
): CompactorHandle {
  if (host.serverCompactor && config.plugin.embeddedWorker)
    return host.serverCompactor(config.core, compactor.settings, config.plugin.embeddedWorkerConcurrency);
  const worker = new EmbeddedWorker(
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
  // A run whose local server is only starting (a stopped or killed one left jobs due): nobody else runs them now, and
  // the next runs' memory waits for them, so this run's worker starts at once.
  if (host.holdServer && config.plugin.embeddedWorker)
    void memory.host.jobsWaitingForWorker(LEFT_WAITING_S).then(
      (left) => left && worker.startNow("jobs were left waiting by a stopped local server"),
      () => undefined,
    );
  return worker;
}

/**
 * Jobs due when a run starts without its local server were left by a server that stopped (an idle-out drains first):
 * the next runs' memory waits for them. At 5 s the soak's p99 publication lag was 6.0 s over 13 kills (the server
 * that replaced the killed one learns the database only from this run, and is paused while it runs).
 */
const LEFT_WAITING_S = 0;

function handOffOf(
  config: ResolvedPluginConfig,
  compactor: CompactorModel,
  host: AdapterHost,
): LocalHandOff | undefined {
  if (!host.holdServer || !config.plugin.embeddedWorker) return undefined;
  const hold = host.holdServer();
  let given: Promise<void> | undefined;
  const give = () => {
    given ??= compactor.settings().then((settings) =>
      hold.send({
        type: "hand-off",
        config: config.core,
        settings,
        concurrency: config.plugin.embeddedWorkerConcurrency,
      }),
    );
    return given;
  };
  return {
    begin: () => void give().catch(() => undefined),
    end: async () => {
      try {
        await give();
      } finally {
        hold.release();
      }
    },
  };
}
