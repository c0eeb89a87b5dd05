import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import type { Pool } from "../store/db.js";
import { beatWorker, markWorkerStopped, registerWorker } from "../store/health.js";

/**
 * A compactor worker's heartbeat (issue 37 item 3): its row in optchat.compactor_workers, written at start, every
 * HEARTBEAT_SECONDS while it runs (paused or not) and marked stopped at a clean stop, so that `optchat status` can tell
 * a backlog with no worker alive from one that is being worked on. Why a table and not pg-boss: pg-boss knows claimed
 * jobs, not idle workers, and a paused worker claims nothing.
 */

/** How often a running worker beats. `optchat status` counts it alive for WORKER_ALIVE_SECONDS (src/core/health.ts). */
export const HEARTBEAT_SECONDS = 5;

/** The longest a stop waits to mark the row stopped. */
const STOP_WRITE_MS = 2_000;

/** How long rows of workers that stopped beating are kept (status says how long no worker has been alive). */
export const HEARTBEAT_KEEP_SECONDS = 24 * 3600;

/** Where a worker runs, as status shows it. Callers pass theirs to startCompactor / startWorker (`runsIn`). */
export const WORKER_RUNS_IN = {
  cli: "optchat worker",
  opencode: "OpenCode process",
  localServer: "local server",
  /** The default: a caller that did not say (tests, benchmarks, a service API user). */
  other: "in-process worker",
} as const;

export interface Heartbeat {
  readonly workerId: string;
  /** A job finished (successfully or not: it was worked on). */
  jobFinished(): void;
  /** The newest error the worker reported (a model's failure, a database error). */
  error(message: string): void;
  /** Pause or resume: written at once (not awaited by the worker's pause). */
  setPaused(paused: boolean): void;
  /** Stops beating and marks the row stopped. Never throws. */
  stop(): Promise<void>;
}

type Registration = Parameters<typeof registerWorker>[1] & { readonly workerId: string };

/**
 * The beats of one registered worker: the state a beat writes, the beats one after the other (a beat asked while one
 * runs follows it), the timer between them.
 */
class HeartbeatLoop implements Heartbeat {
  private paused = false;
  private jobsFinished = 0;
  private finishedSinceBeat = false;
  private lastError: string | null = null;
  private errorChanged = false;
  /** The last beat failed: the next failure is not reported again. */
  failing = false;
  private stopped = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** The beat under way, which the next one follows (not a lock: the order of beats). */
  private running: Promise<void> | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly registration: Registration,
    private readonly report: (error: string) => void,
    private readonly intervalMs: number,
  ) {}

  get workerId(): string {
    return this.registration.workerId;
  }

  jobFinished(): void {
    this.jobsFinished += 1;
    this.finishedSinceBeat = true;
  }

  error(message: string): void {
    this.lastError = message.slice(0, 2000);
    this.errorChanged = true;
  }

  setPaused(next: boolean): void {
    if (this.paused === next || this.stopped) return;
    this.paused = next;
    void this.beatNow();
  }

  /** The next beat after `intervalMs`, unless stopped; the timer never keeps the process alive by itself. */
  schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      void this.beatNow().finally(() => this.schedule());
    }, this.intervalMs);
    this.timer.unref?.();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    // Bounded: a process stopping while the database is unreachable must not wait for a connection (10 s) to say
    // so; its row then stops beating and counts as gone after WORKER_ALIVE_SECONDS.
    let bound: ReturnType<typeof setTimeout> | undefined;
    const written = (async () => {
      await this.running?.catch(() => {});
      await markWorkerStopped(this.pool, this.workerId).catch(() => {});
    })();
    await Promise.race([
      written,
      new Promise((done) => {
        bound = setTimeout(done, STOP_WRITE_MS);
      }),
    ]);
    clearTimeout(bound);
  }

  private beatNow(): Promise<void> {
    const next = (this.running ?? Promise.resolve()).then(() => this.beat());
    this.running = next.finally(() => {
      if (this.running === next) this.running = undefined;
    });
    return next;
  }

  private async beat(): Promise<void> {
    const state = {
      paused: this.paused,
      jobsFinished: this.jobsFinished,
      jobFinished: this.finishedSinceBeat,
      lastError: this.lastError,
      errorChanged: this.errorChanged,
    };
    this.finishedSinceBeat = false;
    this.errorChanged = false;
    try {
      // Gone (a restored or cleaned database): registered again, then the beat's state written.
      if (!(await beatWorker(this.pool, this.workerId, state))) {
        await registerWorker(this.pool, this.registration, HEARTBEAT_KEEP_SECONDS);
        await beatWorker(this.pool, this.workerId, state);
      }
      this.failing = false;
    } catch (error) {
      // Written again at the next beat.
      this.finishedSinceBeat ||= state.jobFinished;
      this.errorChanged ||= state.errorChanged;
      if (!this.failing) this.report(`heartbeat: ${(error as Error).message}`);
      this.failing = true;
    }
  }
}

/**
 * Registers the worker and beats every `intervalMs` until stopped. A beat that fails is reported once per streak of
 * failures (the database may be restarting; pg-boss reports that too) and tried again at the next interval. The timer
 * never keeps the process alive by itself.
 */
export async function startHeartbeat(
  pool: Pool,
  identity: { runsIn: string; summarizer: string },
  report: (error: string) => void,
  intervalMs = HEARTBEAT_SECONDS * 1000,
): Promise<Heartbeat> {
  const registration = {
    workerId: `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`,
    hostName: hostname(),
    pid: process.pid,
    runsIn: identity.runsIn,
    summarizer: identity.summarizer,
  };
  const loop = new HeartbeatLoop(pool, registration, report, intervalMs);
  try {
    await registerWorker(pool, registration, HEARTBEAT_KEEP_SECONDS);
  } catch (error) {
    loop.failing = true;
    report(`heartbeat: ${(error as Error).message}`);
  }
  loop.schedule();
  return loop;
}
