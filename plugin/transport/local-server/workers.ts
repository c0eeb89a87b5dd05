import type { Config, RunningCompactor, SummarizerSettings } from "../../../src/memory/index.js";

/**
 * How long after the last served process disconnected the server's workers work: the connection closes at the
 * process's dispose, and `opencode run` still exits for ~0.1-0.2 s after it (`bench plugin`, `lastRequestToExitS`).
 */
export const WORK_AFTER_DISCONNECT_MS = 500;
/** While processes are connected, how often a paused worker looks for jobs that waited too long. */
export const STARVATION_CHECK_MS = 2_000;
/** Jobs due this long make a worker work even while processes run (their turns ended: someone waits for them). */
export const STARVED_AFTER_S = 5;
/** A served request whose memory waits for summaries keeps the worker working this long. */
export const DEMAND_HOLD_MS = 30_000;
/** A worker whose start failed is started again no sooner than this. */
export const RESTART_AFTER_MS = 10_000;
/** How long the server waits for its workers' stop before it goes on closing (a stuck stop must not keep it alive). */
export const STOP_WITHIN_MS = 5_000;

export type ServerWorkerState = "waiting" | "starting" | "working" | "paused" | "failed";

/** What the server's workers need of the server: start one, and ask the queue. */
export interface ServerWorkerDeps {
  /** Starts a compactor worker on `config`'s database with the summarizer `settings` describe. */
  start(config: Config, settings: SummarizerSettings, concurrency: number): Promise<RunningCompactor>;
  /** Whether jobs are due for a worker on `config`'s database since at least `seconds`. */
  jobsWaiting(config: Config, seconds: number): Promise<boolean>;
  /** The server's log: background errors go there, never to a person's terminal. */
  log(line: string): void;
  /** Milliseconds since an epoch (the injected clock: tests use fake timers). */
  now(): number;
}

interface Entry {
  readonly config: Config;
  settings: () => Promise<SummarizerSettings>;
  concurrency: number;
  running: RunningCompactor | undefined;
  starting: Promise<void> | undefined;
  /** The worker fetches jobs (false: paused or not started). */
  working: boolean;
  failedAt: number | undefined;
  error: string | undefined;
  demandedUntil: number;
  /** Pauses and resumes, one after another, in the order decided. */
  switching: Promise<void>;
  /** Its stop gave up waiting for its start: the start stops it when it ends. */
  abandoned: boolean;
}

/**
 * The compactor workers of the optchat local server, one per database configuration, owned by the server (not by any
 * OpenCode process it serves). Why (issue 37): with only `opencode run`s, nothing else summarizes and publishes
 * between runs; a worker started inside a run and handed to the server at its exit existed only when that run had
 * started one, so the queue stalled. The server learns a database's configuration and compactor model from the first
 * process that gives them (a served process when its memory opens, or a process that ran its own thread, at its
 * exit: plugin/transport/local-server/client.ts `handOffToLocalServer`), and starts the worker when there is work for it.
 *
 * When it works: while no served process is connected (WORK_AFTER_DISCONNECT_MS after the last left), or while jobs
 * have been due for STARVED_AFTER_S, or while a served request waits for summaries (`demand`). Otherwise it is paused:
 * the cores are OpenCode's while it runs (a worker taking each run's jobs at once added 0.04 s to its exit,
 * docs/opencode-notes.md "What any plugin costs, and the kept compactor worker"). A worker is only started once it
 * should work, so a served run never pays for pg-boss's start.
 */
export class ServerWorkers {
  private readonly entries = new Map<string, Entry>();
  private connected = 0;
  private workTimer: ReturnType<typeof setTimeout> | undefined;
  private checkTimer: ReturnType<typeof setInterval> | undefined;
  private stopped = false;

  constructor(private readonly deps: ServerWorkerDeps) {}

  /**
   * A process gave `config`'s database and its compactor model: the server keeps a worker for it from now on (the
   * first model given is kept; a later one replaces it only while no worker runs, e.g. after a failed start).
   */
  provide(config: Config, settings: () => Promise<SummarizerSettings>, concurrency: number): void {
    if (this.stopped) return;
    const key = keyOf(config);
    const entry = this.entries.get(key);
    if (entry) {
      if (!entry.running && !entry.starting) {
        entry.settings = settings;
        entry.concurrency = concurrency;
      }
      this.decide(entry);
      return;
    }
    const created: Entry = {
      config,
      settings,
      concurrency,
      running: undefined,
      starting: undefined,
      working: false,
      failedAt: undefined,
      error: undefined,
      demandedUntil: 0,
      switching: Promise.resolve(),
      abandoned: false,
    };
    this.entries.set(key, created);
    this.decide(created);
  }

  /**
   * Work is due on `config`'s database now (a served session went idle, a hand-off ended, a request waits for
   * summaries): its worker works at once, for DEMAND_HOLD_MS.
   */
  demand(config: Config): void {
    const entry = this.entries.get(keyOf(config));
    if (!entry) return;
    entry.demandedUntil = this.deps.now() + DEMAND_HOLD_MS;
    this.decide(entry);
  }

  state(config: Config): ServerWorkerState {
    const entry = this.entries.get(keyOf(config));
    if (!entry) return "waiting";
    if (entry.starting) return "starting";
    if (entry.running) return entry.working ? "working" : "paused";
    return entry.failedAt === undefined ? "waiting" : "failed";
  }

