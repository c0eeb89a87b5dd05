/**
 * A tool result's leaf line made without a model call (issue 39, docs/compactor.md "Tool results as excerpts"). Pure.
 *
 * Tool output is what a coding session stores most of and what its summaries keep least of (the compactor's prompt:
 * "describe each in a few words: what was done, whether it worked, with the error if not"). Its leaf line is instead
 * built from the output itself: a label that says it is an excerpt and how large the output is (so the agent knows to
 * zoom for the rest), the tool's name, and the output's lines that say most in least space, in their order: lines that
 * report a failure or an error first, then the last line (where a test run or a build states its result), then the
 * first lines. Each line is flattened and cut to a brief; skipped stretches show as `…`. The call's arguments are the
 * line before it in the view (the `tool_call` leaf). The line is deterministic: the same output, the same line.
 */
import { cutToBytes, freeLeafText, NODE_BYTES, utf8Bytes } from "./summary.js";

/** The excerpt line's size at most: a line's, as a model's summary would take. */
export const EXCERPT_BYTES = NODE_BYTES;
/** Characters of one output line kept at most. */
const LINE_CHARS = 160;
/** Lines looked at for failures at most (a huge output's line count is still counted whole). */
const SCANNED_LINES = 20_000;
/** Failure lines kept at most, before the space runs out. */
const FAILURE_LINES = 6;

/**
 * Words that mark a line reporting a failure, in the forms build tools, test runners, shells and runtimes print them.
 * General, not fitted to any corpus: a line with one of them is where a summary would look first.
 */
const FAILURE =
  /\b(?:errors?|err|err_\w+|enoent|eacces|econnrefused|fail(?:s|ed|ure|ures|ing)?|fatal|panic(?:ked)?|exception|traceback|denied|refused|cannot|can't|unable to|not found|no such|timed out|timeout|abort(?:ed)?|segmentation fault|exit (?:code|status) [1-9]\d*)\b/i;

interface OutputLine {
  readonly n: number;
  readonly text: string;
}

/** 14213 → "14,213" (the fallback labels write sizes so too). */
function grouped(n: number): string {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

function flat(text: string): string {
  return text.replace(/\s+/g, " ").trim();
}

function brief(text: string): string {
  // Cut before flattening: a single line of megabytes is never copied whole.
  const head = flat(text.slice(0, LINE_CHARS * 4));
  const points = Array.from(head);
  return points.length <= LINE_CHARS ? head : `${points.slice(0, LINE_CHARS - 1).join("")}…`;
}

/** The output's non-blank lines that matter to the excerpt, and how many lines it has in all. */
function scan(text: string): { first: OutputLine[]; failures: OutputLine[]; last: OutputLine[]; lines: number } {
  const first: OutputLine[] = [];
  const failures: OutputLine[] = [];
  let last: OutputLine[] = [];
  let lines = 0;
  let at = 0;
  while (at <= text.length) {
    const end = text.indexOf("\n", at);
    const stop = end === -1 ? text.length : end;
    const raw = text.slice(at, Math.min(stop, at + LINE_CHARS * 4));
    if (raw.trim() !== "") {
      const line = { n: lines, text: raw };
      if (first.length < 3) first.push(line);
      if (lines < SCANNED_LINES && failures.length < FAILURE_LINES && FAILURE.test(raw)) failures.push(line);
      last = [...last.slice(-1), line];
    }
    lines += 1;
    if (end === -1) break;
    at = end + 1;
  }
  return { first, failures, last, lines };
}

/**
 * The excerpt line of a tool result that does not fit a line as it is: `tool_result: excerpt of N bytes, L lines
 * (zoom for all): tool → line … line`, at most `limit` bytes.
 */
export function toolResultExcerpt(toolName: string | null, text: string, limit = EXCERPT_BYTES): string {
  const { first, failures, last, lines } = scan(text);
  const size = `${grouped(utf8Bytes(text))} bytes${lines > 1 ? `, ${grouped(lines)} lines` : ""}`;
  const head = `tool_result: excerpt of ${size} (zoom for all): ${toolName ? `${toolName} → ` : ""}`;
  const wanted = [...failures, ...last.slice(-1), ...first.slice(0, 1), ...last.slice(0, 1), ...first.slice(1)];
  const firstN = first[0]?.n ?? 0;
  const lastN = last[last.length - 1]?.n ?? 0;
  const chosen = new Map<number, string>();
  const render = (picked: ReadonlyMap<number, string>) => {
    const order = [...picked.keys()].sort((a, b) => a - b);
    let body = order[0] === firstN ? "" : "… ";
    order.forEach((n, k) => {
      if (k > 0) body += n === (order[k - 1] as number) + 1 ? " | " : " … ";
      body += picked.get(n) as string;
    });
    return `${head}${body}${order[order.length - 1] === lastN ? "" : " …"}`;
  };
  for (const line of wanted) {
    if (chosen.has(line.n)) continue;
    const trial = new Map(chosen).set(line.n, brief(line.text));
    if (utf8Bytes(render(trial)) <= limit) chosen.set(line.n, brief(line.text));
  }
  if (chosen.size === 0) {
    // Not even one brief line fits: the first line, cut to what is left.
    const line = wanted[0];
    return line ? cutToBytes(`${head}${flat(line.text.slice(0, limit * 4))}`, limit) : cutToBytes(head, limit);
  }
  return render(chosen);
}

/** How a tool result's leaf line is made (OPTCHAT_COMPACTOR_TOOL_RESULTS): its excerpt, or by the model. */
export type ToolResultLines = "excerpt" | "model";

export interface LeafLineSource {
  readonly kind: string;
  readonly toolName?: string | null;
  readonly text: string;
}

/**
 * A leaf's line when no model call makes it: the message itself when it fits (a free leaf, seed 002 §3), else, for a
 * tool result under `excerpt`, its excerpt; undefined when the model must summarize it.
 */
export function leafLineWithoutModel(leaf: LeafLineSource, toolResults: ToolResultLines): string | undefined {
  const free = freeLeafText(leaf.kind, leaf.text);
  if (free !== undefined || toolResults !== "excerpt" || leaf.kind !== "tool_result") return free;
  return toolResultExcerpt(leaf.toolName ?? null, leaf.text);
}
