import { answerProblem, referenceFeedback } from "../core/answer-checks.js";
import { chunkEnds, fitsInBytes } from "../core/chunk.js";
import {
  buildSummaryPrompt,
  continuePrompt,
  freeLeafText,
  freeParentText,
  NODE_BYTES,
  overLimitFeedback,
  promptBytes,
  SIZE_TRIES,
  type SummaryPrompt,
  type SummaryStep,
  shortestTry,
  utf8Bytes,
} from "../core/summary.js";
import type { PrefixGate } from "./prefix-gate.js";
import {
  type CallUsage,
  failureKindOf,
  NO_USAGE,
  type Summarizer,
  SummarizerError,
  type SummaryAnswer,
} from "./summarizer.js";
import { collectYielding, yieldToEventLoop } from "./yield.js";

/**
 * Part boundaries found between two turns of the event loop: at a 32 KiB part size (the fake summarizer's window)
 * 16 parts are 512 KiB of scanning, a few milliseconds.
 */
const CHUNK_ENDS_PER_TURN = 16;

export interface SummaryOutcome {
  readonly text: string;
  /** Model calls made (0 for a free node). */
  readonly calls: number;
  /** The shortest try was still over the limit after SIZE_TRIES attempts. */
  readonly overshoot: boolean;
  /** Bytes sent to the summarizer, summed over calls (for benchmarks). */
  readonly inputBytes: number;
  readonly chunks: readonly {
    chunkLevel: number;
    chunkIndex: number;
    charStart: number;
    charEnd: number;
    text: string;
  }[];
}

/** What a call was for (the ledger's purpose): the first call of a step, or a later one in its conversation. */
export type CallPurpose = "leaf" | "merge" | "publication" | "retry";

/**
 * One model call as the ledger records it. `outcome`: `ok` (a usable line that fits), `over_limit` (usable, too long:
 * retried), `reference` (started with an id or a ref: retried), `refusal`, `empty`, or the failure kind of a call
 * that threw (summarizer.ts).
 */
export interface CallRecord {
  readonly purpose: CallPurpose;
  readonly usage: CallUsage;
  readonly latencyMs: number;
  readonly outcome: string;
  readonly at: Date;
}

/** Who is asking and how: the summarizer, the tree's cache key, and where each call is recorded. */
export interface StepContext {
  readonly summarizer: Summarizer;
  /** The first call's purpose; calls after it in the same conversation are `retry`. */
  readonly purpose: Exclude<CallPurpose, "retry">;
  readonly cacheKey?: string;
  readonly signal?: AbortSignal;
  readonly record?: (call: CallRecord) => void;
  /** Orders the calls of one tree so each reads the previous one's prefix from the provider's cache. */
  readonly gate?: PrefixGate;
}

/**
 * Call `n` of a step's conversation (the first has the step's purpose, later ones `retry`). A call that throws is
 * recorded in the ledger with its failure kind; an answer is recorded by the caller with `recordOutcome`, once judged.
 */
export async function recordedCall(
  ctx: StepContext,
  prompt: SummaryPrompt,
  n: number,
): Promise<{ answer: SummaryAnswer; recordOutcome: (outcome: string) => void }> {
  const purpose: CallPurpose = n === 1 ? ctx.purpose : "retry";
  const started = performance.now();
  const at = new Date();
  try {
    const answer = await ctx.summarizer.complete(prompt, { signal: ctx.signal, cacheKey: ctx.cacheKey });
    return {
      answer,
      recordOutcome: (outcome) =>
        ctx.record?.({ purpose, usage: answer.usage, latencyMs: performance.now() - started, outcome, at }),
    };
  } catch (error) {
    ctx.record?.({
      purpose,
      usage: NO_USAGE,
      latencyMs: performance.now() - started,
      outcome: failureKindOf(error),
      at,
    });
    throw error;
  }
}

/**
 * One step under answer checks (core/answer-checks.ts) and size enforcement (seed 002 §4.3): measured UTF-8 bytes;
 * when a line is too long, or starts with an id or a ref, the same conversation continues with feedback; after
 * SIZE_TRIES the shortest usable try is kept (flagged when still too long). An empty answer or a refusal fails the
 * step at once (the node is tried again later in a fresh conversation); so does a step with no usable try.
 */
