import type { Memory } from "../src/memory/index.js";
import type { KeptWorker } from "./embedded-worker.js";

/**
 * How long after the last served process disconnected the kept workers work again: the connection closes at the
 * process's dispose, and `opencode run` still exits for ~0.1-0.2 s after it (`bench plugin`, `lastRequestToExitS`).
 */
export const RESUME_AFTER_MS = 1_000;
/** While processes are connected, how often a paused worker looks for jobs that waited too long. */
export const STARVATION_CHECK_MS = 10_000;
/** Jobs waiting this long make a worker work even while processes run: the in-process rule (plugin/embedded-worker.ts). */
const STARVED_AFTER_S = 30;

/**
 * The compactor workers the local server keeps from its served processes (plugin/embedded-worker.ts `handOver`), one
 * per database configuration. Why: a served `opencode run` that started its worker (its jobs had waited 30 s, or it ran
 * 10 s) stopped it at its exit, failing its running jobs back, and a later run paid pg-boss's start again (0.11-0.15 s
 * of CPU beside OpenCode): a run-only workflow summarized a little inside each run, never between them. Kept, a worker
 * works while no served process runs, and pauses while one does (their cores are OpenCode's: measured, a worker that
 * took each run's jobs at once added 0.04 s to its exit, docs/opencode-notes.md "What any plugin costs, and the kept compactor worker"), unless
 * jobs have waited 30 s; served processes start none of their own meanwhile. They stop with the server.
 */
export class KeptWorkers {
  private readonly kept = new Map<string, { readonly worker: KeptWorker; readonly memory: Promise<Memory> }>();
  private connected = 0;
  private resumeTimer: ReturnType<typeof setTimeout> | undefined;
  private checkTimer: ReturnType<typeof setInterval> | undefined;

  constructor(private readonly log: (line: string) => void) {}

  /** Keeps `worker` for the database `key` names; false when one is kept already (the caller stops this one). */
  keep(key: string, worker: KeptWorker, memory: Promise<Memory>): boolean {
    if (this.kept.has(key)) return false;
    this.kept.set(key, { worker, memory });
    this.log("optchat local server: keeping a served process's compactor worker until the server stops");
    this.apply(worker);
    return true;
  }

  has(key: string): boolean {
    return this.kept.has(key);
  }

  /** The number of connected processes changed. */
  connections(count: number): void {
    this.connected = count;
    clearTimeout(this.resumeTimer);
    this.resumeTimer = undefined;
    if (count > 0) {
      for (const { worker } of this.kept.values()) this.pause(worker);
      this.checkTimer ??= unref(setInterval(() => void this.resumeStarved(), STARVATION_CHECK_MS));
      return;
    }
    clearInterval(this.checkTimer);
    this.checkTimer = undefined;
    this.resumeTimer = unref(
      setTimeout(() => {
        for (const { worker } of this.kept.values()) this.resume(worker);
      }, RESUME_AFTER_MS),
    );
  }

  /** Stops every kept worker (the server stops; before its pools close). */
  async stopAll(): Promise<void> {
    clearTimeout(this.resumeTimer);
    clearInterval(this.checkTimer);
    const workers = [...this.kept.values()].map(({ worker }) => worker);
    this.kept.clear();
    await Promise.allSettled(workers.map((worker) => worker.stop()));
  }

  /** A worker just kept follows the current state: paused while processes run (work resumes when they are gone). */
  private apply(worker: KeptWorker): void {
    if (this.connected > 0) this.pause(worker);
  }

  private async resumeStarved(): Promise<void> {
    for (const { worker, memory } of this.kept.values()) {
      const starved = await memory.then((m) => m.host.jobsWaitingForWorker(STARVED_AFTER_S)).catch(() => false);
      if (starved && this.connected > 0) this.resume(worker);
    }
  }

  private pause(worker: KeptWorker): void {
    worker.pause().catch((error) => this.log(`optchat local server: a kept worker did not pause: ${String(error)}`));
  }

  private resume(worker: KeptWorker): void {
    worker.resume().catch((error) => this.log(`optchat local server: a kept worker did not resume: ${String(error)}`));
  }
}

function unref<T extends { unref?: () => unknown }>(timer: T): T {
  timer.unref?.();
  return timer;
}
