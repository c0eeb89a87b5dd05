import type { Queryable } from "./db.js";

export type InjectionStatus = "injected" | "not_ready" | "budget_exceeded" | "failed" | "skipped";

export interface NewInjection {
  readonly sessionId: string;
  readonly turnId: string | null;
  readonly holder: string;
  readonly status: InjectionStatus;
  readonly mode: string;
  readonly query: string | null;
  readonly detail: Readonly<Record<string, unknown>>;
  readonly error: string | null;
}

export interface Injection extends NewInjection {
  readonly injectionId: number;
  readonly createdAt: Date;
}

interface InjectionRow {
  injection_id: number;
  session_id: string;
  turn_id: string | null;
  created_at: Date;
  holder: string;
  status: InjectionStatus;
  mode: string;
  query: string | null;
  detail: Record<string, unknown>;
  error: string | null;
}

function toInjection(row: InjectionRow): Injection {
  return {
    injectionId: Number(row.injection_id),
    sessionId: row.session_id,
    turnId: row.turn_id,
    createdAt: row.created_at,
    holder: row.holder,
    status: row.status,
    mode: row.mode,
    query: row.query,
    detail: row.detail,
    error: row.error,
  };
}

/**
 * How many injections a session keeps: inspection needs the latest few, and one row is written per model request
 * (~1 KB of detail each), so an unpruned table grows with every step of every session forever.
 */
export const INJECTIONS_KEPT_PER_SESSION = 100;

/** Records an injection and drops the session's older ones beyond INJECTIONS_KEPT_PER_SESSION, in one statement. */
export async function recordInjection(db: Queryable, injection: NewInjection): Promise<number> {
  // The DELETE sees the rows as they were before the INSERT: keeping KEPT - 1 of them leaves KEPT with the new one.
  const result = await db.query<{ injection_id: number }>(
    `WITH inserted AS (
       INSERT INTO optchat.injections (session_id, turn_id, holder, status, mode, query, detail, error)
       VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::jsonb, $8::text)
       RETURNING injection_id
     ), pruned AS (
       DELETE FROM optchat.injections
        WHERE session_id = $1::text
          AND injection_id <= (SELECT injection_id FROM optchat.injections WHERE session_id = $1::text
                                ORDER BY injection_id DESC OFFSET $9::int - 1 LIMIT 1)
     )
     SELECT injection_id FROM inserted`,
    [
      injection.sessionId,
      injection.turnId,
      injection.holder,
      injection.status,
      injection.mode,
      injection.query,
      JSON.stringify(injection.detail),
      injection.error,
      INJECTIONS_KEPT_PER_SESSION,
    ],
  );
  return Number(result.rows[0]?.injection_id);
}

/** The session's latest injections, newest first. */
export async function listInjections(db: Queryable, sessionId: string, limit: number): Promise<Injection[]> {
  const result = await db.query<InjectionRow>(
    `SELECT injection_id, session_id, turn_id, created_at, holder, status, mode, query, detail, error
       FROM optchat.injections WHERE session_id = $1::text ORDER BY injection_id DESC LIMIT $2::int`,
    [sessionId, limit],
  );
  return result.rows.map(toInjection);
}
