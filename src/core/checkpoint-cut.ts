/**
 * Where an execution checkpoint cuts the live turn (seed 000 §7 "long active turn", issue 36). Pure: the turn is a list
 * of steps (one model step each: its calls and their results, a parallel batch included), and the checkpoint replaces
 * the first `cut` of them in the request.
 *
 * - A cut falls only between whole steps, so never inside a parallel batch; and never at or past a step that still
 *   waits for a result (an outstanding result is never replaced) or whose records are not stored yet (a checkpoint
 *   line must point at a record memory_zoom can open), nor past the latest step, whose results the model has not seen.
 * - The cut never moves back within a turn, and it moves in chunks: when the request outgrows its budget, the cut moves
 *   far enough that the steps kept verbatim drop to a low-water mark, so the next steps only append (the provider's
 *   cache keeps the request's prefix) until the budget is reached again.
 */

/**
 * Where a moved cut leaves the steps kept verbatim, as a share of the live budget. A move rewrites everything after the
 * request message into the provider's cache (the checkpoint and the steps it keeps, at 1.25× an input token), so what a
 * move keeps is paid again at every move: a lower mark rewrites less per move and moves less often (docs/checkpoints.md
 * has the measurements). It is a mark on the verbatim steps, not on the whole live part, so a checkpoint near its share
 * cannot leave the mark out of reach (the cut would then creep one step per request, rewriting at every step).
 */
export const LOW_WATER = 0.25;

/**
 * The checkpoint's share of the live budget before it folds coarser (checkpoint-lines.ts growCheckpoint's cap). Every
 * move rewrites the whole checkpoint; with LOW_WATER it leaves over half the budget for the steps to grow into.
 */
export const CHECKPOINT_SHARE = 0.2;

/** The checkpoint's cap in tokens for a live budget. */
export function checkpointCap(budget: number): number {
  return Math.floor(Math.max(0, budget) * CHECKPOINT_SHARE);
}

export interface CutStep {
  /** What the step costs verbatim in the request, in tokens. */
  readonly tokens: number;
  /** Every call of the step has its result (completed or failed). */
  readonly complete: boolean;
  /** The step's records are sealed, so a checkpoint line can point at them. */
  readonly stored: boolean;
}

export interface CutInput {
  readonly steps: readonly CutStep[];
  /** The cut of the turn's previous request (0: none yet). */
  readonly previousCut: number;
  /** Tokens for what depends on the cut: the checkpoint and the steps kept verbatim. */
  readonly budget: number;
  /** The checkpoint's tokens when it stands for the first `cut` steps (0 for cut 0); non-decreasing in `cut`. */
  readonly checkpointTokens: (cut: number) => number;
  /** Where a moved cut leaves the verbatim steps, as a share of the budget (default LOW_WATER). */
  readonly lowWater?: number;
  /** The latest step may be cut too (cutLimit). */
  readonly latestCuttable?: boolean;
}

export interface CutPlan {
  /** Steps the checkpoint stands for (the first `cut`). */
  readonly cut: number;
  /** The cut moved in this request. */
  readonly moved: boolean;
  /** The request's live part fits the budget (false: even the furthest allowed cut does not fit). */
  readonly fits: boolean;
  /** Tokens of the live part (checkpoint + verbatim steps) at `cut`. */
  readonly tokens: number;
}

/**
 * The furthest the cut may go: the first step that is incomplete or not stored ends it, and the latest step stays
 * verbatim (the model has not seen its results yet: they answer the calls it just made) unless `latestCuttable`: a
 * result too large for the live part's share, yet small enough for a request of its own, then shows as its line
 * (start, end, ref) rather than stop the turn. One too large for any request is never cut: the turn stops, saying so.
 */
export function cutLimit(steps: readonly CutStep[], latestCuttable = false): number {
  const blocked = steps.findIndex((step) => !step.complete || !step.stored);
  const limit = blocked < 0 ? steps.length : blocked;
  return latestCuttable ? limit : Math.max(0, Math.min(limit, steps.length - 1));
}

