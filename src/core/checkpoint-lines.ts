/**
 * What an execution checkpoint says (issue 36, docs/checkpoints.md). Pure. The person's prompt stays in the request
 * verbatim (the checkpoint follows it and never replaces it); the checkpointed steps become one line per call —
 * `ref|tool arguments → the start of its result`, the ref opening the exact result with memory_zoom — folded further as
 * the turn grows:
 *   level 0  arguments up to 160 characters, the result's first 240;
 *   level 1  arguments up to 60, the result's first 100;
 *   level 2  no arguments, the result's first line up to 48;
 *   level 3  level 2, runs of lines alike but for counting numbers folded into one: `{a..b}` (or `{a..b..s}`) stands
 *            for every number from a to b (step s), in the ref as in the text.
 * The finest level that fits the checkpoint's share is used; the lines of a level depend only on their own step, so a
 * checkpoint whose cut moved at the same level only gained lines at its end, and a request's checkpoint grows from the
 * one sent before (growCheckpoint) until it outgrows its share: consecutive requests share their prefix through it.
 */
import { escapeMemoryText, estimateTokens } from "./context.js";

export interface CheckpointCall {
  /** The own-session ref of the call's result record (`seq+1`), or undefined when not known. */
  readonly ref: string | undefined;
  readonly tool: string;
  /** The call's arguments as JSON (or any text). */
  readonly args: string;
  /** The result's text, or the error's (its start, when `end` is given). */
  readonly result: string;
  /** The end of a long result (a host that truncates output keeps its end), shown at level 0 after its start. */
  readonly end?: string;
  readonly failed: boolean;
}

/** One step: its calls (several for a parallel batch; none for a step that only wrote text). */
export type CheckpointStep = readonly CheckpointCall[];

export const CHECKPOINT_LEVELS = 4;

export interface RenderedCheckpoint {
  readonly text: string;
  readonly tokens: number;
  readonly level: number;
  readonly lines: number;
  /** The data lines (what the next request's checkpoint grows from). */
  readonly data: readonly string[];
}

function brief(text: string, chars: number): string {
  const flat = text.replace(/\s+/g, " ").trim();
  const points = Array.from(flat);
  return points.length <= chars ? flat : `${points.slice(0, chars).join("")}…`;
}

function tail(text: string, chars: number): string {
  const points = Array.from(text.replace(/\s+/g, " ").trim());
  return points.length <= chars ? points.join("") : `…${points.slice(-chars).join("")}`;
}

function firstLine(text: string, chars: number): string {
  const line = text.split("\n").find((l) => l.trim() !== "") ?? "";
  return brief(line, chars);
}

/** The text of one call's line at a level (0–2; level 3 folds level 2 lines). */
export function callLineText(call: CheckpointCall, level: number): string {
  const status = call.failed ? "failed: " : "";
  if (level === 0) {
    const end = call.end ? ` … ${tail(call.end, 160)}` : "";
    return `${call.tool} ${brief(call.args, 160)} → ${status}${brief(call.result, 240)}${end}`;
  }
  if (level === 1) return `${call.tool} ${brief(call.args, 60)} → ${status}${brief(call.result, 100)}`;
  return `${call.tool} → ${status}${firstLine(call.result, 48)}`;
}

function callLine(call: CheckpointCall, level: number): string {
  return `${call.ref ?? "-"}|${escapeMemoryText(callLineText(call, Math.min(level, 2)))}`;
}

/**
 * Consecutive lines that differ only in counting numbers folded into one line: each number that changes along the run
 * must rise by one fixed step from line to line, and everything else must be equal.
 */
export function foldAlike(lines: readonly string[]): string[] {
  const out: string[] = [];
  let i = 0;
  while (i < lines.length) {
    const first = split(lines[i] as string);
    let j = i + 1;
    let strides: (number | undefined)[] | undefined;
    while (j < lines.length) {
      const next = split(lines[j] as string);
      const found = continues(first, split(lines[j - 1] as string), next, j - i, strides);
      if (!found) break;
      strides = found;
      j += 1;
    }
    if (j - i === 1 || !strides) out.push(lines[i] as string);
    else out.push(template(first, strides, j - i - 1));
    i = j;
  }
  return out;
}

function split(line: string): string[] {
  return line.split(/(\d+)/);
}

function isCount(piece: string): boolean {
  return /^(0|[1-9]\d{0,14})$/.test(piece);
}

/** The strides that carry `first` … `prev` on to `next` (index k of the run), or undefined when it does not continue. */
function continues(
  first: readonly string[],
  prev: readonly string[],
  next: readonly string[],
  k: number,
  strides: readonly (number | undefined)[] | undefined,
): (number | undefined)[] | undefined {
  if (next.length !== first.length) return undefined;
  const found: (number | undefined)[] = [];
  for (let p = 0; p < first.length; p++) {
    const [a, b, c] = [first[p] as string, prev[p] as string, next[p] as string];
    if (p % 2 === 0 || !isCount(a) || !isCount(c)) {
      if (a !== c) return undefined;
      found.push(undefined);
      continue;
    }
    const stride = Number(c) - Number(b);
    const known = strides?.[p];
    if (k === 1) {
      if (stride < 0) return undefined;
      found.push(stride === 0 ? undefined : stride);
    } else if ((known ?? 0) !== stride) return undefined;
    else found.push(known);
  }
  return found.some((s) => s !== undefined) ? found : undefined;
}

