import { dyadicCover, endOf, type NodeAddress, pow2, startOf } from "./tree.js";

/**
 * The view fold (seed 002 §5.2, seed 000 §6). A view is an ordered list of parts (tree nodes) tiling [0, leafCount).
 * New leaves append; while the view is over budget, the adjacent aligned sibling pair with the highest
 * due = (T − start) / 2^(level+2) is replaced by its parent, ties to the earlier start, only if the parent is built and
 * replacing the pair reduces bytes. Parts are never split. With thresholds upper H and lower L (L <= H): crossing H
 * starts shrinking, which continues (also across later events) until the size is at most L.
 */
export interface FoldParams {
  readonly upperBytes: number;
  readonly lowerBytes: number;
  /**
   * The shared tree's own thresholds (OPTCHAT_SHARED_VIEW_BYTES, _LOWER_BYTES): its view goes into every request of
   * every session of the scope, a session's view only into that session's. Absent: the shared tree folds like a
   * session's.
   */
  readonly shared?: { readonly upperBytes: number; readonly lowerBytes: number };
  /**
   * Which parents that need the model are built (OPTCHAT_COMPACTOR_MERGES): `needed` (absent: the default) only those
   * the fold is about to merge (src/core/wanted.ts), `all` every one as soon as its children exist.
   */
  readonly merges?: "needed" | "all";
}

/** The thresholds a tree of `kind` folds with (each revision records the ones it used: the audit refolds with them). */
export function foldParamsFor(kind: "session" | "shared", params: FoldParams): FoldParams {
  const chosen = kind === "shared" && params.shared ? params.shared : params;
  return {
    upperBytes: chosen.upperBytes,
    lowerBytes: chosen.lowerBytes,
    ...(params.merges ? { merges: params.merges } : {}),
  };
}

export interface FoldState {
  readonly parts: readonly NodeAddress[];
  readonly leafCount: number;
  readonly shrinking: boolean;
}

/** Byte size of a built node's text; undefined when the node is not built. */
export type NodeBytes = (node: NodeAddress) => number | undefined;

/** What an unbuilt leaf shows for display only (seed 002 §6); its bytes count toward the size. */
export const PLACEHOLDER_TEXT = "(not summarized yet: zoom it)";
export const PLACEHOLDER_BYTES = PLACEHOLDER_TEXT.length;

export const EMPTY_FOLD: FoldState = Object.freeze({ parts: Object.freeze([]), leafCount: 0, shrinking: false });

export type FoldEvent =
  | { readonly type: "append"; readonly index: number }
  | { readonly type: "built"; readonly node: NodeAddress };

/**
 * Bytes of a part as the model reads it: the line `start+count|text` and its newline (seed 000 §6: a merge must reduce
 * actual rendered bytes). Counting the text alone would forbid every free parent (two children joined by a newline are
 * one byte longer than the two texts) and stall the fold under any budget, although the merged line is shorter to read
 * by one prefix.
 */
export function partBytes(node: NodeAddress, bytesOf: NodeBytes): number {
  return (bytesOf(node) ?? PLACEHOLDER_BYTES) + lineOverheadBytes(node);
}

/** `start+count|` and the trailing newline (digits counted arithmetically: this runs for every part on every event). */
export function lineOverheadBytes(node: NodeAddress): number {
  return decimalDigits(startOf(node)) + decimalDigits(pow2(node.level)) + 3;
}

function decimalDigits(n: number): number {
  let digits = 1;
  for (let rest = n; rest >= 10; rest = Math.floor(rest / 10)) digits += 1;
  return digits;
}

export function viewBytes(parts: readonly NodeAddress[], bytesOf: NodeBytes): number {
  let total = 0;
  for (const part of parts) total += partBytes(part, bytesOf);
  return total;
}

/** Higher is more due. Exact in floating point: a division by a power of two. */
export function dueOf(node: NodeAddress, leafCount: number): number {
  return (leafCount - startOf(node)) / pow2(node.level + 2);
}

function isSiblingPair(a: NodeAddress, b: NodeAddress): boolean {
  return a.level === b.level && a.index % 2 === 0 && b.index === a.index + 1;
}

/**
 * Index k of the pair (parts[k], parts[k+1]) to merge next, or -1. `requireReduction`: the view fold only merges when
 * the parent is smaller than the pair; a projection may merge any pair whose parent exists.
 */
export function mostDuePair(
  parts: readonly NodeAddress[],
  leafCount: number,
  bytesOf: NodeBytes,
  requireReduction: boolean,
): number {
  return mostDuePairSized(
    parts,
    parts.map((part) => partBytes(part, bytesOf)),
    leafCount,
    bytesOf,
    requireReduction,
  );
}

