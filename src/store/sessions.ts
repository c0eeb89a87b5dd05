import type { Queryable } from "./db.js";
import { ofCurrentGeneration, publishedInSnapshot } from "./visibility.js";

export type ScopeKind = "project" | "profile" | "isolated";
/** Shared with the scope's team, or private to its owner (migration 016, docs/team.md). */
export type SessionVisibility = "shared" | "private";

export interface SessionRow {
  session_id: string;
  scope_id: string;
  host: string;
  host_session_id: string;
  project_id: string | null;
  parent_session_id: string | null;
  current_generation: number;
  title: string | null;
  created_at: Date;
  deleted_at: Date | null;
  archived_at: Date | null;
  owner_role: string;
  visibility: SessionVisibility;
}

/** A session as stored: the new session with its generation, creation time and lifecycle marks. */
export interface Session extends NewSession {
  readonly currentGeneration: number;
  readonly createdAt: Date;
  /** Forgotten (a tombstone, migration 010): nothing of it is readable or writable. */
  readonly deletedAt: Date | null;
  /** Archived: hidden from listings and discovery, not forgotten. */
  readonly archivedAt: Date | null;
  /** The role that opened it (docs/team.md). */
  readonly ownerRole: string;
}

export function toSession(row: SessionRow): Session {
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
    deletedAt: row.deleted_at ?? null,
    archivedAt: row.archived_at ?? null,
    ownerRole: row.owner_role,
    visibility: row.visibility,
  };
}

export const SESSION_COLUMNS =
  "session_id, scope_id, host, host_session_id, project_id, parent_session_id, current_generation, title, created_at, deleted_at, archived_at, " +
  "owner_role, visibility";

export interface Scope {
  readonly scopeId: string;
  readonly kind: ScopeKind;
  readonly policyRevision: number;
  readonly retentionEpoch: number;
  readonly nextPublicationSeq: number;
}

export async function findScope(db: Queryable, scopeId: string): Promise<Scope | undefined> {
  const result = await db.query<{
    scope_id: string;
    kind: ScopeKind;
    policy_revision: number;
    retention_epoch: number;
    next_publication_seq: number;
  }>(
    "SELECT scope_id, kind, policy_revision, retention_epoch, next_publication_seq FROM optchat.scopes WHERE scope_id = $1::text",
    [scopeId],
  );
  const row = result.rows[0];
  return row
    ? {
        scopeId: row.scope_id,
        kind: row.kind,
        policyRevision: row.policy_revision,
        retentionEpoch: row.retention_epoch,
        nextPublicationSeq: row.next_publication_seq,
      }
    : undefined;
}

export interface SessionListing {
  /** The exact creation time as Postgres prints it (microseconds), for page cursors: a JS Date would drop them. */
  readonly cursorTime: string;
  readonly sessionId: string;
  readonly title: string | null;
  readonly projectId: string | null;
  readonly createdAt: Date;
  readonly records: number;
  readonly publications: number;
  readonly firstAt: Date | null;
  readonly lastAt: Date | null;
}

/**
 * Sessions of a scope in creation order, after `afterSessionId`, with their record and publication counts as of a
 * snapshot: only publications below `publicationHighWater` count, and only the sessions that have one (or are the
 * caller's own) are listed, so a session that published nothing visible does not leak its existence.
 */
export async function listScopeSessions(
  db: Queryable,
  scopeId: string,
  publicationHighWater: number,
  ownSessionId: string,
  after: { cursorTime: string; sessionId: string } | undefined,
  limit: number,
): Promise<SessionListing[]> {
  const result = await db.query<{
    session_id: string;
    cursor_time: string;
    title: string | null;
    project_id: string | null;
    created_at: Date;
    records: number;
    publications: number;
    first_at: Date | null;
    last_at: Date | null;
  }>(
    `SELECT s.session_id, s.created_at::text AS cursor_time, s.title, s.project_id, s.created_at,
            coalesce(max(p.end_seq_exclusive), 0)::bigint AS records, count(p.publication_seq)::int AS publications,
            min(p.completed_at) AS first_at, max(p.completed_at) AS last_at
       FROM optchat.sessions s
       LEFT JOIN optchat.publications p
         ON ${ofCurrentGeneration("p", "s")} AND ${publishedInSnapshot("p", "$1::text", "$2::bigint")}
      -- Forgotten and archived sessions are not discovered (docs/deletion.md); the reader's own session always is.
      WHERE s.scope_id = $1::text AND ((s.deleted_at IS NULL AND s.archived_at IS NULL) OR s.session_id = $3::text)
        AND ($4::timestamptz IS NULL OR (s.created_at, s.session_id) > ($4::timestamptz, $5::text))
      GROUP BY s.session_id
     HAVING count(p.publication_seq) > 0 OR s.session_id = $3::text
      ORDER BY s.created_at, s.session_id
      LIMIT $6::int`,
    [scopeId, publicationHighWater, ownSessionId, after?.cursorTime ?? null, after?.sessionId ?? null, limit],
  );
  return result.rows.map((r) => ({
    cursorTime: r.cursor_time,
    sessionId: r.session_id,
    title: r.title,
    projectId: r.project_id,
    createdAt: r.created_at,
    records: r.records,
    publications: r.publications,
    firstAt: r.first_at,
    lastAt: r.last_at,
  }));
}

export interface NewSession {
  readonly sessionId: string;
  readonly scopeId: string;
  readonly host: string;
  readonly hostSessionId: string;
  readonly projectId: string | null;
  readonly parentSessionId: string | null;
  readonly title: string | null;
  /** A private session's turns never publish; only its owner and the operator read it. */
  readonly visibility: SessionVisibility;
}

