/**
 * A tree's lock and what a node job reads before it starts: every writer of a tree (store/tree-changes.ts) holds the
 * lock taken here.
 */
import type { NodeAddress } from "../core/tree.js";
import type { Queryable } from "./db.js";
import { TREE_COLUMNS, type Tree, type TreeRow, toTree } from "./trees.js";
import {
  PARTS_AT,
  partsInOrder,
  toViewRevision,
  VIEW_COLUMNS,
  type ViewRevision,
  type ViewRow,
} from "./view-revisions.js";

/** A tree locked for change in the caller's transaction. */
export interface LockedTree {
  readonly tree: Tree;
}

/**
 * Locks a tree's row (FOR UPDATE). Every writer of a tree (sealing leaves, committing nodes) goes through here, so
 * readiness decisions and folds see each other's commits.
 *
 * The fold state a writer continues from (counters, the latest revision's size and mode) is on the locked row itself:
 * under READ COMMITTED, a statement that waited for a row lock re-reads that row at its newest version, but anything
 * joined from another table in the same statement comes from the snapshot taken before the wait, i.e. the state the
 * previous lock holder just replaced (the refold audit caught exactly that once, with the revision in a join). The
 * parts, when a fold needs them, are read by a later statement (loadFrontier), after the lock is held.
 */
export async function lockTree(
  db: Queryable,
  where: { treeId: number } | { sessionId: string; generation: number },
): Promise<LockedTree | undefined> {
  const byId = "treeId" in where;
  const result = await db.query<TreeRow>({
    name: byId ? "optchat.trees.lock_by_id" : "optchat.trees.lock_session",
    text: `SELECT ${TREE_COLUMNS} FROM optchat.trees
      WHERE ${byId ? "tree_id = $1::bigint" : "kind = 'session' AND session_id = $1::text AND generation = $2::int"}
        FOR UPDATE`,
    values: byId ? [where.treeId] : [where.sessionId, where.generation],
  });
  const row = result.rows[0];
  return row ? { tree: toTree(row) } : undefined;
}

export interface NodeJobState extends LockedTree {
  readonly latest: ViewRevision | undefined;
  readonly built: boolean;
  readonly failing: boolean;
}

/** What a node job needs to know before it starts, in one round trip (no lock). */
export async function inspectNodeJob(
  db: Queryable,
  treeId: number,
  node: NodeAddress,
): Promise<NodeJobState | undefined> {
  const result = await db.query<Record<string, unknown>>(
    `SELECT ${TREE_COLUMNS.split(", ")
      .map((c) => `t.${c}`)
      .join(", ")},
            ${VIEW_COLUMNS.split(", ")
              .map((c) => `v.${c} AS v_${c}`)
              .join(", ")}, parts.levels AS v_levels, parts.idxs AS v_idxs,
            EXISTS (SELECT 1 FROM optchat.nodes n WHERE n.tree_id = t.tree_id AND n.level = $2::int AND n.idx = $3::bigint) AS built,
            EXISTS (SELECT 1 FROM optchat.node_failures f WHERE f.tree_id = t.tree_id AND f.level = $2::int AND f.idx = $3::bigint) AS failing
       FROM optchat.trees t
       LEFT JOIN LATERAL (SELECT * FROM optchat.view_revisions r WHERE r.tree_id = t.tree_id ORDER BY r.revision DESC LIMIT 1) v ON true
       LEFT JOIN LATERAL ${PARTS_AT("v.revision")} parts ON true
      WHERE t.tree_id = $1::bigint`,
    [treeId, node.level, node.index],
  );
  const row = result.rows[0];
  if (!row) return undefined;
  const view = Object.fromEntries(VIEW_COLUMNS.split(", ").map((c) => [c, row[`v_${c}`]])) as unknown as ViewRow;
  return {
    tree: toTree(row as unknown as TreeRow),
    latest:
      view.revision === null
        ? undefined
        : toViewRevision(view, partsInOrder(row.v_levels as number[] | null, row.v_idxs as string[] | null)),
    built: row.built as boolean,
    failing: row.failing as boolean,
  };
}
