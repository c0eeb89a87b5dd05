/**
 * pg-boss's own tables, read only here (issue 15 item 6): the names of optchat's queues, the singleton keys its jobs
 * carry, and every query of `pgboss.job`. pg-boss writes the rows (compactor/queue.ts sends through its API); the store
 * reads them where a decision needs the outbox in the same statement (a node or a turn with no open job) or where an
 * operator's status counts them.
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
