import { chunkEnds, fitsInBytes } from "../core/chunk.js";
import {
  buildSummaryRequest,
  type ChatMessage,
  fitContext,
  freeLeafText,
  freeParentText,
  NODE_BYTES,
  overLimitFeedback,
  SIZE_TRIES,
  type SummaryStep,
  shortestTry,
  utf8Bytes,
} from "../core/summary.js";
import { type Summarizer, SummarizerError } from "./summarizer.js";
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
  /** Bytes sent to the summarizer, summed over calls (for cost accounting and benchmarks). */
  readonly inputBytes: number;
  readonly chunks: readonly {
    chunkLevel: number;
    chunkIndex: number;
    charStart: number;
    charEnd: number;
    text: string;
  }[];
}

function requestBytes(messages: readonly ChatMessage[]): number {
  return messages.reduce((sum, m) => sum + utf8Bytes(m.content), 0);
}

/**
 * One step under size enforcement (seed 002 §4.3): measured UTF-8 bytes; when a line is too long, the same
 * conversation continues with feedback showing where the limit cuts; after SIZE_TRIES the shortest try is kept and
 * flagged. An empty answer is a failure.
 */
export async function runStep(
  summarizer: Summarizer,
  context: readonly string[],
  step: SummaryStep,
  limit = NODE_BYTES,
  signal?: AbortSignal,
): Promise<{ text: string; calls: number; overshoot: boolean; inputBytes: number }> {
  const stepBytes = utf8Bytes(JSON.stringify(step));
  const first = buildSummaryRequest([], step, limit);
  const contextBudget = Math.max(0, summarizer.windowBytes - requestBytes(first) - stepBytes / 2 - 4 * limit);
  let messages = buildSummaryRequest(fitContext(context, contextBudget), step, limit);
  const tries: string[] = [];
  let inputBytes = 0;
  for (;;) {
    inputBytes += requestBytes(messages);
    const answer = (await summarizer.complete(messages, signal)).trim();
    if (answer.length === 0) throw new SummarizerError(`${summarizer.identity} returned an empty line`);
    tries.push(answer);
    if (utf8Bytes(answer) <= limit || tries.length >= SIZE_TRIES) break;
    messages = [
      ...messages,
      { role: "assistant", content: answer },
      { role: "user", content: overLimitFeedback(answer, limit) },
    ];
  }
  const text = shortestTry(tries);
  return { text, calls: tries.length, overshoot: utf8Bytes(text) > limit, inputBytes };
}

/**
 * A leaf: free when `kind: text` fits; otherwise one compress step, or, when the message is larger than half the
 * summarizer's window, a recorded chunking tree: each part compressed, then merged pairwise up to one line. Every
 * byte of the message reaches the summarizer; nothing is clipped.
 */
export async function summarizeLeaf(
  summarizer: Summarizer,
  context: readonly string[],
  kind: string,
  text: string,
  signal?: AbortSignal,
): Promise<SummaryOutcome> {
  const free = freeLeafText(kind, text);
  if (free !== undefined) return { text: free, calls: 0, overshoot: false, inputBytes: 0, chunks: [] };
  const maxStep = Math.floor(summarizer.windowBytes / 2);
  if (fitsInBytes(text, maxStep)) {
    const result = await runStep(summarizer, context, { type: "compress", kind, text }, NODE_BYTES, signal);
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
    const result = await runStep(summarizer, context, step, NODE_BYTES, signal);
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
        const result = await runStep(
          summarizer,
          context,
          { type: "merge", left: left.text, right: right.text },
          NODE_BYTES,
          signal,
        );
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
  summarizer: Summarizer,
  context: readonly string[],
  left: string,
  right: string,
  signal?: AbortSignal,
): Promise<SummaryOutcome> {
  const free = freeParentText(left, right);
  if (free !== undefined) return { text: free, calls: 0, overshoot: false, inputBytes: 0, chunks: [] };
  const result = await runStep(summarizer, context, { type: "merge", left, right }, NODE_BYTES, signal);
  return { ...result, chunks: [] };
}
