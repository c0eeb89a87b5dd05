/**
 * pg-boss's own tables, queried only here (issue 15 item 6): the names of optchat's queues, the singleton keys its jobs
 * carry, every query of `pgboss.job`, and the producer's job insert. Workers write job rows through pg-boss's API
 * (compactor/queue.ts); a producer (every memory service) inserts them with `insertJobs` below, the same rows without
 * starting pg-boss; the store reads them where a decision needs the outbox in the same statement (a node or a turn
 * with no open job) or where an operator's status counts them.
 */
import type { NodeAddress } from "../core/tree.js";
import type { Queryable } from "./db.js";

/** One queue for every node job of every tree. */
export const NODE_QUEUE = "optchat-node";
/**
 * Publication jobs: one per turn, inserted by the commit that makes its publication ready (the outbox; see
 * compactor/schedule-publication.ts).
 */
export const PUBLISH_QUEUE = "optchat-publish";

/** The singleton key of a node's job: one open job per node. */
export function nodeJobKey(treeId: number, node: NodeAddress): string {
  return `${treeId}:${node.level}:${node.index}`;
}

/** The singleton key of a turn's publication job: one open job per turn. */
export function publicationJobKey(turn: { sessionId: string; generation: number; turnId: string }): string {
  return `${turn.sessionId}:${turn.generation}:${turn.turnId}`;
}

/**
 * SQL: true when `queue` holds a job not finished yet whose singleton key is the SQL expression `keySql` (built like
 * nodeJobKey / publicationJobKey from the outer query's columns). For a NOT EXISTS in the caller's statement.
 */
export function openJobExists(queue: typeof NODE_QUEUE | typeof PUBLISH_QUEUE, keySql: string): string {
  return `EXISTS (SELECT 1 FROM pgboss.job j
                   WHERE j.name = '${queue}' AND j.state < 'completed' AND j.singleton_key = ${keySql})`;
}

/** SQL of a node job's key from a tree id, level and index column. */
export const NODE_JOB_KEY_SQL = (treeId: string, level: string, idx: string) =>
  `${treeId} || ':' || ${level} || ':' || ${idx}`;

/** SQL of a publication job's key from a session id, generation and turn id column. */
export const PUBLICATION_JOB_KEY_SQL = (sessionId: string, generation: string, turnId: string) =>
  `${sessionId} || ':' || ${generation} || ':' || ${turnId}`;

/** Whether pg-boss's schema is installed (optchat migrate installs it). */
export async function jobQueueInstalled(db: Queryable): Promise<boolean> {
  const result = await db.query<{ present: boolean }>("SELECT to_regclass('pgboss.job') IS NOT NULL AS present");
  return result.rows[0]?.present === true;
}

/** Jobs of optchat's queues by `<queue>:<state>` (`node:created`, `publish:completed`, …), for status. */
export async function countJobsByState(db: Queryable): Promise<Record<string, number>> {
  const states = await db.query<{ state: string; n: number }>(
    `SELECT replace(name, 'optchat-', '') || ':' || state::text AS state, count(*)::int AS n FROM pgboss.job
      WHERE name IN ('${NODE_QUEUE}', '${PUBLISH_QUEUE}') GROUP BY 1 ORDER BY 1`,
  );
  return Object.fromEntries(states.rows.map((row) => [row.state, row.n]));
}

/** Open jobs per queue and how long the oldest runnable one has waited, in seconds (a session's health). */
export async function openJobsSummary(
  db: Queryable,
): Promise<{ node: number; publish: number; oldestWaitingSeconds: number }> {
  const queued = await db.query<{ name: string; n: number; oldest: number | null }>(
    `SELECT name, count(*)::int AS n,
            extract(epoch FROM now() - min(start_after) FILTER (WHERE state IN ('created', 'retry') AND start_after <= now()))::float8 AS oldest
       FROM pgboss.job
      WHERE name IN ('${NODE_QUEUE}', '${PUBLISH_QUEUE}') AND state < 'completed' GROUP BY name`,
  );
  const summary = { node: 0, publish: 0, oldestWaitingSeconds: 0 };
  for (const q of queued.rows) {
    summary[q.name === NODE_QUEUE ? "node" : "publish"] = q.n;
    summary.oldestWaitingSeconds = Math.max(summary.oldestWaitingSeconds, Math.round(q.oldest ?? 0));
  }
  return summary;
}

/**
 * The jobs that could run now and wait for a worker (created or retry, due), how many, and since when the oldest has
 * waited (`since`: its start_after; `seconds`: its age by the server's clock; 0 and null when none waits).
 */
export async function oldestWaitingJob(
  db: Queryable,
): Promise<{ readonly waiting: number; readonly seconds: number; readonly since: Date | null }> {
  const result = await db.query<{ waiting: number; since: Date | null; seconds: number | null }>(
    `SELECT count(*)::int AS waiting, min(start_after) AS since,
            extract(epoch FROM now() - min(start_after))::float8 AS seconds
       FROM pgboss.job
      WHERE name IN ('${NODE_QUEUE}', '${PUBLISH_QUEUE}') AND state IN ('created', 'retry') AND start_after <= now()`,
  );
  const row = result.rows[0];
  return { waiting: row?.waiting ?? 0, seconds: Math.max(0, Math.round(row?.seconds ?? 0)), since: row?.since ?? null };
}

