import type { Queryable } from "./db.js";

export type ScopeKind = "project" | "profile" | "isolated";

interface SessionRow {
  session_id: string;
  scope_id: string;
  host: string;
  host_session_id: string;
  project_id: string | null;
  parent_session_id: string | null;
  current_generation: number;
  title: string | null;
  created_at: Date;
}

export interface Session {
  readonly sessionId: string;
  readonly scopeId: string;
  readonly host: string;
  readonly hostSessionId: string;
  readonly projectId: string | null;
  readonly parentSessionId: string | null;
  readonly currentGeneration: number;
  readonly title: string | null;
  readonly createdAt: Date;
}

function toSession(row: SessionRow): Session {
  return {
    sessionId: row.session_id,
    scopeId: row.scope_id,
    host: row.host,
    hostSessionId: row.host_session_id,
    projectId: row.project_id,
    parentSessionId: row.parent_session_id,
    currentGeneration: row.current_generation,
    title: row.title,
    createdAt: row.created_at,
  };
}

const SESSION_COLUMNS =
  "session_id, scope_id, host, host_session_id, project_id, parent_session_id, current_generation, title, created_at";

export async function ensureScope(db: Queryable, scopeId: string, kind: ScopeKind): Promise<void> {
  await db.query("INSERT INTO optchat.scopes (scope_id, kind) VALUES ($1::text, $2::text) ON CONFLICT DO NOTHING", [
    scopeId,
    kind,
  ]);
}

export interface NewSession {
  readonly sessionId: string;
  readonly scopeId: string;
  readonly host: string;
  readonly hostSessionId: string;
  readonly projectId: string | null;
  readonly parentSessionId: string | null;
  readonly title: string | null;
}

/**
 * Returns the session registered for (host, hostSessionId), registering `candidate` (and its generation 0) when there
 * is none. Idempotent and race-safe: the unique (host, host_session_id) constraint picks one winner; run it inside a
 * transaction so the session and its generation row appear together.
 */
export async function registerSession(
  db: Queryable,
  candidate: NewSession,
): Promise<{ session: Session; created: boolean }> {
  const inserted = await db.query<SessionRow>(
    `INSERT INTO optchat.sessions (session_id, scope_id, host, host_session_id, project_id, parent_session_id, title)
     VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text)
     ON CONFLICT (host, host_session_id) DO NOTHING
     RETURNING ${SESSION_COLUMNS}`,
    [
      candidate.sessionId,
      candidate.scopeId,
      candidate.host,
      candidate.hostSessionId,
      candidate.projectId,
      candidate.parentSessionId,
      candidate.title,
    ],
  );
  const row = inserted.rows[0];
  if (row) {
    await db.query("INSERT INTO optchat.generations (session_id, generation) VALUES ($1::text, 0)", [row.session_id]);
    await db.query("INSERT INTO optchat.trees (kind, session_id, generation) VALUES ('session', $1::text, 0)", [
      row.session_id,
    ]);
    return { session: toSession(row), created: true };
  }
  const existing = await db.query<SessionRow>(
    `SELECT ${SESSION_COLUMNS} FROM optchat.sessions WHERE host = $1::text AND host_session_id = $2::text`,
    [candidate.host, candidate.hostSessionId],
  );
  const found = existing.rows[0];
  if (!found)
    throw new Error(`registerSession: (${candidate.host}, ${candidate.hostSessionId}) vanished after a conflict`);
  return { session: toSession(found), created: false };
}

export async function findSession(db: Queryable, sessionId: string): Promise<Session | undefined> {
  const result = await db.query<SessionRow>(
    `SELECT ${SESSION_COLUMNS} FROM optchat.sessions WHERE session_id = $1::text`,
    [sessionId],
  );
  const row = result.rows[0];
  return row ? toSession(row) : undefined;
}

/** Current generation of each of the given sessions (absent sessions are absent from the map). */
export async function findCurrentGenerations(
  db: Queryable,
  sessionIds: readonly string[],
): Promise<Map<string, number>> {
  const result = await db.query<{ session_id: string; current_generation: number }>(
    "SELECT session_id, current_generation FROM optchat.sessions WHERE session_id = ANY($1::text[])",
    [sessionIds],
  );
  return new Map(result.rows.map((row) => [row.session_id, row.current_generation]));
}
