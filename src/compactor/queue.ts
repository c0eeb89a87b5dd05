import type { PgBoss } from "pg-boss";
import type { NodeAddress } from "../core/tree.js";
import type { Queryable } from "../store/db.js";
import {
  insertJobs,
  type JobRow,
  NODE_QUEUE,
  nodeJobKey,
  PUBLISH_QUEUE,
  publicationJobKey,
} from "../store/job-queue.js";

// The queue names and job keys live with the SQL that reads pg-boss's tables (store/job-queue.ts).
export { NODE_QUEUE, PUBLISH_QUEUE } from "../store/job-queue.js";

export interface PublishJobData {
  readonly sessionId: string;
  readonly generation: number;
  readonly turnId: string;
}

export interface NodeJobData {
  readonly treeId: number;
  readonly level: number;
  readonly index: number;
}

/**
 * Queue settings, from postgres-stack-facts and issue #3:
 * - retryDelay 1 s: a job whose worker died (heartbeat lost), or whose handler hit an unexpected error, runs again
 *   almost at once, and an error that repeats does not spin. Summarizer failures do not use pg-boss retries: the
 *   handler completes the job and schedules a fresh one after the fixed failure delay (no backoff). The retry limit
 *   is effectively unbounded: scheduling is event-driven, so a job given up would never be scheduled again.
 * - heartbeatSeconds 10 (pg-boss's minimum) with a 1 s supervisor: a SIGKILLed worker's job is re-run in ~11 s.
 * - notify: workers are woken by NOTIFY when a job is created, instead of one job per polling interval.
 * - deleteAfterSeconds: finished jobs are kept this long, then pg-boss's maintenance deletes them (issue 9 item 8: the
 *   7-day default kept 1.1-1.3 rows per record, 4 under crashes). This is the installer's default; every worker sets
 *   the queues to OPTCHAT_JOB_RETENTION_SECONDS when it starts (applyJobRetention), and a job keeps the value its
 *   queue had when it was created.
 */
export const NODE_QUEUE_OPTIONS = {
  retryLimit: 1_000_000,
  retryDelay: 1,
  retryBackoff: false,
  heartbeatSeconds: 10,
  expireInSeconds: 3600,
  deleteAfterSeconds: 3600,
  notify: true,
} as const;

export type BossRole = "installer" | "worker";

/** How often a working compactor runs pg-boss's supervision pass (a killed worker's job runs again in ~11 s). */
export const SUPERVISE_INTERVAL_SECONDS = 1;

/**
 * A pg-boss instance for one role. The installer (optchat migrate) creates pg-boss's schema and our queue; workers
 * also listen for new jobs (and run the supervision of expired claims themselves, src/compactor/supervision.ts).
 * Producers (every memory service) only insert jobs inside our transactions and start no pg-boss at all
 * (`producerJobs`).
 */
export async function createBoss(
  databaseUrl: string,
  role: BossRole,
  options: { maintenanceIntervalSeconds?: number } = {},
): Promise<PgBoss> {
  // Loaded when first needed: pg-boss was ~60 ms of the ~160 ms an OpenCode process spends importing the plugin
  // (Bun, measured), and a process that inserts no job (or starts no worker) never needs it.
  const { PgBoss } = await import("pg-boss");
  const boss = new PgBoss({
    connectionString: databaseUrl,
    schema: "pgboss",
    application_name: `optchat-${role}`,
    max: role === "worker" ? 4 : 1,
    migrate: role === "installer",
    createSchema: role === "installer",
    schedule: false,
    // Workers run pg-boss's supervision pass themselves, every SUPERVISE_INTERVAL_SECONDS, so that a paused worker
    // runs none (src/compactor/supervision.ts); the pass claims its work by these intervals.
    supervise: false,
    superviseIntervalSeconds: SUPERVISE_INTERVAL_SECONDS,
    monitorIntervalSeconds: 1,
    useListenNotify: role === "worker",
    // Only workers belong in pg-boss's instance registry (a row, its pruning, a heartbeat timer sampling heap,
    // event-loop and cgroup figures: ~10 ms of CPU per process, for nothing we read).
    registerInstance: role === "worker",
    // How often a supervising worker runs the deletion of finished jobs past their retention (pg-boss's default is
    // once a day, whatever the retention): OPTCHAT_RETENTION_SWEEP_SECONDS.
    ...(options.maintenanceIntervalSeconds !== undefined
      ? { maintenanceIntervalSeconds: options.maintenanceIntervalSeconds }
      : {}),
  });
  return boss;
}

/** Sets how long finished jobs of our queues are kept (jobs created from now on; see NODE_QUEUE_OPTIONS). */
export async function applyJobRetention(boss: PgBoss, deleteAfterSeconds: number): Promise<void> {
  for (const name of [NODE_QUEUE, PUBLISH_QUEUE]) await boss.updateQueue(name, { deleteAfterSeconds });
}