/** True when a compactor job that could run has waited longer than `seconds` for a worker. */
export async function jobsWaitingForWorker(db: Queryable, seconds: number): Promise<boolean> {
  const result = await db.query<{ waiting: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM pgboss.job WHERE name IN ('${NODE_QUEUE}', '${PUBLISH_QUEUE}')
               AND state IN ('created', 'retry') AND start_after <= now() - $1::int * interval '1 second') AS waiting`,
    [seconds],
  );
  return result.rows[0]?.waiting === true;
}

/** Whether a publication job for the turn is waiting or running (its job row is the outbox). */
export async function hasOpenPublicationJob(
  db: Queryable,
  turn: { sessionId: string; generation: number; turnId: string },
): Promise<boolean> {
  const result = await db.query(
    `SELECT 1 FROM pgboss.job
      WHERE name = '${PUBLISH_QUEUE}' AND state < 'completed' AND singleton_key = $1::text LIMIT 1`,
    [publicationJobKey(turn)],
  );
  return (result.rowCount ?? 0) > 0;
}

/** One job for `insertJobs`: its data, its singleton key, and how long after now it may start. */
export interface JobRow {
  readonly data: object;
  readonly singletonKey: string;
  readonly startAfterSeconds?: number;
}

/**
 * Inserts `jobs` into `queue` in the caller's transaction: the rows pg-boss 12.38's `insert` writes (its
 * plans.insertJobs: the queue's settings copied onto each job, ON CONFLICT DO NOTHING, one NOTIFY on pg-boss's channel
 * when a job may start now, so a worker listening wakes at once), but without a pg-boss instance. A producer that
 * only inserts jobs then needs neither pg-boss's module nor its pool, schema check and timers: in `opencode run` that
 * start was about a third of the plugin's CPU (issue 9 item 2, docs/opencode-notes.md "What a run costs"). Inserting
 * into `pgboss.job` (the partitioned parent) routes each row to its queue's table, as pg-boss's insert into that table
 * does. tests/integration/job-insert.test.ts compares the rows with pg-boss's own.
 */
export async function insertJobs(db: Queryable, queue: string, jobs: readonly JobRow[]): Promise<void> {
  if (jobs.length === 0) return;
  await db.query(
    `WITH ins AS (
       INSERT INTO pgboss.job (id, name, data, priority, start_after, created_on, singleton_key, singleton_on, group_id,
                               group_tier, expire_seconds, deletion_seconds, keep_until, retry_limit, retry_delay,
                               retry_backoff, retry_delay_max, policy, dead_letter, heartbeat_seconds, blocked, blocking,
                               pending_dependencies, trace_context)
       SELECT gen_random_uuid(), $1::text, j.data, 0, j.start_after, pgboss.job_now(), j.singleton_key, NULL, NULL, NULL,
              COALESCE(q.expire_seconds, ${PGBOSS_DEFAULTS.expireSeconds}),
              COALESCE(q.deletion_seconds, ${PGBOSS_DEFAULTS.deletionSeconds}),
              j.start_after + COALESCE(q.retention_seconds, ${PGBOSS_DEFAULTS.retentionSeconds}) * interval '1s',
              COALESCE(q.retry_limit, ${PGBOSS_DEFAULTS.retryLimit}), COALESCE(q.retry_delay, ${PGBOSS_DEFAULTS.retryDelay}),
              COALESCE(q.retry_backoff, false), q.retry_delay_max, q.policy, q.dead_letter, q.heartbeat_seconds,
              false, false, 0, NULL
         FROM (SELECT d.data, d.singleton_key, pgboss.job_now() + d.delay * interval '1s' AS start_after
                 FROM unnest($2::jsonb[], $3::text[], $4::float8[]) AS d(data, singleton_key, delay)) j
         LEFT JOIN pgboss.queue q ON q.name = $1::text
       ON CONFLICT DO NOTHING
       RETURNING start_after
     )
     SELECT pg_notify(${PGBOSS_NOTIFY_CHANNEL_SQL}, $1::text)
       FROM pgboss.queue q
      WHERE q.name = $1::text AND q.notify AND EXISTS (SELECT 1 FROM ins WHERE start_after <= pgboss.job_now())`,
    [
      queue,
      jobs.map((job) => JSON.stringify(job.data)),
      jobs.map((job) => job.singletonKey),
      jobs.map((job) => job.startAfterSeconds ?? 0),
    ],
  );
}

/** pg-boss 12.38's fallbacks for a queue row that lacks a setting (plans.js QUEUE_DEFAULTS); ours set them all. */
const PGBOSS_DEFAULTS = {
  expireSeconds: 15 * 60,
  deletionSeconds: 7 * 24 * 3600,
  retentionSeconds: 14 * 24 * 3600,
  retryLimit: 2,
  retryDelay: 0,
} as const;

/** The channel pg-boss 12.38 workers LISTEN on for schema `pgboss` (plans.js notifyChannelSql). */
const PGBOSS_NOTIFY_CHANNEL_SQL = `('pgboss_' || left(encode(sha224('pgboss'::bytea), 'hex'), 24))`;

/**
 * The parents of a tree with a node job due now (created or running, not a failure's delayed retry), at most `limit`:
 * the merges a batch may make together (src/compactor/batch.ts). Their jobs then find their node built.
 */
export async function openParentJobsOfTree(db: Queryable, treeId: number, limit: number): Promise<NodeAddress[]> {
  const result = await db.query<{ singleton_key: string }>(
    `SELECT singleton_key FROM pgboss.job
      WHERE name = '${NODE_QUEUE}' AND state IN ('created', 'active') AND start_after <= now()
        AND singleton_key LIKE $1::text AND singleton_key NOT LIKE $2::text
      ORDER BY created_on LIMIT $3::int`,
    [`${treeId}:%`, `${treeId}:0:%`, limit],
  );
  return result.rows.map((row) => {
    const [, level, index] = row.singleton_key.split(":");
    return { level: Number(level), index: Number(index) };
  });
}