function template(first: readonly string[], strides: readonly (number | undefined)[], steps: number): string {
  return first
    .map((piece, p) => {
      const stride = strides[p];
      if (stride === undefined) return piece;
      const last = Number(piece) + stride * steps;
      return stride === 1 ? `{${piece}..${last}}` : `{${piece}..${last}..${stride}}`;
    })
    .join("");
}

/** The checkpoint's data lines at a level. */
export function checkpointLines(steps: readonly CheckpointStep[], level: number): string[] {
  const lines = steps.flatMap((calls) => calls.map((call) => callLine(call, level)));
  return level >= 3 ? foldAlike(lines) : lines;
}

/** The checkpoint's opening: the same text whatever it stands for, so a grown checkpoint keeps its prefix. */
export const CHECKPOINT_HEAD = "<turn_checkpoint>";
const CHECKPOINT_INTRO =
  "The earlier steps of this turn, shown here as lines to keep the request within the model's window; the request above is unchanged and is still the task, and the later steps follow word for word. " +
  "One line per call, in order: ref|tool arguments → the start of its result. memory_zoom a ref for the exact output; {a..b} stands for every number from a to b.";

function wrap(lines: readonly string[], level: number): RenderedCheckpoint {
  const text = [CHECKPOINT_HEAD, CHECKPOINT_INTRO, ...lines, "</turn_checkpoint>"].join("\n");
  return { text, tokens: estimateTokens(text), level, lines: lines.length, data: lines };
}

/** The checkpoint block for the first `steps.length` steps of the turn at one level. */
export function renderCheckpointAt(steps: readonly CheckpointStep[], level: number): RenderedCheckpoint {
  return wrap(checkpointLines(steps, level), level);
}

/** The finest level whose checkpoint fits `capTokens` (the coarsest when none does); empty for no steps. */
export function renderCheckpoint(steps: readonly CheckpointStep[], capTokens: number): RenderedCheckpoint {
  if (steps.length === 0) return { text: "", tokens: 0, level: 0, lines: 0, data: [] };
  let rendered = renderCheckpointAt(steps, 0);
  for (let level = 1; rendered.tokens > capTokens && level < CHECKPOINT_LEVELS; level++) {
    rendered = renderCheckpointAt(steps, level);
  }
  return rendered;
}

/** What a request's checkpoint said: the next request's checkpoint grows from it. */
export interface SentCheckpoint {
  /** Steps it stands for (the first `steps` of the turn). */
  readonly steps: number;
  readonly level: number;
  /** Its data lines, as sent. */
  readonly data: readonly string[];
}

/**
 * The checkpoint for the first `count` steps (`stepsOf(from, to)` gives steps from..to-1), grown from the one sent before (`sent`, for a prefix of them):
 * its lines stay as they were and the new steps' lines are appended at its level (at level 3 folded among themselves
 * only), so the request keeps its prefix through the old lines (the provider's cache). Rendered afresh, at the finest
 * level that fits, only when the grown one would exceed `capTokens` (or there is nothing to grow from): the prefix
 * then breaks once, and the checkpoint comes out smaller.
 */
export function growCheckpoint(
  sent: SentCheckpoint | undefined,
  count: number,
  stepsOf: (from: number, to: number) => readonly CheckpointStep[],
  capTokens: number,
): RenderedCheckpoint {
  if (sent && sent.steps > 0 && sent.steps <= count) {
    const added = checkpointLines(stepsOf(sent.steps, count), sent.level);
    const grown = wrap(added.length === 0 ? sent.data : [...sent.data, ...added], sent.level);
    if (grown.tokens <= capTokens) return grown;
  }
  return renderCheckpoint(stepsOf(0, count), capTokens);
}

/** A folded line read back: every line it stands for, `{a..b}` / `{a..b..s}` taken in step (the inverse of foldAlike). */
export function expandFolded(line: string): string[] {
  const range = /\{(\d+)\.\.(\d+)(?:\.\.(\d+))?\}/g;
  const first = [...line.matchAll(range)][0];
  if (!first) return [line];
  const count = (Number(first[2]) - Number(first[1])) / Number(first[3] ?? 1) + 1;
  return Array.from({ length: count }, (_, k) =>
    line.replace(range, (_m, a: string, _b: string, s: string | undefined) => String(Number(a) + k * Number(s ?? 1))),
  );
}

/** The most refs a folded ref opens into (a checkpoint folds at most a turn's calls). */
export const MAX_FOLDED_REFS = 5_000;

/**
 * The refs a folded checkpoint ref stands for (`{10..16..3}+1` → 10+1, 13+1, 16+1), or undefined when `ref` is not
 * one (or stands for more than MAX_FOLDED_REFS): memory_zoom opens it into them.
 */
export function expandFoldedRef(ref: string): string[] | undefined {
  const match = /^\{(\d{1,15})\.\.(\d{1,15})(?:\.\.(\d{1,15}))?\}\+1$/.exec(ref.trim());
  if (!match) return undefined;
  const [from, to, step] = [Number(match[1]), Number(match[2]), Number(match[3] ?? 1)];
  if (step < 1 || to < from || (to - from) % step !== 0 || (to - from) / step + 1 > MAX_FOLDED_REFS) return undefined;
  return Array.from({ length: (to - from) / step + 1 }, (_, k) => `${from + k * step}+1`);
}