export async function installQueues(boss: PgBoss): Promise<void> {
  for (const name of [NODE_QUEUE, PUBLISH_QUEUE]) {
    const existing = await boss.getQueue(name);
    if (existing) await boss.updateQueue(name, NODE_QUEUE_OPTIONS);
    else
      await boss.createQueue(name, NODE_QUEUE_OPTIONS).catch(async (error) => {
        // Another installer created it between our check and our create.
        if (!(await boss.getQueue(name))) throw error;
      });
  }
}

/** pg-boss's database adapter over one of our transaction clients, so job changes commit with our writes. */
export function inTransaction(db: Queryable): {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
} {
  return { executeSql: (text, values) => db.query(text, values as unknown[]) as Promise<{ rows: unknown[] }> };
}

/**
 * What enqueueing needs of the job queue: pg-boss's `insert` in the caller's transaction. A worker passes its pg-boss;
 * a producer `producerJobs`.
 */
export type JobInserter = Pick<PgBoss, "insert">;

/**
 * A producer's job queue: the rows pg-boss's `insert` writes, by one statement on the caller's transaction
 * (store/job-queue.ts `insertJobs`), without a pg-boss instance. Takes only what `enqueueNodeJobs` and
 * `enqueuePublication` send (data, singleton key, a start time); anything else is refused rather than dropped.
 */
export const producerJobs: JobInserter = {
  async insert(name, jobs, options) {
    const db = options?.db;
    if (!db) throw new Error("producer jobs are inserted only inside the caller's transaction (options.db)");
    const now = Date.now();
    const rows = jobs.map((job): JobRow => {
      const { data, singletonKey, startAfter, ...rest } = job;
      const extra = Object.keys(rest);
      if (extra.length > 0) throw new Error(`producer jobs take no ${extra.join(", ")}`);
      if (!data || singletonKey === undefined) throw new Error("producer jobs need data and a singleton key");
      if (startAfter !== undefined && !(startAfter instanceof Date))
        throw new Error("producer jobs take startAfter only as a Date");
      return { data, singletonKey, ...(startAfter ? { startAfterSeconds: (startAfter.getTime() - now) / 1000 } : {}) };
    });
    // pg-boss's adapter interface over our transaction client (`inTransaction`): run the statement through it.
    const queryable = {
      query: (text: string, values: unknown[]) => db.executeSql(text, values),
    } as unknown as Queryable;
    await insertJobs(queryable, name, rows);
    return null;
  },
};

/** Enqueues node jobs in the caller's transaction (they exist only if it commits). */
export async function enqueueNodeJobs(
  boss: JobInserter,
  db: Queryable,
  treeId: number,
  nodes: readonly NodeAddress[],
  startAfterSeconds = 0,
): Promise<void> {
  if (nodes.length === 0) return;
  const startAfter = startAfterSeconds > 0 ? new Date(Date.now() + startAfterSeconds * 1000) : undefined;
  await boss.insert(
    NODE_QUEUE,
    nodes.map((node) => ({
      data: { treeId, level: node.level, index: node.index } satisfies NodeJobData,
      singletonKey: nodeJobKey(treeId, node),
      ...(startAfter ? { startAfter } : {}),
    })),
    { db: inTransaction(db) },
  );
}

/** Enqueues the publication of a finished turn in the caller's transaction (the outbox: it exists iff that commits). */
export async function enqueuePublication(
  boss: JobInserter,
  db: Queryable,
  data: PublishJobData,
  startAfterSeconds = 0,
): Promise<void> {
  await boss.insert(
    PUBLISH_QUEUE,
    [
      {
        data,
        singletonKey: publicationJobKey(data),
        ...(startAfterSeconds > 0 ? { startAfter: new Date(Date.now() + startAfterSeconds * 1000) } : {}),
      },
    ],
    { db: inTransaction(db) },
  );
}

/** Completes a job only if this worker still holds the attempt it fetched (id + retry count); false otherwise. */
export async function completeFenced(
  boss: PgBoss,
  db: Queryable,
  job: { id: string; retryCount: number },
  queue: string = NODE_QUEUE,
): Promise<boolean> {
  const result = await boss.complete(queue, [{ id: job.id, retryCount: job.retryCount }], null, {
    db: inTransaction(db),
  });
  // pg-boss 12.38 returns { requested, affected, ... } here; its type declares an empty interface.
  return (result as { affected?: number }).affected === 1;
}

/**
 * Whether this worker still holds the attempt it fetched (the job is active with the same retry count), without
 * completing it: the publication commit checks it, and the job is completed afterwards, under the session tree's
 * lock, together with the scheduling of the session's next publication.
 */
export async function stillHeld(
  boss: PgBoss,
  db: Queryable,
  job: { id: string; retryCount: number },
  queue: string,
): Promise<boolean> {
  const current = await boss.getJobById(queue, job.id, { db: inTransaction(db) });
  return current?.state === "active" && current.retryCount === job.retryCount;
}
