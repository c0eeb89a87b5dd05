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
 * Room kept below the upper threshold: parents are wanted once the view is within this many bytes of it (or built
 * parents not merged yet save less than that), so the next few appends find their merges built (a merge is one model
 * call away, and the view waits over budget meanwhile).
 */
export const WANT_HEADROOM_BYTES = 4 * (NODE_BYTES + 16);

/**
 * When parents are wanted, as many as would bring the view this far below its lower threshold (at most MAX_WANTED): a
 * view at its budget folds about one pair per appended line, and every compactor call re-reads the whole `<chat>`
 * context (tens of thousands of tokens in a long session), so merges are asked for a batch at a time, not one or two
 * per append (issue 36: in a turn of 1,000 tool calls, a call every step or two cost the compactor nearly as much as
 * the main model's own tokens).
 */
export const WANT_BATCH_BYTES = MAX_WANTED * (NODE_BYTES + 16);

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
 * The unbuilt parents the view needs next, most due first (the fold's own order), at most MAX_WANTED. Parents built but
 * not merged yet count first (the fold takes them as the view grows): nothing is wanted while they would bring the
 * view (plus the headroom) down to its lower threshold; else enough to bring it WANT_BATCH_BYTES below that, each
 * merged line counted as long as a line may be. Empty while the view is under its upper threshold by more than the
 * headroom. `bytesOf` must know the size (or absence) of every candidate's parent.
 */
export function wantedParents(
  state: FoldState,
  bytesOf: NodeBytes,
  params: Pick<FoldParams, "upperBytes" | "lowerBytes"> & {
    /** How far below the lower threshold a batch reaches (default WANT_BATCH_BYTES; 0: only what is needed now). */
    readonly batchBytes?: number;
  },
): NodeAddress[] {
  let size = 0;
  for (const part of state.parts) size += partBytes(part, bytesOf);
  const headroom = Math.min(WANT_HEADROOM_BYTES, Math.floor(params.upperBytes / 4));
  if (!state.shrinking && size + headroom <= params.upperBytes) return [];
  const lower = Math.min(params.lowerBytes, params.upperBytes);
  const excess = size + headroom - lower;
  let saved = 0;
  const unbuilt: { parent: NodeAddress; saving: number; due: number }[] = [];
  for (const parent of candidateParents(state.parts, bytesOf)) {
    const left = { level: parent.level - 1, index: parent.index * 2 };
    const right = { level: left.level, index: left.index + 1 };
    const built = bytesOf(parent);
    // A pair that fits one line joins for free; else the model's line is at most NODE_BYTES.
    const merged = built ?? Math.min(NODE_BYTES, (bytesOf(left) as number) + 1 + (bytesOf(right) as number));
    const saving = partBytes(left, bytesOf) + partBytes(right, bytesOf) - merged - lineOverheadBytes(parent);
    if (saving <= 0) continue;
    if (built !== undefined) saved += saving;
    else unbuilt.push({ parent, saving, due: dueOf(left, state.leafCount) });
  }
  if (saved >= excess) return [];
  const batch = excess + Math.min(params.batchBytes ?? WANT_BATCH_BYTES, Math.floor(params.upperBytes / 4));
  unbuilt.sort((x, y) => y.due - x.due || startOf(x.parent) - startOf(y.parent));
  const wanted: NodeAddress[] = [];
  for (const c of unbuilt) {
    if (saved >= batch || wanted.length >= MAX_WANTED) break;
    wanted.push(c.parent);
    saved += c.saving;
  }
  return wanted;
}
