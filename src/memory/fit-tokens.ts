import { estimateTokens, type MemoryLine, type RenderedBlock } from "../core/context.js";
import { type NodeBytes, partBytes, project } from "../core/fold.js";
import { type NodeAddress, nodeKey } from "../core/tree.js";
import type { Pool } from "../store/db.js";
import { findNodes, type RevisionsAt } from "../store/nodes.js";
import type { PinnedNodeCache } from "./pinned-nodes.js";

/** The lines of one tree's view an assembly renders: its parts, and how their nodes are read and named. */
export interface TreeLines {
  readonly treeId: number;
  readonly parts: readonly NodeAddress[];
  readonly leafCount: number;
  /** Which revisions the parts resolve to: a pinned view's event, or the turn's revision epoch (the newest: neither). */
  readonly at: RevisionsAt | undefined;
  /** The view revision the lines are from, when pinned (the process-wide cache is keyed by it). */
  readonly revision?: number;
  readonly name: (node: NodeAddress) => string;
  readonly cache: Map<number, { bytes: number; text: string } | undefined>;
  /** For trees read at a pinned event: the process-wide cache of immutable node texts. */
  readonly pinned?: PinnedNodeCache;
}

/**
 * The largest cover of `lines.parts` (the parts themselves, or a coarser projection) whose rendering fits `tokens`,
 * or the smallest cover and the fact that it does not fit. Projections work in bytes; tokens are estimated on the
 * rendered text and the byte budget tightened until the estimate fits.
 */
export async function fitTokens(
  pool: Pool,
  lines: TreeLines,
  tokens: number,
  render: (lines: readonly MemoryLine[]) => RenderedBlock,
): Promise<{
  text: string;
  pieces: readonly string[];
  tokens: number;
  lines: number;
  fits: boolean;
  /** The cover rendered last (the parts, or a projection), and the byte budget it was projected to. */
  parts: readonly NodeAddress[];
  byteBudget: number;
}> {
  // Node texts are shared by every fitting of the same tree in one assembly (the full-size measure, then the fit):
  // they never change for a pinned revision, so the view is read once, not once per fitting.
  const known = lines.cache;
  const load = async (addresses: readonly NodeAddress[]) => {
    const missing = addresses.filter((a) => !known.has(nodeKey(a)));
    if (missing.length === 0) return;
    const at = lines.at;
    if (at && "atEvent" in at && lines.revision !== undefined && lines.pinned) {
      for (const [key, value] of await lines.pinned.load(pool, lines.treeId, lines.revision, at.atEvent, missing))
        known.set(key, value);
      return;
    }
    const found = await findNodes(pool, lines.treeId, missing, at);
    for (const a of missing) {
      const node = found.get(nodeKey(a));
      known.set(nodeKey(a), node ? { bytes: node.byteLength, text: node.text } : undefined);
    }
  };
  await load(lines.parts);
  // Parts not summarized yet are left out (partial mode says so in the block's note); no placeholder reaches a model.
  const renderParts = (parts: readonly NodeAddress[]) => {
    const built = parts.flatMap((part) => {
      const node = known.get(nodeKey(part));
      return node ? [{ ref: lines.name(part), text: node.text }] : [];
    });
    const { text, pieces } = render(built);
    // Opening and closing pieces aside, one piece per line shown (the session block may leave some out).
    return { text, pieces, tokens: estimateTokens(text), lines: pieces.length - 2 };
  };
  const full = renderParts(lines.parts);
  if (full.tokens <= tokens) return { ...full, fits: true, parts: lines.parts, byteBudget: Number.POSITIVE_INFINITY };
  const bytesOf: NodeBytes = (node) => known.get(nodeKey(node))?.bytes;
  // The projection asks for ancestors' sizes as it goes; unknown ones are loaded and the projection re-run.
  const asks: NodeAddress[] = [];
  const asking: NodeBytes = (node) => {
    if (!known.has(nodeKey(node))) {
      asks.push(node);
      return undefined;
    }
    return bytesOf(node);
  };
  let byteBudget = Math.floor((viewBytesOf(lines.parts, bytesOf) * tokens) / Math.max(1, full.tokens));
  let last = full;
  let lastParts: readonly NodeAddress[] = lines.parts;
  for (let round = 0; round < 8; round++) {
    let projection = project(lines.parts, lines.leafCount, asking, byteBudget);
    while (asks.length > 0) {
      await load(asks.splice(0));
      projection = project(lines.parts, lines.leafCount, asking, byteBudget);
    }
    last = renderParts(projection.parts);
    lastParts = projection.parts;
    if (last.tokens <= tokens) return { ...last, fits: true, parts: lastParts, byteBudget };
    if (!projection.fits) break; // even the smallest cover is too big
    byteBudget = Math.floor((byteBudget * tokens) / last.tokens) - 1;
    if (byteBudget <= 0) break;
  }
  return { ...last, fits: false, parts: lastParts, byteBudget: Math.max(1024, byteBudget) };
}

function viewBytesOf(parts: readonly NodeAddress[], bytesOf: NodeBytes): number {
  return parts.reduce((sum, part) => sum + partBytes(part, bytesOf), 0);
}