/** mostDuePair with the parts' rendered sizes already measured (`sizes[k]` is the size of `parts[k]`). */
function mostDuePairSized(
  parts: readonly NodeAddress[],
  sizes: readonly number[],
  leafCount: number,
  bytesOf: NodeBytes,
  requireReduction: boolean,
): number {
  let best = -1;
  let bestDue = Number.NEGATIVE_INFINITY;
  for (let k = 0; k + 1 < parts.length; k++) {
    const a = parts[k] as NodeAddress;
    const b = parts[k + 1] as NodeAddress;
    if (!isSiblingPair(a, b)) continue;
    const due = dueOf(a, leafCount);
    // Strictly greater: on a tie the earlier start (found first) wins. Checked first: it is the cheap test.
    if (due <= bestDue) continue;
    const parent = { level: a.level + 1, index: a.index / 2 };
    if (bytesOf(parent) === undefined) continue;
    if (requireReduction && partBytes(parent, bytesOf) >= (sizes[k] as number) + (sizes[k + 1] as number)) continue;
    best = k;
    bestDue = due;
  }
  return best;
}

function mergeAt(parts: NodeAddress[], k: number): NodeAddress {
  const a = parts[k] as NodeAddress;
  const parent = { level: a.level + 1, index: a.index / 2 };
  parts.splice(k, 2, parent);
  return parent;
}

export interface FitResult {
  readonly state: FoldState;
  readonly merged: readonly NodeAddress[];
  readonly bytes: number;
}

/** Applies one event, then fits. The state is not mutated. */
export function applyFoldEvent(state: FoldState, event: FoldEvent, bytesOf: NodeBytes, params: FoldParams): FitResult {
  let parts = state.parts as NodeAddress[];
  let leafCount = state.leafCount;
  if (event.type === "append") {
    if (event.index !== state.leafCount) {
      throw new RangeError(`fold: leaf ${event.index} appended to a view of ${state.leafCount} leaves`);
    }
    parts = [...parts, { level: 0, index: event.index }];
    leafCount += 1;
  }
  return fitView({ parts, leafCount, shrinking: state.shrinking }, bytesOf, params);
}

/** What a writer knows of the latest fold state without its parts: how many leaves, its size, its mode. */
export interface FoldSummary {
  readonly leafCount: number;
  /** viewBytes of the parts with the node sizes the fold saw (every size change is a `built` event, which refits). */
  readonly bytes: number;
  readonly shrinking: boolean;
}

/**
 * The result of appending leaf `index` (not built yet) when it can be decided without the parts or any node size, or
 * undefined when the full fold is needed. Equal to `applyFoldEvent` in both cases it answers:
 * - not shrinking, and the new size stays within the upper threshold: fitView merges nothing;
 * - shrinking: a fit ends in shrinking mode only when it found no pair to merge (its loop otherwise runs until the
 *   size is at most the lower threshold, which ends the mode). Whether a pair can merge depends on its parent being
 *   built and on sizes, not on the leaf count, so appending leaves every old pair as it was; the one new pair (the new
 *   leaf and its left sibling) needs a parent over a leaf that is not built, and a parent is built only after both its
 *   children (seed 002 §4.1). So nothing merges, and the mode ends only if the size is at most the lower threshold.
 * This is what lets an ingest append a leaf without reading the view's parts (issue 9 item 6).
 */
export function appendWithoutFit(summary: FoldSummary, index: number, params: FoldParams): FoldSummary | undefined {
  if (index !== summary.leafCount) {
    throw new RangeError(`fold: leaf ${index} appended to a view of ${summary.leafCount} leaves`);
  }
  const bytes = summary.bytes + partBytes({ level: 0, index }, () => undefined);
  const leafCount = summary.leafCount + 1;
  if (!summary.shrinking) return bytes <= params.upperBytes ? { leafCount, bytes, shrinking: false } : undefined;
  return { leafCount, bytes, shrinking: bytes > params.lowerBytes };
}

export function fitView(state: FoldState, bytesOf: NodeBytes, params: FoldParams): FitResult {
  // Each part's rendered size is measured once per fit; merges update the array alongside the parts.
  let parts: NodeAddress[] | undefined;
  let sizes = state.parts.map((part) => partBytes(part, bytesOf));
  let size = 0;
  for (const bytes of sizes) size += bytes;
  let shrinking = state.shrinking || size > params.upperBytes;
  const merged: NodeAddress[] = [];
  while (shrinking && size > params.lowerBytes) {
    const current = parts ?? state.parts;
    const k = mostDuePairSized(current, sizes, state.leafCount, bytesOf, true);
    if (k < 0) break; // wait for a parent to be built; stay in shrinking mode
    if (!parts) {
      parts = [...state.parts];
      sizes = [...sizes];
    }
    const before = (sizes[k] as number) + (sizes[k + 1] as number);
    const parent = mergeAt(parts, k);
    const after = partBytes(parent, bytesOf);
    sizes.splice(k, 2, after);
    size += after - before;
    merged.push(parent);
  }
  if (size <= params.lowerBytes) shrinking = false;
  const finalParts = parts ?? state.parts;
  return { state: { parts: finalParts, leafCount: state.leafCount, shrinking }, merged, bytes: size };
}

