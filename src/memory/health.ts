import { compactorVerdict, type HealthFacts, isAlive, type Verdict } from "../core/health.js";
import type { Queryable } from "../store/db.js";
import {
  type CompactorFailures,
  heartbeatsInstalled,
  type LastTurnPublication,
  listWorkers,
  readCompactorFailures,
  readLastTurnPublication,
  type WorkerBeat,
} from "../store/health.js";
import { jobQueueInstalled, oldestWaitingJob } from "../store/job-queue.js";

export type { Verdict } from "../core/health.js";

/** The compactor's state as status and inspect show it, with the verdict decided from it (src/core/health.ts). */
export interface CompactorHealth {
  readonly verdict: Verdict;
  /** Workers that beat in the last day, the most recent first; `alive` as the verdict counts it. */
  readonly workers: readonly (WorkerBeat & { readonly alive: boolean })[];
  readonly waitingJobs: number;
  readonly oldestWaitingSeconds: number;
  readonly oldestWaitingSince: string | null;
  readonly lastTurn: LastTurnPublication | null;
  readonly failures: CompactorFailures;
}

export interface HealthOptions {
  /** What the asker knows of the plugin's embedded worker (memory_inspect does; the CLI does not). */
  readonly embeddedWorker?: "on" | "off";
  readonly budgetCapReached?: string | null;
}

/** Reads the compactor's facts on a migrated database and judges them. */
export async function readCompactorHealth(db: Queryable, options: HealthOptions = {}): Promise<CompactorHealth> {
  const [workers, waiting, lastTurn, failures] = await Promise.all([
    (async () => ((await heartbeatsInstalled(db)) ? await listWorkers(db) : []))(),
    (async () =>
      (await jobQueueInstalled(db)) ? await oldestWaitingJob(db) : { waiting: 0, seconds: 0, since: null })(),
    readLastTurnPublication(db),
    readCompactorFailures(db),
  ]);
  const facts: HealthFacts = {
    workers: workers.map((w) => ({
      runsIn: w.runsIn,
      hostName: w.hostName,
      pid: w.pid,
      beatAgeSeconds: w.beatAgeSeconds,
      stopped: w.stoppedAt !== null,
      paused: w.paused,
      lastError: w.lastError,
    })),
    waitingJobs: waiting.waiting,
    oldestWaitingSeconds: waiting.seconds,
    oldestWaitingSince: waiting.since?.toISOString() ?? null,
    ...failures,
    ...(options.embeddedWorker ? { embeddedWorker: options.embeddedWorker } : {}),
    budgetCapReached: options.budgetCapReached ?? null,
  };
  return {
    verdict: compactorVerdict(facts),
    workers: workers.map((w, i) => ({ ...w, alive: isAlive(facts.workers[i] as HealthFacts["workers"][number]) })),
    waitingJobs: waiting.waiting,
    oldestWaitingSeconds: waiting.seconds,
    oldestWaitingSince: facts.oldestWaitingSince,
    lastTurn,
    failures,
  };
}
