/**
 * Read-only listings for the memory browser (`optchat browse`, `optchat export --html`): the sessions of a scope, the
 * levels of a tree, the time spans of node ranges, and the compactor's work per tree (scopes: store/scopes.ts). Every
 * statement is a SELECT; the browser's pool is also read-only at the server (db.ts `openPool`).
 */
import type { Queryable } from "./db.js";
import type { Tree } from "./trees.js";

export interface SessionSummary {
  readonly sessionId: string;
  readonly host: string;
  readonly hostSessionId: string;
  readonly title: string | null;
  readonly projectId: string | null;
  readonly parentSessionId: string | null;
  readonly createdAt: Date;
  readonly generation: number;
  /** Records of the current generation. */
  readonly records: number;
  readonly turns: number;
  readonly publications: number;
  /** Host times of the first and the last record (by seq: two index lookups, not a scan of the session). */
  readonly firstAt: Date | null;
  readonly lastAt: Date | null;
}

/** Sessions of a scope in creation order, `offset` of them skipped: every session, published or not. */
export async function listSessionsOfScope(
  db: Queryable,
  scopeId: string,
  offset: number,
  limit: number,
): Promise<SessionSummary[]> {
  const result = await db.query<{
    session_id: string;
    host: string;
    host_session_id: string;
    title: string | null;
    project_id: string | null;
    parent_session_id: string | null;
    created_at: Date;
    generation: number;
    records: number;
    turns: number;
    publications: number;
    first_at: Date | null;
    last_at: Date | null;
  }>(
    `SELECT s.session_id, s.host, s.host_session_id, s.title, s.project_id, s.parent_session_id, s.created_at,
            s.current_generation AS generation, g.next_seq AS records,
            (SELECT count(*)::int FROM optchat.turns t
              WHERE t.session_id = s.session_id AND t.generation = s.current_generation) AS turns,
            (SELECT count(*)::int FROM optchat.publications p
              WHERE p.session_id = s.session_id AND p.generation = s.current_generation AND p.retired_at IS NULL)
              AS publications,
            (SELECT r.occurred_at FROM optchat.records r
              WHERE r.session_id = s.session_id AND r.generation = s.current_generation ORDER BY r.seq LIMIT 1) AS first_at,
            (SELECT r.occurred_at FROM optchat.records r
              WHERE r.session_id = s.session_id AND r.generation = s.current_generation ORDER BY r.seq DESC LIMIT 1) AS last_at
       FROM optchat.sessions s
       JOIN optchat.generations g ON g.session_id = s.session_id AND g.generation = s.current_generation
      WHERE s.scope_id = $1::text AND s.deleted_at IS NULL AND s.archived_at IS NULL
      ORDER BY s.created_at, s.session_id
     OFFSET $2::int LIMIT $3::int`,
    [scopeId, offset, limit],
  );
  return result.rows.map((row) => ({
    sessionId: row.session_id,
    host: row.host,
    hostSessionId: row.host_session_id,
    title: row.title,
    projectId: row.project_id,
    parentSessionId: row.parent_session_id,
    createdAt: row.created_at,
    generation: row.generation,
    records: row.records,
    turns: row.turns,
    publications: row.publications,
    firstAt: row.first_at,
    lastAt: row.last_at,
  }));
}

export interface LevelSummary {
  readonly level: number;
  /** Built nodes at this level (their latest revisions). */
  readonly nodes: number;
  readonly bytes: number;
}

/** The built levels of a tree, top first. */
export async function listTreeLevels(db: Queryable, treeId: number): Promise<LevelSummary[]> {
  const result = await db.query<{ level: number; nodes: number; bytes: number }>(
    `SELECT level, count(*)::int AS nodes, sum(byte_length)::bigint AS bytes
       FROM (SELECT DISTINCT ON (level, idx) level, byte_length FROM optchat.nodes
              WHERE tree_id = $1::bigint ORDER BY level, idx, revision DESC) n
      GROUP BY level ORDER BY level DESC`,
    [treeId],
  );
  return result.rows.map((row) => ({ level: row.level, nodes: row.nodes, bytes: Number(row.bytes) }));
}

export interface TimeSpan {
  readonly first: Date;
  readonly last: Date;
}

/**
 * The time span of each leaf range [start, end) of a tree, keyed `start:end`: for a session tree the host times of
 * its records, for a shared tree the completion times of its publications (the records behind a high shared node can
 * be a whole project's history; the turns' completion times are one index range).
 */
export async function rangeTimeSpans(
  db: Queryable,
  tree: Tree,
  ranges: readonly { start: number; end: number }[],
): Promise<Map<string, TimeSpan>> {
  if (ranges.length === 0) return new Map();
  const span =
    tree.kind === "session"
      ? `SELECT min(r.occurred_at) AS first, max(r.occurred_at) AS last FROM optchat.records r
          WHERE r.session_id = $3::text AND r.generation = $4::int AND r.seq >= a.start AND r.seq < a.stop`
      : `SELECT min(p.completed_at) AS first, max(p.completed_at) AS last FROM optchat.publications p
          WHERE p.scope_id = $3::text AND p.publication_seq >= a.start AND p.publication_seq < a.stop`;
  const result = await db.query<{ start: number; stop: number; first: Date | null; last: Date | null }>(
    `SELECT a.start, a.stop, s.first, s.last
       FROM unnest($1::bigint[], $2::bigint[]) AS a(start, stop)
       CROSS JOIN LATERAL (${span}) s`,
    [
      ranges.map((r) => r.start),
      ranges.map((r) => r.end),
      tree.kind === "session" ? tree.sessionId : tree.scopeId,
      ...(tree.kind === "session" ? [tree.generation] : []),
    ],
  );
  const spans = new Map<string, TimeSpan>();
  for (const row of result.rows) {
    if (row.first && row.last)
      spans.set(`${Number(row.start)}:${Number(row.stop)}`, { first: row.first, last: row.last });
  }
  return spans;
}

export interface CompactorWork {
  /** `free` (no model call: the text fit as it was) or the summarizer's identity. */
  readonly summarizer: string;
  /** Node rows built, every revision counted. */
  readonly nodes: number;
  /** Model calls made for them (chunks included). */
  readonly calls: number;
  readonly overshoots: number;
}

/** What the compactor did for a tree, by summarizer: the only cost measure optchat records (no token ledger). */
export async function listCompactorWork(db: Queryable, treeId: number): Promise<CompactorWork[]> {
  const result = await db.query<{ summarizer: string; nodes: number; calls: number; overshoots: number }>(
    `SELECT summarizer, count(*)::int AS nodes, coalesce(sum(attempts), 0)::int AS calls,
            count(*) FILTER (WHERE overshoot)::int AS overshoots
       FROM optchat.nodes WHERE tree_id = $1::bigint GROUP BY summarizer ORDER BY summarizer`,
    [treeId],
  );
  return result.rows.map((row) => ({ ...row }));
}
