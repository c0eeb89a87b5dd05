/**
 * What `optchat status`, `optchat inspect` and `optchat doctor` judge the compactor by (issue 37 item 3): the workers'
 * heartbeats (migrations/015_compactor_workers.sql), the last turn's publication lag and the compactor's failures. The
 * job queue's side (the oldest waiting job) is in job-queue.ts, the only module that reads pg-boss's tables.
 */
import type { Queryable } from "./db.js";

/** One compactor worker as its heartbeat row says; ages are in seconds, measured by the server's clock. */
export interface WorkerBeat {
  readonly workerId: string;
  readonly hostName: string;
  readonly pid: number;
  readonly runsIn: string;
  readonly summarizer: string;
  readonly startedAt: Date;
  readonly lastBeatAt: Date;
  readonly beatAgeSeconds: number;
  readonly stoppedAt: Date | null;
  readonly paused: boolean;
  readonly jobsFinished: number;
  readonly lastJobAt: Date | null;
  readonly lastError: string | null;
  readonly lastErrorAt: Date | null;
}

/** A worker's row at its start (or again after a beat found it gone, e.g. after a database restore). */
export interface WorkerRegistration {
  readonly workerId: string;
  readonly hostName: string;
  readonly pid: number;
  readonly runsIn: string;
  readonly summarizer: string;
}

/** What a beat writes besides the time. */
export interface WorkerBeatState {
  readonly paused: boolean;
  readonly jobsFinished: number;
  /** Set when a job finished since the previous beat. */
  readonly jobFinished: boolean;
  readonly lastError: string | null;
  /** Set when `lastError` is new since the previous beat. */
  readonly errorChanged: boolean;
}

/** Whether the heartbeat table exists (a database not migrated this far has none). */
export async function heartbeatsInstalled(db: Queryable): Promise<boolean> {
  const result = await db.query<{ found: boolean }>(
    "SELECT to_regclass('optchat.compactor_workers') IS NOT NULL AS found",
  );
  return result.rows[0]?.found ?? false;
}

/** Writes a worker's row (started now) and deletes rows that have not beaten for `keepSeconds`. */
export async function registerWorker(db: Queryable, worker: WorkerRegistration, keepSeconds: number): Promise<void> {
  await db.query(
    `WITH gone AS (DELETE FROM optchat.compactor_workers WHERE last_beat_at < now() - $6::int * interval '1 second')
     INSERT INTO optchat.compactor_workers (worker_id, host_name, pid, runs_in, summarizer)
     VALUES ($1::text, $2::text, $3::int, $4::text, $5::text)
     ON CONFLICT (worker_id) DO UPDATE SET last_beat_at = now(), stopped_at = NULL`,
    [worker.workerId, worker.hostName, worker.pid, worker.runsIn, worker.summarizer, keepSeconds],
  );
}

/** One beat; false when the row is gone (then the caller registers again). */
export async function beatWorker(db: Queryable, workerId: string, state: WorkerBeatState): Promise<boolean> {
  const result = await db.query(
    `UPDATE optchat.compactor_workers
        SET last_beat_at = now(), paused = $2::boolean, jobs_finished = $3::bigint,
            last_job_at = CASE WHEN $4::boolean THEN now() ELSE last_job_at END,
            last_error = CASE WHEN $6::boolean THEN $5::text ELSE last_error END,
            last_error_at = CASE WHEN $6::boolean THEN now() ELSE last_error_at END
      WHERE worker_id = $1::text`,
    [workerId, state.paused, state.jobsFinished, state.jobFinished, state.lastError, state.errorChanged],
  );
  return (result.rowCount ?? 0) > 0;
}

/** A clean stop: the row stays (status says since when no worker is alive) but no longer counts as alive. */
export async function markWorkerStopped(db: Queryable, workerId: string): Promise<void> {
  await db.query(
    "UPDATE optchat.compactor_workers SET stopped_at = now(), last_beat_at = now(), paused = false WHERE worker_id = $1::text",
    [workerId],
  );
}

