import type { Queryable } from "./db.js";

export interface NewAdapterProblem {
  readonly host: string;
  readonly hostSessionId: string | null;
  readonly holder: string;
  /** What the adapter was doing: ingest, admit, finish, transform, lease, worker, reconcile, tool. */
  readonly operation: string;
  readonly code: string | null;
  readonly message: string;
}

export interface AdapterProblem extends NewAdapterProblem {
  readonly problemId: number;
  readonly createdAt: Date;
}

/** How many problems a host session keeps (a database that stays down can add one per event). */
export const PROBLEMS_KEPT_PER_SESSION = 100;

/**
 * Codes that are state, not history: the adapter reads them back (HISTORY_REWRITTEN switches a reverted session's
 * memory off in every later process), so they are never pruned.
 */
const DURABLE_PROBLEM_CODES = ["HISTORY_REWRITTEN"];

/** Records a problem and drops the host session's older ones beyond PROBLEMS_KEPT_PER_SESSION (durable codes stay). */
export async function recordAdapterProblem(db: Queryable, problem: NewAdapterProblem): Promise<void> {
  // The DELETE sees the rows as they were before the INSERT: keeping KEPT - 1 of them leaves KEPT with the new one.
  // Equality (not IS NOT DISTINCT FROM) when there is a session, so the lookup uses adapter_problems_session_idx.
  const sameSession = problem.hostSessionId === null ? "host_session_id IS NULL" : "host_session_id = $2::text";
  await db.query(
    `WITH inserted AS (
       INSERT INTO optchat.adapter_problems (host, host_session_id, holder, operation, code, message)
       VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::text)
     ), pruned AS (
       DELETE FROM optchat.adapter_problems
        WHERE host = $1::text AND ${sameSession}
          AND (code IS NULL OR code <> ALL ($8::text[]))
          AND problem_id <= (SELECT problem_id FROM optchat.adapter_problems
                              WHERE host = $1::text AND ${sameSession}
                                AND (code IS NULL OR code <> ALL ($8::text[]))
                              ORDER BY problem_id DESC OFFSET $7::int - 1 LIMIT 1)
     )
     SELECT 1`,
    [
      problem.host,
      problem.hostSessionId,
      problem.holder,
      problem.operation,
      problem.code,
      problem.message,
      PROBLEMS_KEPT_PER_SESSION,
      DURABLE_PROBLEM_CODES,
    ],
  );
}

/** The latest problems of a host session (and those recorded with no session), newest first. */
export async function listAdapterProblems(
  db: Queryable,
  host: string,
  hostSessionId: string,
  limit: number,
): Promise<AdapterProblem[]> {
  const result = await db.query<{
    problem_id: number;
    host: string;
    host_session_id: string | null;
    created_at: Date;
    holder: string;
    operation: string;
    code: string | null;
    message: string;
  }>(
    `SELECT problem_id, host, host_session_id, created_at, holder, operation, code, message
       FROM optchat.adapter_problems
      WHERE host = $1::text AND (host_session_id = $2::text OR host_session_id IS NULL)
      ORDER BY problem_id DESC LIMIT $3::int`,
    [host, hostSessionId, limit],
  );
  return result.rows.map((row) => ({
    problemId: Number(row.problem_id),
    host: row.host,
    hostSessionId: row.host_session_id,
    createdAt: row.created_at,
    holder: row.holder,
    operation: row.operation,
    code: row.code,
    message: row.message,
  }));
}

/** The latest problem of a host session with this code (e.g. HISTORY_REWRITTEN), whatever else was recorded since. */
export async function findAdapterProblem(
  db: Queryable,
  host: string,
  hostSessionId: string,
  code: string,
): Promise<{ message: string; createdAt: Date } | undefined> {
  const result = await db.query<{ message: string; created_at: Date }>(
    `SELECT message, created_at FROM optchat.adapter_problems
      WHERE host = $1::text AND host_session_id = $2::text AND code = $3::text
      ORDER BY problem_id DESC LIMIT 1`,
    [host, hostSessionId, code],
  );
  const row = result.rows[0];
  return row ? { message: row.message, createdAt: row.created_at } : undefined;
}
