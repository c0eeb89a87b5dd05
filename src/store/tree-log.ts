/** A tree's derived event log (appends and builds, in event order) and its node sizes: what the refold audit and a deletion's refold replay. */
import type { FoldEvent } from "../core/fold.js";
import type { Queryable } from "./db.js";

export interface TreeEventRow {
  readonly eventNo: number;
  readonly event: FoldEvent;
}

/**
 * A tree's fold events in order, derived (migration 005): event n is the build of the node row committed at n
 * (nodes.tree_event), and every other event number up to the tree's event count appends the next leaf, because leaves
 * are appended strictly in order. The audit checks that the appends come out to the tree's leaf count.
 */
export async function listTreeEvents(
  db: Queryable,
  treeId: number,
): Promise<{ events: TreeEventRow[]; problems: string[] }> {
  const [built, tree] = await Promise.all([
    db.query<{ tree_event: string; level: number; idx: string }>(
      "SELECT tree_event, level, idx FROM optchat.nodes WHERE tree_id = $1::bigint ORDER BY tree_event",
      [treeId],
    ),
    db.query<{ event_count: string; leaf_count: string }>(
      "SELECT event_count, leaf_count FROM optchat.trees WHERE tree_id = $1::bigint",
      [treeId],
    ),
  ]);
  const eventCount = Number(tree.rows[0]?.event_count ?? 0);
  const leafCount = Number(tree.rows[0]?.leaf_count ?? 0);
  const events: TreeEventRow[] = [];
  const problems: string[] = [];
  let nextLeaf = 0;
  let k = 0;
  for (let eventNo = 1; eventNo <= eventCount; eventNo++) {
    const node = built.rows[k];
    if (node && Number(node.tree_event) === eventNo) {
      events.push({ eventNo, event: { type: "built", node: { level: node.level, index: Number(node.idx) } } });
      k += 1;
      const twin = built.rows[k];
      if (twin && Number(twin.tree_event) === eventNo) problems.push(`two nodes are committed at event ${eventNo}`);
    } else {
      events.push({ eventNo, event: { type: "append", index: nextLeaf } });
      nextLeaf += 1;
    }
  }
  if (k < built.rows.length)
    problems.push(`${built.rows.length - k} node(s) committed at events beyond the tree's ${eventCount}`);
  if (nextLeaf !== leafCount) problems.push(`the events append ${nextLeaf} leaves, the tree counts ${leafCount}`);
  return { events, problems };
}

/** Byte sizes of every node of a tree with the event that committed each revision (for audits and refolds). */
export async function listNodeSizes(
  db: Queryable,
  treeId: number,
): Promise<{ level: number; index: number; revision: number; bytes: number; treeEvent: number }[]> {
  const result = await db.query<{
    level: number;
    idx: number;
    revision: number;
    byte_length: number;
    tree_event: number;
  }>(
    "SELECT level, idx, revision, byte_length, tree_event FROM optchat.nodes WHERE tree_id = $1::bigint ORDER BY tree_event",
    [treeId],
  );
  return result.rows.map((r) => ({
    level: r.level,
    index: r.idx,
    revision: r.revision,
    bytes: r.byte_length,
    treeEvent: r.tree_event,
  }));
}
