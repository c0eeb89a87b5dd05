import { type FoldParams, foldParamsFor, type NodeBytes } from "../core/fold.js";
import { type NodeAddress, nodeKey } from "../core/tree.js";
import { candidateParents, wantedParents } from "../core/wanted.js";
import type { Queryable } from "./db.js";
import { findNodeSizes } from "./nodes.js";
import { loadFrontier } from "./tree-reads.js";
import { TREE_COLUMNS, type TreeRow, toTree } from "./trees.js";

/**
 * The merges each tree's view wants now (src/core/wanted.ts), for the worker's start-up sweep: with merges on demand a
 * ready parent is not work until its view wants it, so the sweep asks the views (only those at or near their budget)
 * rather than scheduling every ready parent. Read without locks: a job for a parent no longer wanted is harmless.
 */
export async function findWantedParents(
  db: Queryable,
  params: FoldParams,
  limit: number,
): Promise<{ treeId: number; node: NodeAddress }[]> {
  const trees = await db.query<TreeRow>(
    `SELECT ${TREE_COLUMNS} FROM optchat.trees
      WHERE view_shrinking OR view_bytes + $1::int > CASE WHEN kind = 'shared' THEN $2::int ELSE $3::int END
      LIMIT $4::int`,
    [4096, foldParamsFor("shared", params).upperBytes, params.upperBytes, limit],
  );
  const out: { treeId: number; node: NodeAddress }[] = [];
  for (const row of trees.rows) {
    const tree = toTree(row);
    const known = new Map<number, number | undefined>();
    const parts = await loadFrontier(db, tree.treeId, known);
    const bytesOf: NodeBytes = (node) => known.get(nodeKey(node));
    const unknown = candidateParents(parts, bytesOf).filter((p) => !known.has(nodeKey(p)));
    const found = await findNodeSizes(db, tree.treeId, unknown);
    for (const parent of unknown) known.set(nodeKey(parent), found.get(nodeKey(parent)));
    const state = { parts, leafCount: tree.leafCount, shrinking: tree.viewShrinking };
    for (const node of wantedParents(state, bytesOf, foldParamsFor(tree.kind, params)))
      out.push({ treeId: tree.treeId, node });
  }
  return out;
}
