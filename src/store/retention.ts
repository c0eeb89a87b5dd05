import type { Queryable } from "./db.js";

/**
 * Retention of optchat's own derived rows (issue 9 item 8). What is kept, and why the rest may go:
 * - records, blobs, nodes: the memory itself; never deleted here.
 * - view parts (view_parts): at most 2N-1 rows per tree of N leaves (each node address enters a view once and leaves
 *   once), so they are bounded per record without deleting anything, and they keep every revision reproducible.
 * - fold events: not stored (derived from the nodes, migration 005).
 * - view revisions (view_revisions, and the projections cached for them): one per change of a view. A revision is
 *   kept while it is a tree's latest, while any turn pins it (its snapshot's shared view, or the own view of its first
 *   context assembly: seed 000 §9, reproducible exactly for as long as the turn exists), and for `olderThanSeconds`
 *   after it was superseded. Every other revision is deleted: nothing can ask for it (new snapshots pin the latest
 *   revision, which is read within the same call), and the refold audit checks the revisions that remain.
 *
 * "Superseded at least `olderThanSeconds` ago" is tested as "a later revision of the tree exists that was created that
 * long ago", so a revision that was the latest a moment ago is never deleted under a reader that has just found it.
 */
export async function deleteSupersededRevisions(
  db: Queryable,
  options: { olderThanSeconds: number; batch?: number },
): Promise<number> {
  const result = await db.query(
    `WITH doomed AS (
       SELECT v.tree_id, v.revision
         FROM optchat.view_revisions v
         JOIN optchat.trees t ON t.tree_id = v.tree_id
        WHERE v.revision < t.view_revision
          AND EXISTS (SELECT 1 FROM optchat.view_revisions later
                       WHERE later.tree_id = v.tree_id AND later.revision > v.revision
                         AND later.created_at <= now() - $1::int * interval '1 second')
          AND NOT EXISTS (SELECT 1 FROM optchat.turns tu
                           WHERE tu.shared_tree_id = v.tree_id AND tu.shared_view_revision = v.revision)
          AND NOT EXISTS (SELECT 1 FROM optchat.turns tu
                           WHERE t.kind = 'session' AND tu.session_id = t.session_id AND tu.generation = t.generation
                             AND tu.own_view_revision = v.revision)
        ORDER BY v.tree_id, v.revision
        LIMIT $2::int
     ), projections AS (
       DELETE FROM optchat.view_projections p USING doomed d WHERE p.tree_id = d.tree_id AND p.revision = d.revision
     )
     DELETE FROM optchat.view_revisions v USING doomed d WHERE v.tree_id = d.tree_id AND v.revision = d.revision`,
    [options.olderThanSeconds, options.batch ?? 10_000],
  );
  return result.rowCount ?? 0;
}
