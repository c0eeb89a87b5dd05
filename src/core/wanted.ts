/**
 * Merges built on demand (issue 39, DESIGN §5 "The whole bill"): a parent that needs the model is built only when the
 * view's fold is about to merge its two children, not as soon as they exist. Before a view reaches its budget no
 * merge is needed at all; once it does, about one merge per appended leaf, and the merges a fit needs are known at
 * once, so they are summarized together (src/compactor/batch.ts). Free parents cost nothing and are still built as
 * soon as they are ready. Pure.
 */
import { dueOf, type FoldParams, type FoldState, lineOverheadBytes, type NodeBytes, partBytes } from "./fold.js";
import { NODE_BYTES } from "./summary.js";
import { type NodeAddress, parentOf, startOf } from "./tree.js";

/** At most this many parents are wanted at once (one batch of merges). */
export const MAX_WANTED = 16;

/**
 * Room kept below the upper threshold: parents are wanted once the view is within this many bytes of it, so the next
 * few appends find their merges built (a merge is one model call away, and the view waits over budget meanwhile).
 */
export const WANT_HEADROOM_BYTES = 4 * (NODE_BYTES + 16);

/** The pairs of the view the fold could merge (adjacent aligned siblings, both built): their parents. */
export function candidateParents(parts: readonly NodeAddress[], bytesOf: NodeBytes): NodeAddress[] {
  const out: NodeAddress[] = [];
  for (let k = 0; k + 1 < parts.length; k++) {
    const a = parts[k] as NodeAddress;
    const b = parts[k + 1] as NodeAddress;
    if (a.level !== b.level || a.index % 2 !== 0 || b.index !== a.index + 1) continue;
    if (bytesOf(a) === undefined || bytesOf(b) === undefined) continue;
    out.push(parentOf(a));
  }
  return out;
}

/**
 * The unbuilt parents the view needs next, most due first (the fold's own order), enough that merging them would bring
 * the view (plus the headroom) down to its lower threshold when each merged line is as long as a line may be, at most
 * MAX_WANTED. Empty while the view is under its upper threshold by more than the headroom. `bytesOf` must know the
 * size (or absence) of every candidate's parent.
 */
export function wantedParents(
  state: FoldState,
  bytesOf: NodeBytes,
  params: Pick<FoldParams, "upperBytes" | "lowerBytes">,
): NodeAddress[] {
  let size = 0;
  for (const part of state.parts) size += partBytes(part, bytesOf);
  const headroom = Math.min(WANT_HEADROOM_BYTES, Math.floor(params.upperBytes / 4));
  if (!state.shrinking && size + headroom <= params.upperBytes) return [];
  const excess = size + headroom - Math.min(params.lowerBytes, params.upperBytes);
  const candidates = candidateParents(state.parts, bytesOf)
    .filter((parent) => bytesOf(parent) === undefined)
    .map((parent) => {
      const left = { level: parent.level - 1, index: parent.index * 2 };
      const right = { level: left.level, index: left.index + 1 };
      const leftText = bytesOf(left) as number;
      const rightText = bytesOf(right) as number;
      // A pair that fits one line joins for free; else the model's line is at most NODE_BYTES.
      const merged = Math.min(NODE_BYTES, leftText + 1 + rightText);
      const saving = partBytes(left, bytesOf) + partBytes(right, bytesOf) - merged - lineOverheadBytes(parent);
      return { parent, saving, due: dueOf(left, state.leafCount) };
    })
    .filter((c) => c.saving > 0)
    .sort((x, y) => y.due - x.due || startOf(x.parent) - startOf(y.parent));
  const wanted: NodeAddress[] = [];
  let saved = 0;
  for (const c of candidates) {
    if (saved >= excess || wanted.length >= MAX_WANTED) break;
    wanted.push(c.parent);
    saved += c.saving;
  }
  return wanted;
}
