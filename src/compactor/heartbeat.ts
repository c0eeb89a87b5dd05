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
  let paused = false;
  let jobsFinished = 0;
  let jobFinished = false;
  let lastError: string | null = null;
  let errorChanged = false;
  let failing = false;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running: Promise<void> | undefined;

  const beat = async (): Promise<void> => {
    const state = { paused, jobsFinished, jobFinished, lastError, errorChanged };
    jobFinished = false;
    errorChanged = false;
    try {
      // Gone (a restored or cleaned database): registered again, then the beat's state written.
      if (!(await beatWorker(pool, registration.workerId, state))) {
        await registerWorker(pool, registration, HEARTBEAT_KEEP_SECONDS);
        await beatWorker(pool, registration.workerId, state);
      }
      failing = false;
    } catch (error) {
      // Written again at the next beat.
      jobFinished ||= state.jobFinished;
      errorChanged ||= state.errorChanged;
      if (!failing) report(`heartbeat: ${(error as Error).message}`);
      failing = true;
    }
  };
  const beatNow = (): Promise<void> => {
    const next = (running ?? Promise.resolve()).then(beat);
    running = next.finally(() => {
      if (running === next) running = undefined;
    });
    return next;
  };
  const schedule = (): void => {
    if (stopped) return;
    timer = setTimeout(() => {
      void beatNow().finally(schedule);
    }, intervalMs);
    timer.unref?.();
  };

  try {
    await registerWorker(pool, registration, HEARTBEAT_KEEP_SECONDS);
  } catch (error) {
    failing = true;
    report(`heartbeat: ${(error as Error).message}`);
  }
  schedule();
  return {
    workerId: registration.workerId,
    jobFinished() {
      jobsFinished += 1;
      jobFinished = true;
    },
    error(message) {
      lastError = message.slice(0, 2000);
      errorChanged = true;
    },
    setPaused(next) {
      if (paused === next || stopped) return;
      paused = next;
      void beatNow();
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      // Bounded: a process stopping while the database is unreachable must not wait for a connection (10 s) to say
      // so; its row then stops beating and counts as gone after WORKER_ALIVE_SECONDS.
      let bound: ReturnType<typeof setTimeout> | undefined;
      const written = (async () => {
        await running?.catch(() => {});
        await markWorkerStopped(pool, registration.workerId).catch(() => {});
      })();
      await Promise.race([
        written,
        new Promise((done) => {
          bound = setTimeout(done, STOP_WRITE_MS);
        }),
      ]);
      clearTimeout(bound);
    },
  };
}