/**
 * Returns the session registered for (host, hostSessionId), registering `candidate` when there is none: its scope if
 * that is new (with the scope's shared tree unless it is isolated), the session, its generation 0 and its session tree,
 * all in one statement (atomic without a transaction; a new session was seven round trips before `chat.message` could
 * go on). A known session is returned as it is: no scope is created for it (an isolated one would leak). Race-safe: the
 * unique (host, host_session_id) constraint picks one winner, and the loser reads the winner's row.
 */
export async function findOrRegisterSession(
  db: Queryable,
  candidate: NewSession,
  kind: ScopeKind,
): Promise<{ session: Session; created: boolean }> {
  const found = await db.query<SessionRow & { created: boolean }>(
    `WITH known AS (
       SELECT ${SESSION_COLUMNS} FROM optchat.sessions WHERE host = $3::text AND host_session_id = $4::text
     ), new_scope AS (
       INSERT INTO optchat.scopes (scope_id, kind) SELECT $2::text, $8::text WHERE NOT EXISTS (SELECT 1 FROM known)
       ON CONFLICT DO NOTHING RETURNING scope_id, kind
     ), shared_tree AS (
       INSERT INTO optchat.trees (kind, scope_id) SELECT 'shared', scope_id FROM new_scope WHERE kind <> 'isolated'
     ), inserted AS (
       INSERT INTO optchat.sessions (session_id, scope_id, host, host_session_id, project_id, parent_session_id, title,
                                     visibility)
       SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $9::text
        WHERE NOT EXISTS (SELECT 1 FROM known)
       ON CONFLICT (host, host_session_id) DO NOTHING
       RETURNING ${SESSION_COLUMNS}
     ), generation AS (
       INSERT INTO optchat.generations (session_id, generation) SELECT session_id, 0 FROM inserted
     ), session_tree AS (
       INSERT INTO optchat.trees (kind, session_id, generation) SELECT 'session', session_id, 0 FROM inserted
     )
     SELECT *, true AS created FROM inserted UNION ALL SELECT *, false AS created FROM known`,
    [
      candidate.sessionId,
      candidate.scopeId,
      candidate.host,
      candidate.hostSessionId,
      candidate.projectId,
      candidate.parentSessionId,
      candidate.title,
      kind,
      candidate.visibility,
    ],
  );
  const row = found.rows[0];
  if (row) return { session: toSession(row), created: row.created };
  // Another process registered it between this statement's snapshot and its insert.
  const winner = await findSessionByHost(db, candidate.host, candidate.hostSessionId);
  if (!winner)
    throw new Error(`findOrRegisterSession: (${candidate.host}, ${candidate.hostSessionId}) vanished after a conflict`);
  return { session: winner, created: false };
}

export async function findSessionByHost(
  db: Queryable,
  host: string,
  hostSessionId: string,
): Promise<Session | undefined> {
  const result = await db.query<SessionRow>(
    `SELECT ${SESSION_COLUMNS} FROM optchat.sessions WHERE host = $1::text AND host_session_id = $2::text`,
    [host, hostSessionId],
  );
  const row = result.rows[0];
  return row ? toSession(row) : undefined;
}

export async function findSession(db: Queryable, sessionId: string): Promise<Session | undefined> {
  const result = await db.query<SessionRow>(
    `SELECT ${SESSION_COLUMNS} FROM optchat.sessions WHERE session_id = $1::text`,
    [sessionId],
  );
  const row = result.rows[0];
  return row ? toSession(row) : undefined;
}

/** How a person recognises a session: the host's id, its title, the beginning of its first prompt. */
export interface SessionLabel {
  readonly sessionId: string;
  readonly host: string;
  readonly hostSessionId: string;
  readonly title: string | null;
  /** The first user message's first 200 characters (current generation), or null when there is none (or not text). */
  readonly firstPrompt: string | null;
  readonly deleted: boolean;
}

/** Labels of the given sessions, one statement; the first prompt is read as a 600-byte head of its payload. */
export async function sessionLabels(db: Queryable, sessionIds: readonly string[]): Promise<Map<string, SessionLabel>> {
  if (sessionIds.length === 0) return new Map();
  const result = await db.query<{
    session_id: string;
    host: string;
    host_session_id: string;
    title: string | null;
    deleted: boolean;
    head: Buffer | null;
  }>(
    `SELECT s.session_id, s.host, s.host_session_id, s.title, s.deleted_at IS NOT NULL AS deleted,
            (SELECT substring(b.content FROM 1 FOR 600) FROM optchat.records r
               JOIN optchat.blobs b ON b.hash = r.payload_hash AND b.valid_utf8
              WHERE r.session_id = s.session_id AND r.generation = s.current_generation AND r.kind = 'user'
              ORDER BY r.seq LIMIT 1) AS head
       FROM optchat.sessions s
      WHERE s.session_id = ANY($1::text[])`,
    [sessionIds],
  );
  return new Map(
    result.rows.map((row) => [
      row.session_id,
      {
        sessionId: row.session_id,
        host: row.host,
        hostSessionId: row.host_session_id,
        title: row.title,
        firstPrompt: row.head ? promptHead(row.head) : null,
        deleted: row.deleted,
      },
    ]),
  );
}

/** A payload's head as one line of at most 200 characters (a character cut at the byte limit is dropped). */
function promptHead(head: Buffer): string | null {
  const text = head
    .toString("utf8")
    .replace(/\uFFFD+$/, "")
    .replace(/\s+/g, " ")
    .trim();
  if (!text) return null;
  const chars = [...text];
  return chars.length > 200 ? `${chars.slice(0, 199).join("")}…` : text;
}
