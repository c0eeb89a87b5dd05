import { answerProblem } from "../core/answer-checks.js";
import {
  batchAnswerCount,
  buildSummaryPrompt,
  continuePrompt,
  NODE_BYTES,
  promptBytes,
  type SummaryStep,
  utf8Bytes,
} from "../core/summary.js";
import { recordedCall, type StepContext } from "./summarize.js";
import { SummarizerError } from "./summarizer.js";

/** Answers to a batch that come back with the wrong number of lines are asked for again this many times. */
const COUNT_TRIES = 2;

export interface BatchAnswer {
  /** One entry per message or pair: its line, or undefined when that line is unusable (too long, a reference). */
  readonly lines: readonly (string | undefined)[];
  readonly calls: number;
  readonly inputBytes: number;
}

/**
 * Several steps in one call (issue 39): messages of a run compressed together, or ready merges together, each answered
 * on its own line. The answer must have exactly one line per item (asked again in the same conversation when it has
 * not; after COUNT_TRIES every line is undefined); a line that starts with a reference or is over the limit is left
 * undefined, and the caller makes that item alone with the single step's retries (summarize.ts `runStep`). An empty
 * answer or a refusal fails the whole step, as for a single step (the nodes are tried again later).
 */
export async function runBatch(
  ctx: StepContext,
  context: readonly string[],
  step: Extract<SummaryStep, { type: "compress_batch" | "merge_batch" }>,
  limit = NODE_BYTES,
): Promise<BatchAnswer> {
  const { summarizer } = ctx;
  const count = batchAnswerCount(step);
  const stepBytes = utf8Bytes(JSON.stringify(step));
  const bare = promptBytes(buildSummaryPrompt([], step, limit));
  // Room for the answer: a line per item, as the single step keeps room for a few.
  const contextBudget = Math.max(0, summarizer.windowBytes - bare - stepBytes / 2 - (count + 4) * limit);
  let prompt = buildSummaryPrompt(context, step, limit, contextBudget);
  let calls = 0;
  let inputBytes = 0;
  while (calls < COUNT_TRIES) {
    calls += 1;
    inputBytes += promptBytes(prompt);
    const { answer, recordOutcome } = await recordedCall(ctx, prompt, calls);
    const text = answer.text.trim();
    const whole = answerProblem(text, answer.finishReason);
    const lines = text
      .split(/\r?\n/)
      .map((line) => line.trim())
      .filter((line) => line.length > 0);
    recordOutcome(whole === "empty" || whole === "refusal" ? whole : lines.length === count ? "ok" : "line_count");
    if (whole === "empty" || whole === "refusal") {
      throw new SummarizerError(
        whole === "empty"
          ? `${summarizer.identity} returned an empty answer to a batch of ${count}`
          : `${summarizer.identity} refused a batch of ${count}: ${JSON.stringify(text.slice(0, 120))}`,
        { kind: whole },
      );
    }
    if (lines.length === count) {
      return {
        lines: lines.map((line) => (answerProblem(line) === undefined && utf8Bytes(line) <= limit ? line : undefined)),
        calls,
        inputBytes,
      };
    }
    prompt = continuePrompt(
      prompt,
      text,
      `That answer has ${lines.length} lines; exactly ${count} are needed, one per item, in order, each on its own line.`,
    );
  }
  return { lines: new Array<string | undefined>(count).fill(undefined), calls, inputBytes };
}