export async function runStep(
  ctx: StepContext,
  context: readonly string[],
  step: SummaryStep,
  limit = NODE_BYTES,
): Promise<{ text: string; calls: number; overshoot: boolean; inputBytes: number }> {
  const { summarizer } = ctx;
  const stepBytes = utf8Bytes(JSON.stringify(step));
  const bare = promptBytes(buildSummaryPrompt([], step, limit));
  const contextBudget = Math.max(0, summarizer.windowBytes - bare - stepBytes / 2 - 4 * limit);
  let prompt = buildSummaryPrompt(context, step, limit, contextBudget);
  const tries: string[] = [];
  let calls = 0;
  let inputBytes = 0;
  while (calls < SIZE_TRIES) {
    calls += 1;
    inputBytes += promptBytes(prompt);
    const { answer, recordOutcome } = await recordedCall(ctx, prompt, calls);
    const line = answer.text.trim();
    const problem = answerProblem(line, answer.finishReason);
    const fits = utf8Bytes(line) <= limit;
    recordOutcome(problem ?? (fits ? "ok" : "over_limit"));
    if (problem === "empty" || problem === "refusal") {
      throw new SummarizerError(
        problem === "empty"
          ? `${summarizer.identity} returned an empty line`
          : `${summarizer.identity} refused the step: ${JSON.stringify(line.slice(0, 120))}`,
        { kind: problem },
      );
    }
    if (problem === "reference") {
      prompt = continuePrompt(prompt, line, referenceFeedback(line));
      continue;
    }
    tries.push(line);
    if (fits) break;
    prompt = continuePrompt(prompt, line, overLimitFeedback(line, limit));
  }
  if (tries.length === 0) {
    throw new SummarizerError(
      `${summarizer.identity}: no usable line in ${calls} tries (each started with an id or a ref)`,
      { kind: "invalid" },
    );
  }
  const text = shortestTry(tries);
  return { text, calls, overshoot: utf8Bytes(text) > limit, inputBytes };
}

/**
 * A leaf: free when `kind: text` fits; otherwise one compress step, or, when the message is larger than half the
 * summarizer's window, a recorded chunking tree: each part compressed, then merged pairwise up to one line. Every
 * byte of the message reaches the summarizer; nothing is clipped.
 */
export async function summarizeLeaf(
  ctx: StepContext,
  context: readonly string[],
  kind: string,
  text: string,
): Promise<SummaryOutcome> {
  const free = freeLeafText(kind, text);
  if (free !== undefined) return { text: free, calls: 0, overshoot: false, inputBytes: 0, chunks: [] };
  const maxStep = Math.floor(ctx.summarizer.windowBytes / 2);
  if (fitsInBytes(text, maxStep)) {
    const result = await runStep(ctx, context, { type: "compress", kind, text });
    return { ...result, chunks: [] };
  }
  // Every step below yields to the event loop: a fast summarizer (the fake one, a cached answer) resolves without
  // one, and thousands of parts of a 64 MiB record would otherwise run as one task and starve the job's heartbeat.
  const ends = await collectYielding(chunkEnds(text, maxStep), CHUNK_ENDS_PER_TURN);
  const chunks: { chunkLevel: number; chunkIndex: number; charStart: number; charEnd: number; text: string }[] = [];
  let level: { text: string; start: number; end: number }[] = [];
  let calls = 0;
  let inputBytes = 0;
  let overshoot = false;
  let at = 0;
  for (const [k, end] of ends.entries()) {
    const part = text.slice(at, end);
    const step: SummaryStep = { type: "compress_part", kind, text: part, part: k + 1, parts: ends.length };
    const result = await runStep(ctx, context, step);
    calls += result.calls;
    inputBytes += result.inputBytes;
    overshoot ||= result.overshoot;
    level.push({ text: result.text, start: at, end });
    chunks.push({ chunkLevel: 0, chunkIndex: k, charStart: at, charEnd: end, text: result.text });
    at = end;
    await yieldToEventLoop();
  }
  for (let chunkLevel = 1; level.length > 1; chunkLevel++) {
    const next: typeof level = [];
    for (let k = 0; k < level.length; k += 2) {
      const left = level[k] as (typeof level)[number];
      const right = level[k + 1];
      if (!right) {
        next.push(left);
        continue;
      }
      const joined = freeParentText(left.text, right.text);
      let merged = joined;
      if (merged === undefined) {
        const result = await runStep({ ...ctx, purpose: "merge" }, context, {
          type: "merge",
          left: left.text,
          right: right.text,
        });
        calls += result.calls;
        inputBytes += result.inputBytes;
        overshoot ||= result.overshoot;
        merged = result.text;
        await yieldToEventLoop();
      }
      next.push({ text: merged, start: left.start, end: right.end });
      chunks.push({ chunkLevel, chunkIndex: k / 2, charStart: left.start, charEnd: right.end, text: merged });
    }
    level = next;
  }
  return { text: (level[0] as { text: string }).text, calls, overshoot, inputBytes, chunks };
}

/** A parent: free when the two children joined by a newline fit; otherwise one merge step. */
export async function summarizeParent(
  ctx: StepContext,
  context: readonly string[],
  left: string,
  right: string,
): Promise<SummaryOutcome> {
  const free = freeParentText(left, right);
  if (free !== undefined) return { text: free, calls: 0, overshoot: false, inputBytes: 0, chunks: [] };
  const result = await runStep(ctx, context, { type: "merge", left, right });
  return { ...result, chunks: [] };
}
