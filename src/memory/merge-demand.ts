import { enqueueNodeJobs, producerJobs } from "../compactor/queue.js";
import type { NodeBytes } from "../core/fold.js";
import { type NodeAddress, nodeKey } from "../core/tree.js";
import { candidateParents, wantedParents } from "../core/wanted.js";
import { type Pool, withTransaction } from "../store/db.js";
import { findNodeSizes } from "../store/nodes.js";
import type { TreeLines } from "./fit-tokens.js";

/** How often a demand looks for the merges it asked for. */
const POLL_MS = 100;

/**
 * Merges on demand for a request (issue 39, docs/compactor.md "Merges on demand"): the compactor builds a merge only
 * when a view's fold needs it, so a window too small for the view may find no coarser cover built. This asks for the
 * merges a cover of `targetBytes` needs next (the fold's own choice, src/core/wanted.ts, from the cover tried last),
 * waits for the compactor to build them until `deadline` (ms since the epoch), and drops them from the fitting's
 * cache so the next fit reads them. False when nothing more can be asked (every pair is merged already: the smallest
 * cover is what it is) or nothing arrived in time. Only for lines read as they are now (the own view, at the turn's
 * revision epoch): a view pinned at a tree event would not show a node built after it.
 */
export async function demandMerges(
  pool: Pool,
  lines: TreeLines,
  parts: readonly NodeAddress[],
  targetBytes: number,
  deadline: number,
): Promise<boolean> {
  if (lines.at && "atEvent" in lines.at) return false;
  const sizes = new Map<number, number | undefined>();
  for (const part of parts) sizes.set(nodeKey(part), lines.cache.get(nodeKey(part))?.bytes);
  const bytesOf: NodeBytes = (node) => sizes.get(nodeKey(node));
  const candidates = candidateParents(parts, bytesOf);
  const found = await findNodeSizes(pool, lines.treeId, candidates);
  for (const parent of candidates) sizes.set(nodeKey(parent), found.get(nodeKey(parent)));
  const state = { parts, leafCount: lines.leafCount, shrinking: true };
  // A request waits for these: only what its cover needs, not a batch ahead.
  const wanted = wantedParents(state, bytesOf, { upperBytes: targetBytes, lowerBytes: targetBytes, batchBytes: 0 });
  // Parents built since the cover was read (by the compactor, or by an earlier demand) count as arrived.
  const built = candidates.filter((parent) => sizes.get(nodeKey(parent)) !== undefined);
  if (wanted.length === 0 && built.length === 0) return false;
  if (wanted.length > 0) await withTransaction(pool, (tx) => enqueueNodeJobs(producerJobs, tx, lines.treeId, wanted));
  for (;;) {
    const now = await findNodeSizes(pool, lines.treeId, wanted);
    if (wanted.every((parent) => now.get(nodeKey(parent)) !== undefined)) break;
    if (Date.now() + POLL_MS > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
  for (const parent of [...wanted, ...built]) lines.cache.delete(nodeKey(parent));
  return true;
}
