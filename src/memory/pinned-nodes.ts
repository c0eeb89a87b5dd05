import { type NodeAddress, nodeKey } from "../core/tree.js";
import type { Pool } from "../store/db.js";
import { findNodes } from "../store/nodes.js";

/**
 * Texts of nodes as a view revision pinned at a tree event sees them. Immutable (a rebuild is a new revision with a
 * later event), so they can be kept for the life of the process; the transform runs on every model step, and without
 * this each step would read the whole shared view again. Bounded: past `limit` entries the cache starts over.
 *
 * Keyed by the view revision, not only the event: a deletion (src/memory/forget.ts) replaces a retired leaf's text
 * in place and renumbers the tree's later events, so an event number can come back with other texts; view revision
 * numbers never come back (the deletion's base revision continues the tree's numbering), so a revision read after
 * the deletion never meets a text cached before it, in this process or any other.
 */
export class PinnedNodeCache {
  private readonly entries = new Map<string, { bytes: number; text: string } | undefined>();
  constructor(private readonly limit = 50_000) {}

  async load(
    pool: Pool,
    treeId: number,
    revision: number,
    atEvent: number,
    addresses: readonly NodeAddress[],
  ): Promise<Map<number, { bytes: number; text: string } | undefined>> {
    const out = new Map<number, { bytes: number; text: string } | undefined>();
    const missing: NodeAddress[] = [];
    for (const a of addresses) {
      const key = `${treeId}:${revision}:${atEvent}:${nodeKey(a)}`;
      if (this.entries.has(key)) out.set(nodeKey(a), this.entries.get(key));
      else missing.push(a);
    }
    if (missing.length > 0) {
      const found = await findNodes(pool, treeId, missing, { atEvent });
      if (this.entries.size + missing.length > this.limit) this.entries.clear();
      for (const a of missing) {
        const node = found.get(nodeKey(a));
        const value = node ? { bytes: node.byteLength, text: node.text } : undefined;
        // Absent nodes are not cached: a node committed later at an earlier event number cannot exist, but keeping
        // the cache to built nodes is simpler to reason about.
        if (value) this.entries.set(`${treeId}:${revision}:${atEvent}:${nodeKey(a)}`, value);
        out.set(nodeKey(a), value);
      }
    }
    return out;
  }
}
