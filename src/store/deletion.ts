/**
 * The SQL of forgetting sessions (issue 15 item 4), in the caller's transaction: which sessions a request names, the
 * locks a deletion takes, and the removal of a session's own content. The shared tree's part is retiring its
 * publications (retire-publications.ts); src/memory/forget.ts runs both in one transaction.
 */
import type { Queryable } from "./db.js";

/** One session to forget, with the scope it belongs to. */
export interface ForgetTarget {
  readonly sessionId: string;
  readonly scopeId: string;
  readonly hostSessionId: string;
  readonly title: string | null;
}

interface TargetRow {
  session_id: string;
  scope_id: string;
  host_session_id: string;
  title: string | null;
}

const toTarget = (row: TargetRow): ForgetTarget => ({
  sessionId: row.session_id,
  scopeId: row.scope_id,
  hostSessionId: row.host_session_id,
  title: row.title,
});

/**
 * The live (not yet forgotten) sessions a request names: by id, every session of a scope, or every session whose
 * last activity (its newest record, else its registration) is before a date. Subagent sessions of a named session go
 * with it: their reports reached the parent as tool results, and their transcripts are its work.
 */
export async function findForgetTargets(
  db: Queryable,
  what: { sessionIds: readonly string[] } | { scopeId: string } | { before: Date },
): Promise<ForgetTarget[]> {
  const where =
    "sessionIds" in what
      ? "s.session_id = ANY($1::text[]) OR s.parent_session_id = ANY($1::text[])"
      : "scopeId" in what
        ? "s.scope_id = $1::text"
        : `coalesce((SELECT max(r.occurred_at) FROM optchat.records r WHERE r.session_id = s.session_id), s.created_at)
             < $1::timestamptz`;
  const value = "sessionIds" in what ? what.sessionIds : "scopeId" in what ? what.scopeId : what.before;
  const result = await db.query<TargetRow>(
    `SELECT s.session_id, s.scope_id, s.host_session_id, s.title FROM optchat.sessions s
      WHERE s.deleted_at IS NULL AND (${where}) ORDER BY s.scope_id, s.session_id`,
    [value],
  );
  return result.rows.map(toTarget);
}

/**
 * Locks what a deletion changes, in one order (scopes, then sessions, then trees by id) so that two deletions cannot
 * deadlock: the scope rows serialize against publication (insertPublication updates the scope row), the session trees
 * against ingestion and node commits (lockTree). Returns the session tree ids.
 */
export async function lockForDeletion(
  db: Queryable,
  scopeIds: readonly string[],
  sessionIds: readonly string[],
): Promise<number[]> {
  await db.query("SELECT 1 FROM optchat.scopes WHERE scope_id = ANY($1::text[]) ORDER BY scope_id FOR UPDATE", [
    scopeIds,
  ]);
  await db.query("SELECT 1 FROM optchat.sessions WHERE session_id = ANY($1::text[]) ORDER BY session_id FOR UPDATE", [
    sessionIds,
  ]);
  const trees = await db.query<{ tree_id: string }>(
    `SELECT tree_id FROM optchat.trees WHERE kind = 'session' AND session_id = ANY($1::text[])
      ORDER BY tree_id FOR UPDATE`,
    [sessionIds],
  );
  return trees.rows.map((row) => Number(row.tree_id));
}

/** What removing sessions' content deleted, for the progress report. */
export interface ContentRemoved {
  readonly records: number;
  readonly blobs: number;
  readonly nodes: number;
  readonly staged: number;
  readonly turns: number;
}

/**
 * Removes the sessions' own content and leaves their tombstones (migration 010): the session trees (nodes, chunks,
 * failures, views, projections, node statistics), the records and every blob no surviving record references (blobs are
 * shared by hash, so a payload another record also holds stays), staged partials, conflicts, injections, adapter
 * problems, leases, publication failures, and the turns no publication names; the kept turns lose their query text,
 * the session its title and attributes. Publications must be retired first (their records' statistics are read there).
 */
export async function removeSessionContent(
  db: Queryable,
  sessionIds: readonly string[],
  treeIds: readonly number[],
): Promise<ContentRemoved> {
  const nodes = await removeTrees(db, treeIds);
  const { records, blobs } = await removeRecords(db, sessionIds);
  const staged = await removeSessionRows(db, sessionIds);
  const turns = await tombstoneTurns(db, sessionIds);
  return { records, blobs, nodes, staged, turns };
}

