/**
 * A stopped turn's hand-on (issue 36 deliver 4, docs/checkpoints.md). Pure. When the previous turn of a session failed
 * or was interrupted mid-way, the next turn's previous-exchange block carries where it stopped: its error, and every
 * call it made as a checkpoint line (`ref|tool arguments → the start of its result`, src/core/checkpoint-lines.ts),
 * the last few at full detail, so that "continue" goes on from there without running finished calls again, whether it
 * comes at once or after the stopped turn was published (the shared view holds a published turn as one line).
 */
import { CHECKPOINT_LEVELS, type CheckpointCall, type CheckpointStep, checkpointLines } from "./checkpoint-lines.js";
import { escapeMemoryText, estimateTokens } from "./context.js";

/** One record of the stopped turn, as the store reads it: its kind, the start of its text and its tool call id. */
export interface StoppedTurnRecord {
  readonly seq: number;
  readonly kind: "user" | "assistant" | "tool_call" | "tool_result" | "report" | "note";
  readonly toolCallId: string | null;
  readonly toolName: string | null;
  readonly head: string;
  readonly byteLength: number;
  /** The end of a result longer than its head (a host that truncates output keeps its end: it says how it ended). */
  readonly tail?: string;
}

export interface StoppedTurn {
  readonly state: "failed" | "interrupted";
  /** What the turn's notes say went wrong (a failed request's error), oldest first. */
  readonly errors: readonly string[];
  /** One step per call, in the order the calls were made (a call without a result shows that it has none). */
  readonly steps: readonly CheckpointStep[];
  /** Records of the turn left out (older than the ones read). */
  readonly skipped: number;
}

/** The calls the turn stored calls for but no results: the turn stopped while they ran. */
const NO_RESULT = "(no result stored: the turn stopped before this call finished)";

function parseCall(head: string, toolName: string | null): { tool: string; args: string } {
  try {
    const parsed = JSON.parse(head) as { tool?: unknown; input?: unknown };
    return { tool: String(parsed.tool ?? toolName ?? "tool"), args: JSON.stringify(parsed.input ?? null) };
  } catch {
    // A long call's head is cut: its arguments are shown as they start.
    const args = head.replace(/^\{"tool":"[^"]*","input":/, "");
    return { tool: toolName ?? "tool", args };
  }
}

/** The stopped turn from its records (in seq order): its calls paired with their results, its notes as errors. */
export function stoppedTurnOf(
  state: StoppedTurn["state"],
  records: readonly StoppedTurnRecord[],
  skipped = 0,
): StoppedTurn {
  const errors: string[] = [];
  const steps: CheckpointCall[][] = [];
  const open = new Map<string, CheckpointCall[]>();
  for (const record of records) {
    if (record.kind === "note") errors.push(record.head);
    else if (record.kind === "assistant" || record.kind === "report") {
      const tool = record.kind === "report" ? "report" : "said";
      steps.push([{ ref: `${record.seq}+1`, tool, args: "", result: record.head, failed: false }]);
    } else if (record.kind === "tool_call") {
      const { tool, args } = parseCall(record.head, record.toolName);
      const step: CheckpointCall[] = [{ ref: `${record.seq}+1`, tool, args, result: NO_RESULT, failed: true }];
      steps.push(step);
      if (record.toolCallId) open.set(record.toolCallId, step);
    } else if (record.kind === "tool_result") {
      const step = record.toolCallId ? open.get(record.toolCallId) : undefined;
      const call = step?.[0];
      const result = {
        ref: `${record.seq}+1`,
        result: record.head,
        failed: record.head.startsWith("error: "),
        ...(record.tail ? { end: record.tail } : {}),
      };
      if (step && call) step[0] = { ...call, ...result };
      else steps.push([{ tool: record.toolName ?? "tool", args: "", ...result }]);
    }
  }
  return { state, errors, steps, skipped };
}

/** How many of the last calls are always shown at full detail. */
const LAST_DETAILED = 3;

/**
 * The hand-on's pieces (one per line, for the previous-exchange block's body) within `capTokens`: the earlier calls at
 * the finest checkpoint level that fits (the coarsest when none does), the last ones at full detail.
 */
export function renderStoppedTurn(stopped: StoppedTurn, capTokens: number): string[] {
  const calls = stopped.steps.reduce((n, s) => n + s.length, 0);
  const why = stopped.state === "interrupted" ? "it was interrupted" : "it failed";
  const head = [
    `<stopped_turn state="${stopped.state}" calls="${calls}">`,
    `The previous turn stopped before it finished: ${why}. Every call it made is listed here in order, one line per call: ref|tool arguments → the start of its result; memory_zoom a ref for the exact output ({a..b} stands for every number from a to b). A call listed with its result ran and its output is stored: to continue the task, go on from where the turn stopped instead of running finished calls again.`,
    ...(stopped.skipped > 0 ? [`(${stopped.skipped} earlier records of the turn are not listed here.)`] : []),
    ...stopped.errors.map((e) => `error: ${escapeMemoryText(e.length > 600 ? `${e.slice(0, 600)}…` : e)}`),
  ];
  const last = stopped.steps.slice(-LAST_DETAILED);
  const earlier = stopped.steps.slice(0, stopped.steps.length - last.length);
  const lastLines = checkpointLines(last, 0);
  const fixed = estimateTokens([...head, ...lastLines, "</stopped_turn>"].join("\n"));
  let lines = checkpointLines(earlier, 0);
  for (let level = 1; level < CHECKPOINT_LEVELS && fixed + estimateTokens(lines.join("\n")) > capTokens; level++) {
    lines = checkpointLines(earlier, level);
  }
  return [...head, ...lines, ...lastLines, "</stopped_turn>"];
}
