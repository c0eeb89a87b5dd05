/**
 * The tree engine's reads of one tree (src/core/tree-engine.ts): the view's frontier with the sizes the fold needs,
 * and the inputs that may make a ready node free.
 */
import { createHash } from "node:crypto";
import { payloadAsText } from "../core/payload.js";
import { type LeafSourceRecord, leafSourceText, NODE_BYTES } from "../core/summary.js";
import { childrenOf, type NodeAddress, nodeKey, parentOf } from "../core/tree.js";
import type { FreeInputs } from "../core/tree-engine.js";
import type { Queryable } from "./db.js";
import { findNodes, type NewNode } from "./nodes.js";
import { readRecordWithPayload } from "./records.js";
import type { Tree } from "./trees.js";
import { partsInOrder } from "./view-revisions.js";

/** What a free leaf is built from. */
export interface LeafSource {
  readonly record: LeafSourceRecord & { readonly payloadHash: Buffer };
  /** null: larger than a free leaf can be (not transferred). */
  readonly payload: Buffer | null;
}

/**
 * The latest revision's parts in order, with the size of each and, for each left sibling, of its parent (the pairs
 * the fold may merge first) put into `known`, in one statement.
 */
export async function loadFrontier(
  db: Queryable,
  treeId: number,
  known: Map<number, number | undefined>,
): Promise<NodeAddress[]> {
  const result = await db.query<{ level: number; idx: string; bytes: number | null; parent_bytes: number | null }>(
    `SELECT p.level, p.idx,
            (SELECT n.byte_length FROM optchat.nodes n WHERE n.tree_id = p.tree_id AND n.level = p.level AND n.idx = p.idx
              ORDER BY n.revision DESC LIMIT 1) AS bytes,
            CASE WHEN p.idx % 2 = 0 THEN
              (SELECT n.byte_length FROM optchat.nodes n
                WHERE n.tree_id = p.tree_id AND n.level = p.level + 1 AND n.idx = p.idx / 2
                ORDER BY n.revision DESC LIMIT 1) END AS parent_bytes
       FROM optchat.view_parts p WHERE p.tree_id = $1::bigint AND p.until_revision IS NULL`,
    [treeId],
  );
  const parts = partsInOrder(
    result.rows.map((row) => row.level),
    result.rows.map((row) => row.idx),
  );
  for (const row of result.rows) {
    const part = { level: row.level, index: Number(row.idx) };
    if (!known.has(nodeKey(part))) known.set(nodeKey(part), row.bytes ?? undefined);
    if (part.index % 2 === 0) {
      const parent = parentOf(part);
      if (!known.has(nodeKey(parent))) known.set(nodeKey(parent), row.parent_bytes ?? undefined);
    }
  }
  return parts;
}

/**
 * What may make a ready node free (src/core/tree-engine.ts decides): a session leaf's record and its text, or a
 * parent's two children. Shared leaves are built by their publication, never here.
 */
export async function freeInputs(
  db: Queryable,
  tree: Tree,
  node: NodeAddress,
  leafSource: ((index: number) => LeafSource | undefined) | undefined,
): Promise<FreeInputs<Buffer> | undefined> {
  if (node.level === 0) {
    if (tree.kind !== "session" || tree.sessionId === null || tree.generation === null) return undefined;
    // A free leaf's line is at most NODE_BYTES, and its text has at least the payload's bytes less 3 (a dropped BOM;
    // invalid bytes and NUL only grow when rendered): a larger payload is never free, and is not read here, inside the
    // ingest transaction (a 64 MiB record was read back whole just to learn that).
    const found =
      leafSource?.(node.index) ??
      (await readRecordWithPayload(db, tree.sessionId, tree.generation, node.index, NODE_BYTES + 3));
    if (!found?.payload) return undefined;
    const text = leafSourceText(found.record, payloadAsText(found.payload));
    return { type: "leaf", kind: found.record.kind, text, hashes: () => [found.record.payloadHash] };
  }
  const [left, right] = childrenOf(node);
  const children = await findNodes(db, tree.treeId, [left, right]);
  const a = children.get(nodeKey(left));
  const b = children.get(nodeKey(right));
  if (!a || !b) return undefined;
  return { type: "parent", left: a.text, right: b.text, hashes: () => [sha256(a.text), sha256(b.text)] };
}

export function freeNode(node: NodeAddress, text: string, inputHashes: Buffer[]): NewNode {
  return {
    level: node.level,
    index: node.index,
    text,
    inputHashes,
    summarizer: "free",
    promptVersion: null,
    attempts: 0,
    overshoot: false,
    jobId: null,
    jobAttempt: null,
    chunks: [],
  };
}

function sha256(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}