  error(config: Config): string | undefined {
    return this.entries.get(keyOf(config))?.error;
  }

  /** The number of connected processes changed. */
  connections(count: number): void {
    this.connected = count;
    clearTimeout(this.workTimer);
    this.workTimer = undefined;
    if (count > 0) {
      for (const entry of this.entries.values()) this.decide(entry);
      this.checkTimer ??= unref(setInterval(() => void this.checkStarved(), STARVATION_CHECK_MS));
      return;
    }
    clearInterval(this.checkTimer);
    this.checkTimer = undefined;
    this.workTimer = unref(
      setTimeout(() => {
        this.workTimer = undefined;
        for (const entry of this.entries.values()) this.decide(entry);
      }, WORK_AFTER_DISCONNECT_MS),
    );
  }

  /** Whether any worker has jobs due now (the server defers its idle stop while they are worked on). */
  async busy(): Promise<boolean> {
    for (const entry of this.entries.values()) {
      if (!entry.running && !entry.starting) continue;
      if (await this.deps.jobsWaiting(entry.config, 0).catch(() => false)) return true;
    }
    return false;
  }

  /** Stops every worker (the server stops; before its pools close), each bounded by STOP_WITHIN_MS. */
  async stopAll(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.workTimer);
    clearInterval(this.checkTimer);
    const entries = [...this.entries.values()];
    this.entries.clear();
    await Promise.allSettled(entries.map((entry) => this.stopEntry(entry)));
  }

  /** Stops the worker of one database (`keyOf` its configuration): the database is gone. */
  async stopOne(key: string): Promise<void> {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    await this.stopEntry(entry);
  }

  private async stopEntry(entry: Entry): Promise<void> {
    // A start under way is not waited for beyond the bound either: it is stopped when it ends (`start`).
    if (entry.starting && (await within(entry.starting, STOP_WITHIN_MS))) {
      entry.abandoned = true;
      return;
    }
    const running = entry.running;
    entry.running = undefined;
    if (!running) return;
    const stopped = running.stop(undefined, { graceful: false }).catch(() => undefined);
    if (await within(stopped, STOP_WITHIN_MS))
      this.deps.log("optchat local server: a compactor worker did not stop in time; going on without it");
  }

  private shouldWork(entry: Entry): boolean {
    return this.connected === 0 ? this.workTimer === undefined : entry.demandedUntil > this.deps.now();
  }

  /** Brings one worker to what it should be doing now: started and working, or paused. */
  private decide(entry: Entry, starved = false): void {
    if (this.stopped) return;
    const work = starved || this.shouldWork(entry);
    if (entry.starting) return;
    if (!entry.running) {
      if (!work) return;
      if (entry.failedAt !== undefined && this.deps.now() - entry.failedAt < RESTART_AFTER_MS) return;
      this.start(entry);
      return;
    }
    if (entry.working === work) return;
    entry.working = work;
    const running = entry.running;
    entry.switching = entry.switching
      .then(() => (work ? running.resume() : running.pause()))
      .catch((error) =>
        this.deps.log(
          `optchat local server: a compactor worker did not ${work ? "resume" : "pause"}: ${describe(error)}`,
        ),
      );
  }

  private start(entry: Entry): void {
    entry.starting = (async () => {
      try {
        const settings = await entry.settings();
        entry.running = await this.deps.start(entry.config, settings, entry.concurrency);
        entry.working = true;
        entry.failedAt = undefined;
        entry.error = undefined;
        this.deps.log(
          `optchat local server: compactor worker started (${settings.summarizer} ${settings.model ?? ""})`,
        );
      } catch (error) {
        entry.failedAt = this.deps.now();
        entry.error = describe(error);
        this.deps.log(
          `optchat local server: the compactor worker could not start (tried again in ${RESTART_AFTER_MS / 1000} s): ${entry.error}`,
        );
        // Tried again by itself: no process may come to call for it (the database was restarting, say).
        unref(setTimeout(() => this.decide(entry), RESTART_AFTER_MS));
      }
    })();
    void entry.starting.then(() => {
      entry.starting = undefined;
      if (entry.abandoned) {
        void entry.running?.stop(undefined, { graceful: false }).catch(() => undefined);
        entry.running = undefined;
        return;
      }
      // Stopping: `stopEntry` stops it.
      if (this.stopped || !this.entries.has(keyOf(entry.config))) return;
      // What it should do may have changed while it started (a process connected: pause it).
      this.decide(entry);
    });
  }

  private async checkStarved(): Promise<void> {
    for (const entry of this.entries.values()) {
      if (this.connected === 0 || this.stopped) return;
      const starved = await this.deps.jobsWaiting(entry.config, STARVED_AFTER_S).catch(() => false);
      this.decide(entry, starved);
    }
  }
}

/** One worker per database configuration: the same settings name the same database. */
export function keyOf(config: Config): string {
  return JSON.stringify(config);
}

/** Resolves true when `promise` did not settle within `ms` (it is not cancelled). */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(true), ms);
  });
  const result = await Promise.race([promise.then(() => false), late]);
  clearTimeout(timer);
  return result;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function unref<T extends { unref?: () => unknown }>(timer: T): T {
  timer.unref?.();
  return timer;
}