/** Checks that parts tile [0, leafCount) in order with aligned dyadic nodes; returns a problem or undefined. */
export function tilingProblem(parts: readonly NodeAddress[], leafCount: number): string | undefined {
  let at = 0;
  for (const [k, part] of parts.entries()) {
    if (!Number.isInteger(part.level) || part.level < 0 || !Number.isInteger(part.index) || part.index < 0) {
      return `part ${k} is not a node address`;
    }
    if (startOf(part) !== at) return `part ${k} starts at ${startOf(part)}, expected ${at}`;
    at = endOf(part);
  }
  return at === leafCount ? undefined : `parts end at ${at}, expected ${leafCount}`;
}

export type Projection =
  | { readonly fits: true; readonly parts: readonly NodeAddress[]; readonly bytes: number }
  | { readonly fits: false; readonly minimalBytes: number; readonly parts: readonly NodeAddress[] };

/**
 * A temporary coarser cover of `parts` within `budget` bytes, built only from existing (built) ancestors; the canonical
 * view is untouched. First the fold's own order (most due first) is tried, which keeps recent detail; if that cannot
 * reach the budget, the cover with the fewest bytes (exact, by dynamic programming over the built ancestors) is used.
 * When even that does not fit, the answer says so and gives its size: the minimum any cover can reach.
 */
export function project(
  parts: readonly NodeAddress[],
  leafCount: number,
  bytesOf: NodeBytes,
  budget: number,
): Projection {
  let size = viewBytes(parts, bytesOf);
  if (size <= budget) return { fits: true, parts, bytes: size };
  const greedy = [...parts];
  while (size > budget) {
    const k = mostDuePair(greedy, leafCount, bytesOf, true);
    if (k < 0) break;
    const before = partBytes(greedy[k] as NodeAddress, bytesOf) + partBytes(greedy[k + 1] as NodeAddress, bytesOf);
    const parent = mergeAt(greedy, k);
    size += partBytes(parent, bytesOf) - before;
  }
  if (size <= budget) return { fits: true, parts: greedy, bytes: size };
  const minimal = minimalCover(parts, bytesOf);
  if (minimal.bytes <= budget) return { fits: true, parts: minimal.parts, bytes: minimal.bytes };
  return { fits: false, minimalBytes: minimal.bytes, parts: minimal.parts };
}

/**
 * The cover of the same range with the fewest bytes among covers made of `parts` and their built ancestors. Each part
 * lies inside one block of the binary decomposition of the range, so blocks are solved independently:
 * best(node) = min(bytes(node) if built, best(left) + best(right)), bottoming out at the parts themselves.
 */
export function minimalCover(
  parts: readonly NodeAddress[],
  bytesOf: NodeBytes,
): { parts: NodeAddress[]; bytes: number } {
  const out: NodeAddress[] = [];
  let total = 0;
  let k = 0;
  // Walk the parts, grouping them under the largest aligned block that starts at the group's first part and stays
  // inside the parts' range; solve each block recursively.
  const end = parts.length > 0 ? endOf(parts[parts.length - 1] as NodeAddress) : 0;
  while (k < parts.length) {
    const first = parts[k] as NodeAddress;
    let level = first.level;
    const start = startOf(first);
    while (start % pow2(level + 1) === 0 && start + pow2(level + 1) <= end) level += 1;
    const block = { level, index: start / pow2(level) };
    const blockEnd = endOf(block);
    let j = k;
    while (j < parts.length && endOf(parts[j] as NodeAddress) <= blockEnd) j += 1;
    const solved = solveBlock(block, parts.slice(k, j), bytesOf);
    out.push(...solved.parts);
    total += solved.bytes;
    k = j;
  }
  return { parts: out, bytes: total };
}

function solveBlock(
  block: NodeAddress,
  parts: readonly NodeAddress[],
  bytesOf: NodeBytes,
): { parts: NodeAddress[]; bytes: number } {
  const only = parts[0] as NodeAddress;
  if (parts.length === 1 && only.level === block.level && only.index === block.index) {
    return { parts: [only], bytes: partBytes(only, bytesOf) };
  }
  const mid = startOf(block) + pow2(block.level - 1);
  const left = parts.filter((p) => startOf(p) < mid);
  const right = parts.filter((p) => startOf(p) >= mid);
  const a = solveBlock({ level: block.level - 1, index: block.index * 2 }, left, bytesOf);
  const b = solveBlock({ level: block.level - 1, index: block.index * 2 + 1 }, right, bytesOf);
  const split = { parts: [...a.parts, ...b.parts], bytes: a.bytes + b.bytes };
  const own = bytesOf(block) === undefined ? undefined : partBytes(block, bytesOf);
  return own !== undefined && own < split.bytes ? { parts: [block], bytes: own } : split;
}

/**
 * The parts of a view that cover only [0, boundary): parts before the boundary as they are, and a part that straddles
 * it replaced by the dyadic cover of its part before the boundary (its descendants, which exist because it does).
 * Used for a turn's own history, which must stop before the turn's own records (seed 000 §7); the canonical view is
 * not changed.
 */
export function restrictToPrefix(parts: readonly NodeAddress[], boundary: number): NodeAddress[] {
  const out: NodeAddress[] = [];
  for (const part of parts) {
    if (endOf(part) <= boundary) out.push(part);
    else if (startOf(part) < boundary) out.push(...dyadicCover(startOf(part), boundary));
  }
  return out;
}
