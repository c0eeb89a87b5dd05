import type { PgBoss } from "pg-boss";
import type { ToolResultLines } from "../core/excerpt.js";
import type { FoldParams } from "../core/fold.js";
import type { NodeAddress } from "../core/tree.js";
import { type Pool, withTransaction } from "../store/db.js";
import { findReadyUnbuiltNodes } from "../store/nodes.js";
import { lockTree } from "../store/tree-lock.js";
import { findSessionsWithFinishedPendingTurns } from "../store/turns.js";
import { findWantedParents } from "../store/wanted-parents.js";
import { type BudgetSettings, createBudget } from "./budget.js";
import type { CompactorDeps, CompactorEvent } from "./deps.js";
import { startHeartbeat, WORKER_RUNS_IN } from "./heartbeat.js";
import { buildNodeJob } from "./node-job.js";
import { createPrefixGate } from "./prefix-gate.js";
import { publishTurnJob } from "./publish.js";
import {
  createBoss,
  enqueueNodeJobs,
  NODE_QUEUE,
  type NodeJobData,
  PUBLISH_QUEUE,
  type PublishJobData,
  SUPERVISE_INTERVAL_SECONDS,
} from "./queue.js";
import { schedulePublicationIfReady } from "./schedule-publication.js";
import type { Summarizer } from "./summarizer.js";
import { superviseEvery } from "./supervision.js";

export type { CompactorDeps, CompactorEvent } from "./deps.js";
export { retryDelaySeconds, treeCacheKey } from "./deps.js";
export { buildNodeJob, type JobOutcome, type NodeJob } from "./node-job.js";

/**
 * Schedules again what is ready but has no job (a job deleted by an operator, or one that gave up): ready unbuilt
 * nodes, and each session's next publication when it is ready (checked under the session tree's lock, like every
 * other scheduling of a publication). A duplicate of a node job that does exist is harmless: the node is found built.
 */
export async function sweepLostWork(deps: CompactorDeps): Promise<{ nodes: number; publications: number }> {
  // With merges on demand (the default) a ready parent is work only when its view wants it (src/core/wanted.ts).
  const onDemand = deps.fold.merges !== "all";
  const nodes = [
    ...(await findReadyUnbuiltNodes(deps.pool, 10_000, !onDemand)),
    ...(onDemand ? await findWantedParents(deps.pool, deps.fold, 10_000) : []),
  ];
  const sessions = await findSessionsWithFinishedPendingTurns(deps.pool, 10_000);
  const byTree = new Map<number, NodeAddress[]>();
  for (const { treeId, node } of nodes) byTree.set(treeId, [...(byTree.get(treeId) ?? []), node]);
  await withTransaction(deps.pool, async (tx) => {
    for (const [treeId, ready] of byTree) await enqueueNodeJobs(deps.boss, tx, treeId, ready);
  });
  let publications = 0;
  for (const session of sessions) {
    const scheduled = await withTransaction(deps.pool, async (tx) => {
      const locked = await lockTree(tx, session);
      return locked
        ? await schedulePublicationIfReady(deps.boss, tx, { treeId: locked.tree.treeId, ...session })
        : undefined;
    });
    if (scheduled !== undefined) publications += 1;
  }
  if (nodes.length + publications > 0) deps.report({ type: "rescheduled", nodes: nodes.length, publications });
  return { nodes: nodes.length, publications };
}

export interface CompactorSettings {
  readonly databaseUrl: string;
  readonly concurrency: number;
  readonly fold: FoldParams;
  readonly failureRetrySeconds: number;
  /** How a tool result's leaf line is made (OPTCHAT_COMPACTOR_TOOL_RESULTS); absent: `excerpt`. */
  readonly toolResults?: ToolResultLines;
  /** How often this worker's pg-boss deletes finished jobs past their retention (src/compactor/retention.ts). */
  readonly retentionSweepSeconds?: number;
  /** The daily caps (src/compactor/budget.ts); absent: none. */
  readonly budget?: BudgetSettings;
  /**
   * Where this worker runs, as `optchat status` lists it (its heartbeat row): WORKER_RUNS_IN in heartbeat.ts, e.g.
   * "optchat worker", "OpenCode process", "local server". Default: "in-process worker".
   */
  readonly runsIn?: string;
  /** How often the heartbeat is written (tests); default HEARTBEAT_SECONDS. */
  readonly heartbeatMs?: number;
}

export interface RunningCompactor {
  readonly boss: PgBoss;
  /**
   * Stops fetching, waits for running jobs (up to `timeoutMs`), releases what is left to other workers. With
   * `graceful: false` running jobs are failed back to the queue at once (retried in ~1 s by any worker; every job is
   * idempotent): for a process that is exiting.
   */
  stop(timeoutMs?: number, options?: { graceful?: boolean }): Promise<void>;
  /**
   * Stops fetching jobs, letting the running ones finish, and runs no supervision pass; `resume` does both again. For
   * a worker kept beside processes whose cores it must not take while they run (the plugin's local server,
   * plugin/transport/local-server/server.ts). Idempotent.
   */
  pause(): Promise<void>;
  resume(): Promise<void>;
}