/** Every worker row, the most recent beat first. */
export async function listWorkers(db: Queryable): Promise<WorkerBeat[]> {
  const result = await db.query<{
    worker_id: string;
    host_name: string;
    pid: number;
    runs_in: string;
    summarizer: string;
    started_at: Date;
    last_beat_at: Date;
    beat_age: number;
    stopped_at: Date | null;
    paused: boolean;
    jobs_finished: number;
    last_job_at: Date | null;
    last_error: string | null;
    last_error_at: Date | null;
  }>(
    `SELECT *, extract(epoch FROM now() - last_beat_at)::float8 AS beat_age
       FROM optchat.compactor_workers ORDER BY last_beat_at DESC, worker_id LIMIT 100`,
  );
  return result.rows.map((row) => ({
    workerId: row.worker_id,
    hostName: row.host_name,
    pid: row.pid,
    runsIn: row.runs_in,
    summarizer: row.summarizer,
    startedAt: row.started_at,
    lastBeatAt: row.last_beat_at,
    beatAgeSeconds: Math.max(0, Math.round(row.beat_age)),
    stoppedAt: row.stopped_at,
    paused: row.paused,
    jobsFinished: Number(row.jobs_finished),
    lastJobAt: row.last_job_at,
    lastError: row.last_error,
    lastErrorAt: row.last_error_at,
  }));
}

/** The most recently finished turn that publishes, and how long its publication took (or has waited so far). */
export interface LastTurnPublication {
  readonly sessionId: string;
  readonly turnId: string;
  readonly finishedAt: Date;
  readonly publishedAt: Date | null;
  /** Seconds from the turn's end to its publication, or to now while it is not published. */
  readonly lagSeconds: number;
}

export async function readLastTurnPublication(db: Queryable): Promise<LastTurnPublication | null> {
  const result = await db.query<{
    session_id: string;
    turn_id: string;
    finished_at: Date;
    published_at: Date | null;
    lag: number;
  }>(
    `SELECT t.session_id, t.turn_id, t.finished_at, p.published_at,
            extract(epoch FROM coalesce(p.published_at, now()) - t.finished_at)::float8 AS lag
       FROM (SELECT session_id, generation, turn_id, finished_at FROM optchat.turns
              WHERE publishes AND state <> 'active' AND finished_at IS NOT NULL
              ORDER BY finished_at DESC LIMIT 1) t
       LEFT JOIN optchat.publications p
         ON p.session_id = t.session_id AND p.generation = t.generation AND p.turn_id = t.turn_id`,
  );
  const row = result.rows[0];
  if (!row) return null;
  return {
    sessionId: row.session_id,
    turnId: row.turn_id,
    finishedAt: row.finished_at,
    publishedAt: row.published_at,
    lagSeconds: Math.max(0, Math.round(row.lag * 10) / 10),
  };
}

/**
 * The compactor's failures: nodes and publications that keep failing, the newest error and its age, and the age of the
 * newest model call that succeeded (null: none in the ledger, or no ledger).
 */
export interface CompactorFailures {
  readonly failingNodes: number;
  readonly failingPublications: number;
  readonly lastError: string | null;
  readonly lastFailureSecondsAgo: number | null;
  readonly lastOkCallSecondsAgo: number | null;
}

export async function readCompactorFailures(db: Queryable): Promise<CompactorFailures> {
  const ledger = await db.query<{ found: boolean }>(
    "SELECT to_regclass('optchat.compactor_calls') IS NOT NULL AS found",
  );
  const result = await db.query<{
    nodes: number;
    publications: number;
    last_error: string | null;
    last_failure: number | null;
    last_ok: number | null;
  }>(
    `WITH f AS (SELECT last_error, last_failed_at FROM optchat.node_failures
                UNION ALL SELECT last_error, last_failed_at FROM optchat.publication_failures)
     SELECT (SELECT count(*)::int FROM optchat.node_failures) AS nodes,
            (SELECT count(*)::int FROM optchat.publication_failures) AS publications,
            (SELECT last_error FROM f ORDER BY last_failed_at DESC LIMIT 1) AS last_error,
            (SELECT extract(epoch FROM now() - max(last_failed_at))::float8 FROM f) AS last_failure,
            ${
              ledger.rows[0]?.found
                ? `(SELECT extract(epoch FROM now() - max(at))::float8 FROM optchat.compactor_calls
                     WHERE outcome IN ('ok', 'over_limit', 'reference'))`
                : "NULL::float8"
            } AS last_ok`,
  );
  const row = result.rows[0];
  const seconds = (value: number | null | undefined) =>
    value === null || value === undefined ? null : Math.max(0, Math.round(value));
  return {
    failingNodes: row?.nodes ?? 0,
    failingPublications: row?.publications ?? 0,
    lastError: row?.last_error ?? null,
    lastFailureSecondsAgo: seconds(row?.last_failure),
    lastOkCallSecondsAgo: seconds(row?.last_ok),
  };
}
