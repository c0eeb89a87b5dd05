/**
 * Revoking a session's sharing (issue 15 item 4) and archiving (item 5): the SQL, in the caller's transaction.
 */
import type { Queryable } from "./db.js";

/**
 * Moves a session into an isolated scope of its own (`isolated:<session>`, seed 000 §11: it neither publishes nor
 * reads shared memory): its session tree's search statistics move with it, and its turns still waiting to be
 * published will not be. Its publications in the old scope must be retired first (retire-publications.ts). Returns
 * the new scope, or undefined when the session is already isolated or unknown.
 */
export async function moveToIsolatedScope(db: Queryable, sessionId: string): Promise<string | undefined> {
  const scopeId = `isolated:${sessionId}`;
  await db.query("INSERT INTO optchat.scopes (scope_id, kind) VALUES ($1::text, 'isolated') ON CONFLICT DO NOTHING", [
    scopeId,
  ]);
  const moved = await db.query(
    `UPDATE optchat.sessions s SET scope_id = $2::text FROM optchat.scopes sc
      WHERE s.session_id = $1::text AND sc.scope_id = s.scope_id AND sc.kind <> 'isolated' AND s.deleted_at IS NULL`,
    [sessionId, scopeId],
  );
  if ((moved.rowCount ?? 0) === 0) return undefined;
  await db.query(
    `WITH stats AS (
       UPDATE optchat.search_tree_stats st SET scope_id = $2::text FROM optchat.trees t
        WHERE t.tree_id = st.tree_id AND t.kind = 'session' AND t.session_id = $1::text
     ), records AS (
       -- A record carries its session's scope for the scope-first search index (migration 011).
       UPDATE optchat.records SET scope_id = $2::text WHERE session_id = $1::text
     )
     UPDATE optchat.turns SET publishes = false, publication_state = 'none'
      WHERE session_id = $1::text AND publication_state = 'pending'`,
    [sessionId, scopeId],
  );
  return scopeId;
}

/** Archives or unarchives a live session; returns whether it exists and is not forgotten. */
export async function setArchived(db: Queryable, sessionId: string, archived: boolean): Promise<boolean> {
  const result = await db.query(
    `UPDATE optchat.sessions SET archived_at = CASE WHEN $2::boolean THEN coalesce(archived_at, now()) END
      WHERE session_id = $1::text AND deleted_at IS NULL`,
    [sessionId, archived],
  );
  return (result.rowCount ?? 0) > 0;
}