/** Starts a compactor worker: `concurrency` jobs at once, sharing the queue with every other worker. */
export async function startCompactor(
  pool: Pool,
  settings: CompactorSettings,
  summarizer: Summarizer,
  reportEvent: (event: CompactorEvent) => void,
): Promise<RunningCompactor> {
  const heartbeat = await startHeartbeat(
    pool,
    { runsIn: settings.runsIn ?? WORKER_RUNS_IN.other, summarizer: summarizer.identity },
    (error) => reportEvent({ type: "error", error }),
    settings.heartbeatMs,
  );
  // Failures and errors also go to the heartbeat row: status shows a failing model's last error.
  const report = (event: CompactorEvent): void => {
    if (event.type === "failure" || event.type === "error") heartbeat.error(event.error);
    reportEvent(event);
  };
  const boss = await createBoss(settings.databaseUrl, "worker", {
    maintenanceIntervalSeconds: settings.retentionSweepSeconds,
  });
  boss.on("error", (error) => report({ type: "error", error: `pg-boss: ${(error as Error).message}` }));
  try {
    await boss.start();
  } catch (error) {
    await heartbeat.stop();
    throw error;
  }
  const deps: CompactorDeps = {
    pool,
    boss,
    summarizer,
    ...(settings.budget ? { budget: createBudget(pool, settings.budget) } : {}),
    gate: createPrefixGate(),
    fold: settings.fold,
    failureRetrySeconds: settings.failureRetrySeconds,
    ...(settings.toolResults ? { toolResults: settings.toolResults } : {}),
    report,
  };
  // Fetch in batches of up to 4 and run a batch's jobs concurrently, with burst fetching while batches come back
  // full. With batchSize 1, pg-boss ignores burst mode and a worker that got no NOTIFY during its job sleeps the
  // whole polling interval: a backlog of independent jobs (after a restart, retries becoming due) drained at
  // 8 jobs per 5 s per process in the tree benchmark. Polling every second bounds the wait for delayed retries.
  const batchSize = Math.min(4, settings.concurrency);
  const options = {
    localConcurrency: Math.max(1, Math.ceil(settings.concurrency / batchSize)),
    batchSize,
    burstWhenBatchFull: true,
    includeMetadata: true,
    pollingIntervalSeconds: 1,
    notifyPollingIntervalSeconds: 1,
  } as const;
  // Every job of a batch runs to its end before the batch settles: with Promise.all, the first failure would make
  // pg-boss fail (and re-run elsewhere) siblings that are still in the middle of their model calls.
  const runAll = async <T>(
    jobs: readonly { id: string; retryCount: number; data: T }[],
    run: (job: { id: string; retryCount: number; data: T }) => Promise<unknown>,
    what: string,
  ) => {
    const results = await Promise.allSettled(
      jobs.map(async (job) => {
        try {
          await run({ id: job.id, retryCount: job.retryCount, data: job.data });
          heartbeat.jobFinished();
        } catch (error) {
          // A database error while committing: report it; pg-boss retries the batch's unsettled jobs (retryDelay
          // 1 s). Jobs of the batch that already completed are not affected: pg-boss's own settle is fenced like ours.
          report({ type: "error", error: `${what} job ${job.id}: ${(error as Error).message}` });
          throw error;
        }
      }),
    );
    const failed = results.find((result) => result.status === "rejected");
    if (failed) throw failed.reason;
  };
  const workNodes = () =>
    boss.work<NodeJobData>(NODE_QUEUE, options, (jobs) => runAll(jobs, (job) => buildNodeJob(deps, job), "node"));
  const workPublications = () =>
    boss.work<PublishJobData>(PUBLISH_QUEUE, { ...options, localConcurrency: 1 }, (jobs) =>
      runAll(jobs, (job) => publishTurnJob(deps, job), "publication"),
    );
  try {
    await workNodes();
    await sweepLostWork(deps).catch((error) =>
      report({ type: "error", error: `start-up sweep: ${(error as Error).message}` }),
    );
    await workPublications();
  } catch (error) {
    // A start that failed midway leaves no heartbeat saying a worker is alive.
    await heartbeat.stop();
    throw error;
  }
  // Started once the rest is: a start that failed above leaves no loop running against its pg-boss.
  const supervision = superviseEvery(
    () => boss.supervise(),
    SUPERVISE_INTERVAL_SECONDS * 1000,
    (error) => report({ type: "error", error: `pg-boss supervision: ${(error as Error).message}` }),
  );
  // Pauses and resumes run one after another, in the order asked.
  let paused = false;
  let switching: Promise<void> = Promise.resolve();
  const switchTo = (pause: boolean): Promise<void> => {
    switching = switching.then(async () => {
      if (paused === pause) return;
      paused = pause;
      heartbeat.setPaused(pause);
      if (pause) {
        supervision.pause();
        await boss.offWork(NODE_QUEUE, { wait: false });
        await boss.offWork(PUBLISH_QUEUE, { wait: false });
      } else {
        await workNodes();
        await workPublications();
        supervision.resume();
      }
    });
    return switching;
  };
  return {
    boss,
    async stop(timeoutMs = 30_000, options = {}) {
      await supervision.stop();
      try {
        await boss.stop({ graceful: options.graceful ?? true, timeout: timeoutMs });
      } finally {
        await heartbeat.stop();
      }
    },
    pause: () => switchTo(true),
    resume: () => switchTo(false),
  };
}
