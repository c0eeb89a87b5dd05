/**
 * Cache epochs (docs/caching.md "Across turns: epochs"): the decisions that keep a session's requests append-only from
 * one turn to the next. Pure, no clock: the adapter's transform applies them.
 *
 * An epoch begins at a turn whose request gets freshly rendered memory (the memory message, and the volatile part
 * leading that turn's request). On the following turns of the epoch the request is the SAME memory message, then the
 * session's native OpenCode messages from the epoch's turn on, left in place, each user message led by exactly the
 * text it was first sent with: so every byte a turn sent is again the head of the next turn's request, which a
 * provider's prompt cache reads at 0.1× (native OpenCode's own economy). What the shared view gained meanwhile from the
 * other sessions goes at the head of the new turn's request, once, and is re-sent with the same bytes afterwards.
 * The cut between memory and native history moves only when an epoch ends (hysteresis), which bounds the request.
 */

/**
 * When an epoch ends. The defaults were chosen with `npm run bench -- cache` (docs/caching.md has the numbers); turns
 * and kept tokens are plugin settings (cacheEpochTurns, cacheEpochKeptTokens).
 */
export interface EpochLimits {
  /** Native history kept after the memory, in estimated tokens, before the turn's own messages. */
  readonly keptTokens: number;
  /** Turns of one epoch, the first included. */
  readonly turns: number;
  /**
   * Shared lines the view gained since the epoch's memory was rendered. Anthropic looks back at most 20 blocks from a
   * breakpoint: at the next epoch the memory's stable end must still be within 20 parts of the cache entry its first
   * request wrote, or the whole memory is written again.
   */
  readonly sharedLinesGained: number;
}

export const EPOCH_LIMITS: EpochLimits = { keptTokens: 6_000, turns: 10, sharedLinesGained: 16 };

export interface EpochProgress {
  /** Turns already in the epoch (its first included). */
  readonly turns: number;
  /** Estimated tokens of the native messages kept after the memory, before the new turn's request. */
  readonly keptTokens: number;
  /** Shared lines now, and when the epoch's memory was rendered. */
  readonly sharedLines: number;
  readonly sharedLinesAtStart: number;
}

/** Whether a new turn continues the epoch, or why it starts a new one. */
export function epochDecision(progress: EpochProgress, limits: EpochLimits = EPOCH_LIMITS): "continue" | string {
  if (progress.turns >= limits.turns) return `the epoch has ${progress.turns} turns (limit ${limits.turns})`;
  if (progress.keptTokens > limits.keptTokens)
    return `native history kept is ~${progress.keptTokens} tokens (limit ${limits.keptTokens})`;
  const gained = progress.sharedLines - progress.sharedLinesAtStart;
  if (gained >= limits.sharedLinesGained)
    return `the shared view gained ${gained} lines (limit ${limits.sharedLinesGained})`;
  if (gained < 0) return "the shared view was folded";
  return "continue";
}

/** The publications a shared line covers, from its ref (`pub:start+count|…`); undefined for anything else. */
export function sharedLineRange(line: string): { start: number; end: number } | undefined {
  const match = /^pub:(\d+)\+(\d+)\|/.exec(line);
  if (!match) return undefined;
  const start = Number(match[1]);
  return { start, end: start + Number(match[2]) };
}

/**
 * The shared lines to append to a new turn of an epoch: those covering a publication at or past `shownThrough` that is
 * not the session's own (its own recent turns are in the request as native messages), and the new high-water mark.
 * `lines` are the shared block's data lines, oldest first (escaped already: they cannot open or close a block).
 */
export function sharedUpdate(
  lines: readonly string[],
  shownThrough: number,
  own: ReadonlySet<number>,
): { lines: string[]; through: number } {
  const picked: string[] = [];
  let through = shownThrough;
  for (const line of lines) {
    const range = sharedLineRange(line);
    if (!range || range.end <= shownThrough) continue;
    through = Math.max(through, range.end);
    for (let seq = Math.max(range.start, shownThrough); seq < range.end; seq++) {
      if (!own.has(seq)) {
        picked.push(line);
        break;
      }
    }
  }
  return { lines: picked, through };
}

/** The shared view's high-water mark as its lines show it: the end of the furthest publication a line covers. */
export function sharedThrough(lines: readonly string[]): number {
  let through = 0;
  for (const line of lines) through = Math.max(through, sharedLineRange(line)?.end ?? 0);
  return through;
}