/** The session trees with their nodes, chunks, failures, views, projections and statistics; the nodes removed. */
async function removeTrees(db: Queryable, treeIds: readonly number[]): Promise<number> {
  const nodes = await db.query<{ n: string }>(
    `WITH c AS (DELETE FROM optchat.node_chunks WHERE tree_id = ANY($1::bigint[])),
          f AS (DELETE FROM optchat.node_failures WHERE tree_id = ANY($1::bigint[])),
          p AS (DELETE FROM optchat.view_projections WHERE tree_id = ANY($1::bigint[])),
          s AS (DELETE FROM optchat.search_tree_stats WHERE tree_id = ANY($1::bigint[])),
          n AS (DELETE FROM optchat.nodes WHERE tree_id = ANY($1::bigint[]) RETURNING 1)
     SELECT count(*) AS n FROM n`,
    [treeIds],
  );
  await db.query(
    `WITH v AS (DELETE FROM optchat.view_parts WHERE tree_id = ANY($1::bigint[]))
     DELETE FROM optchat.view_revisions WHERE tree_id = ANY($1::bigint[])`,
    [treeIds],
  );
  await db.query("DELETE FROM optchat.trees WHERE tree_id = ANY($1::bigint[])", [treeIds]);
  return Number(nodes.rows[0]?.n ?? 0);
}

/** The records, and every blob no surviving record references (blobs are shared by hash). */
async function removeRecords(
  db: Queryable,
  sessionIds: readonly string[],
): Promise<{ records: number; blobs: number }> {
  const records = await db.query<{ records: string; blobs: string }>(
    `WITH gone AS (
       DELETE FROM optchat.records WHERE session_id = ANY($1::text[]) RETURNING payload_hash
     ), hashes AS (SELECT DISTINCT payload_hash AS hash FROM gone),
     -- The statement's snapshot does not see its own deletions: a blob stays when a record outside these sessions
     -- references it.
     blobs_gone AS (
       DELETE FROM optchat.blobs b USING hashes h
        WHERE b.hash = h.hash AND NOT EXISTS (
          SELECT 1 FROM optchat.records r WHERE r.payload_hash = h.hash AND NOT (r.session_id = ANY($1::text[])))
       RETURNING 1
     )
     SELECT (SELECT count(*) FROM gone) AS records, (SELECT count(*) FROM blobs_gone) AS blobs`,
    [sessionIds],
  );
  return { records: Number(records.rows[0]?.records ?? 0), blobs: Number(records.rows[0]?.blobs ?? 0) };
}

/** Staged partials, conflicts, injections, leases, publication failures, adapter problems; the staged items removed. */
async function removeSessionRows(db: Queryable, sessionIds: readonly string[]): Promise<number> {
  const staged = await db.query<{ n: string }>(
    `WITH x AS (DELETE FROM optchat.staged_items WHERE session_id = ANY($1::text[]) RETURNING 1),
          c AS (DELETE FROM optchat.ingest_conflicts WHERE session_id = ANY($1::text[])),
          i AS (DELETE FROM optchat.injections WHERE session_id = ANY($1::text[])),
          l AS (DELETE FROM optchat.session_leases WHERE session_id = ANY($1::text[])),
          f AS (DELETE FROM optchat.publication_failures WHERE session_id = ANY($1::text[])),
          a AS (DELETE FROM optchat.adapter_problems pr USING optchat.sessions s
                 WHERE s.session_id = ANY($1::text[]) AND pr.host = s.host AND pr.host_session_id = s.host_session_id)
     SELECT count(*) AS n FROM x`,
    [sessionIds],
  );
  return Number(staged.rows[0]?.n ?? 0);
}

/**
 * The turns no publication names go; the kept ones lose their query text; the sessions become tombstones (no title,
 * no attributes). The turns removed.
 */
async function tombstoneTurns(db: Queryable, sessionIds: readonly string[]): Promise<number> {
  const turns = await db.query<{ n: string }>(
    `WITH gone AS (
       DELETE FROM optchat.turns t WHERE t.session_id = ANY($1::text[]) AND NOT EXISTS (
         SELECT 1 FROM optchat.publications p
          WHERE p.session_id = t.session_id AND p.generation = t.generation AND p.turn_id = t.turn_id)
       RETURNING 1
     ), kept AS (
       UPDATE optchat.turns t SET query = NULL WHERE t.session_id = ANY($1::text[]) AND EXISTS (
         SELECT 1 FROM optchat.publications p
          WHERE p.session_id = t.session_id AND p.generation = t.generation AND p.turn_id = t.turn_id)
     ), tombstones AS (
       UPDATE optchat.sessions SET deleted_at = now(), archived_at = NULL, title = NULL, attributes = '{}'::jsonb
        WHERE session_id = ANY($1::text[])
     )
     SELECT count(*) AS n FROM gone`,
    [sessionIds],
  );
  return Number(turns.rows[0]?.n ?? 0);
}

/** Bumps the scopes' retention epochs: every snapshot pinned before this transaction re-pins before it reads. */
export async function bumpRetentionEpochs(db: Queryable, scopeIds: readonly string[]): Promise<void> {
  await db.query("UPDATE optchat.scopes SET retention_epoch = retention_epoch + 1 WHERE scope_id = ANY($1::text[])", [
    scopeIds,
  ]);
}