/** Tokens of the live part with the first `cut` steps checkpointed. */
export function liveTokens(input: Pick<CutInput, "steps" | "checkpointTokens">, cut: number): number {
  let verbatim = 0;
  for (let i = cut; i < input.steps.length; i++) verbatim += (input.steps[i] as CutStep).tokens;
  return input.checkpointTokens(cut) + verbatim;
}

/**
 * The cut of this request: the previous one while the live part fits the budget; else the smallest cut past it whose
 * verbatim steps are at most the low-water mark (or the limit, when the latest step alone is above it), if the live part
 * then fits the budget; else the smallest that fits the budget, within the limit; else the limit, not fitting.
 */
export function planCut(input: CutInput): CutPlan {
  const verbatimLimit = cutLimit(input.steps);
  const previous = Math.min(Math.max(0, input.previousCut), input.steps.length);
  const at = (cut: number) => liveTokens(input, cut);
  const kept = at(previous);
  if (kept <= input.budget) return { cut: previous, moved: false, fits: true, tokens: kept };
  const lowWater = Math.floor(input.budget * Math.min(1, Math.max(0, input.lowWater ?? LOW_WATER)));
  // Verbatim tokens from each cut to the end (suffix sums).
  const verbatim = new Array<number>(input.steps.length + 1).fill(0);
  for (let i = input.steps.length - 1; i >= 0; i--) verbatim[i] = (verbatim[i + 1] as number) + stepTokens(input, i);
  // The latest step is cut only when no cut that keeps it verbatim fits.
  const limits = input.latestCuttable ? [verbatimLimit, cutLimit(input.steps, true)] : [verbatimLimit];
  for (const limit of limits) {
    if (limit <= previous) continue;
    let cut = previous + 1;
    while (cut < limit && (verbatim[cut] as number) > lowWater) cut += 1;
    if (at(cut) <= input.budget) return { cut, moved: true, fits: true, tokens: at(cut) };
    // The checkpoint there is too large for the budget (a fold's bump): the smallest cut that fits, if any.
    const fitting = firstCutWithin(at, previous + 1, limit, input.budget);
    if (fitting !== undefined) return { cut: fitting, moved: true, fits: true, tokens: at(fitting) };
  }
  const limit = Math.max(previous, verbatimLimit);
  return { cut: limit, moved: limit !== previous, fits: false, tokens: at(limit) };
}

function stepTokens(input: Pick<CutInput, "steps">, index: number): number {
  return (input.steps[index] as CutStep).tokens;
}

/**
 * The smallest cut in [from, to] whose live part is at most `target`. The live part shrinks as the cut grows (a step's
 * line costs less than the step) except where the checkpoint folds coarser; a binary search finds the boundary and a
 * short walk back corrects a fold's bump, and the answer is checked.
 */
function firstCutWithin(at: (cut: number) => number, from: number, to: number, target: number): number | undefined {
  if (at(to) > target) {
    // Not monotone near the end (a fold): look for any cut that fits, smallest first.
    for (let cut = from; cut <= to; cut++) if (at(cut) <= target) return cut;
    return undefined;
  }
  let [lo, hi] = [from, to];
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (at(mid) <= target) hi = mid;
    else lo = mid + 1;
  }
  let cut = lo;
  while (cut > from && at(cut - 1) <= target) cut -= 1;
  return cut;
}

/** The live part's share of the window, past a floor (liveBudget). */
export const LIVE_WINDOW_SHARE = 0.25;
export const LIVE_FLOOR_TOKENS = 16_000;

/**
 * The live part's budget: the request's room, but no more than a quarter of the window (at least 16k provider tokens,
 * `ratio` provider tokens per estimated token; `room` and `windowTokens` are estimated tokens). A live part kept
 * smaller is cheaper at every step (each request re-reads it from the provider's cache) while the cost of moving the
 * cut does not grow (each move rewrites what it keeps, and a smaller part is rewritten more often), and a long context
 * works worse than a short one; the steps it leaves out stay one memory_zoom away.
 */
export function liveBudget(room: number, windowTokens: number, ratio = 1): number {
  const floor = Math.floor(LIVE_FLOOR_TOKENS / ratio);
  return Math.min(room, Math.max(floor, Math.floor(windowTokens * LIVE_WINDOW_SHARE)));
}
