import { z } from "zod";
import {
  type Config,
  createSummarizer,
  type Memory,
  openMemory,
  type SummarizerSettings,
  startWorker,
  WORKER_RUNS_IN,
} from "../../../src/memory/index.js";
import type { CompactorHandle } from "../../host/embedded-worker.js";
import type { RememberedLimits } from "../../request/model-limits.js";
import { ServedWorker } from "./served-worker.js";
import { keyOf, ServerWorkers } from "./workers.js";

/** PostgreSQL's "database does not exist": a database dropped under the server is not coming back. */
const DATABASE_GONE = "3D000";

/**
 * One memory service per database configuration, shared by the local server's connections: its pool stays open
 * between processes, and its compactor worker (plugin/transport/local-server/workers.ts) drains the queue between runs. A connection's
 * adapter gets the service without `close` (the pool is the server's to close).
 */
export class ServerMemories {
  private readonly opened = new Map<string, Promise<Memory>>();
  readonly workers: ServerWorkers;
  /** The models' limits the connections learned, for the next ones (plugin/request/model-limits.ts). */
  readonly limits: RememberedLimits = new Map();
  /** True once a process gave the server work: a memory opened for it, or a hand-off. */
  used = false;

  /**
   * `idleMs`: the server's idle time. Its connections stay open as long as the server may wait for the next process:
   * with node-postgres's 10 s default the backends (which had planned the statements, measured ~7 ms each to warm)
   * were closed between runs a few seconds apart.
   */
  constructor(
    private readonly idleMs: number,
    private readonly log: (line: string) => void,
  ) {
    this.workers = new ServerWorkers({
      start: async (config, settings, concurrency) =>
        startWorker(await this.openShared(config), config, (event) => this.report(event), {
          concurrency,
          summarizer: () => createSummarizer(settings),
          runsIn: WORKER_RUNS_IN.localServer,
        }),
      jobsWaiting: async (config, seconds) => (await this.openShared(config)).host.jobsWaitingForWorker(seconds),
      log,
      now: () => Date.now(),
    });
  }

  /** The service for a connection's adapter. */
  open(config: Config): Promise<Memory> {
    return this.openShared(config).then((memory) => {
      this.used = true;
      return withoutClose(memory);
    });
  }

  /** A served process's compactor: the server's worker for its database. */
  compactor(config: Config, settings: () => Promise<SummarizerSettings>, concurrency: number): CompactorHandle {
    this.workers.provide(config, settings, concurrency);
    return new ServedWorker(this.workers, config);
  }

  /**
   * A `hand-off` line (plugin/transport/local-server/client.ts `handOffToLocalServer`): a process that ran its own thread gives
   * its database and compactor model. Checked: it comes from a socket, though one only this user can reach.
   */
  handOff(message: unknown): void {
    const parsed = HAND_OFF.safeParse(message);
    if (!parsed.success) {
      this.log(`optchat local server: a hand-off was refused: ${parsed.error.issues[0]?.message ?? "malformed"}`);
      return;
    }
    const { config, settings, concurrency } = parsed.data;
    this.used = true;
    this.workers.provide(
      config as unknown as Config,
      async () => settings as unknown as SummarizerSettings,
      concurrency,
    );
  }

  /**
   * Drops the databases that no longer exist (dropped under the server: a test's, or a person's `dropdb`); true when
   * none is left of those it had opened, so the server has nothing to serve a new process with either.
   */
  async forgetDroppedDatabases(): Promise<boolean> {
    if (this.opened.size === 0) return false;
    for (const [key, opening] of [...this.opened]) {
      const gone = await opening
        .then((memory) => memory.pool.query("SELECT 1"))
        .then(
          () => false,
          (error: { code?: string }) => error?.code === DATABASE_GONE,
        );
      if (!gone) continue;
      this.log("optchat local server: a database it served no longer exists; forgetting it");
      this.opened.delete(key);
      await this.workers.stopOne(key);
      void opening.then((memory) => memory.close()).catch(() => undefined);
    }
    return this.opened.size === 0;
  }

  async close(): Promise<void> {
    // The workers first: they use the pools.
    await this.workers.stopAll();
    const all = [...this.opened.values()];
    this.opened.clear();
    await Promise.allSettled(all.map((memory) => memory.then((m) => m.close())));
  }

  private openShared(config: Config): Promise<Memory> {
    const key = keyOf(config);
    let memory = this.opened.get(key);
    if (!memory) {
      memory = openMemory(config, { applicationName: `optchat-local-server-${process.pid}`, poolIdleMs: this.idleMs });
      this.opened.set(key, memory);
      // A failed open (the database down) is tried again by the next connection.
      memory.catch(() => this.opened.delete(key));
    }
    return memory;
  }

  private report(event: { type: string; error?: unknown; message?: string }): void {
    if (event.type !== "error" && event.type !== "failure") return;
    const error = event.error ?? event.message ?? "";
    this.log(
      `optchat local server: compactor ${event.type}: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
}

const HAND_OFF = z.object({
  type: z.literal("hand-off"),
  config: z.object({ databaseUrl: z.string().min(1) }).passthrough(),
  settings: z.object({ summarizer: z.string().min(1), model: z.string() }).passthrough(),
  concurrency: z.number().int().min(1).max(64),
});

/** The service as a connection's adapter gets it: a frozen object of functions (src/memory/guard.ts), `close` a no-op. */
function withoutClose(memory: Memory): Memory {
  return Object.freeze({ ...memory, close: async () => undefined });
}
