import { type ChatMessage, cutToBytes, flattenLine, STEP_MARKERS, utf8Bytes } from "../core/summary.js";

/**
 * The seam between the compactor and a model. A summarizer answers one chat request (system prompt, user message,
 * and in size retries the previous answers and feedback) with text. Real providers (OpenAI-compatible, Anthropic,
 * OpenAI through the Vercel AI SDK) come later; tests and the demo use the deterministic fake below.
 */
export interface Summarizer {
  /** Stored on every node it writes, e.g. "fake-extractive/1" or "openai:gpt-4o-mini". */
  readonly identity: string;
  /** Largest request, in UTF-8 bytes, it accepts; larger messages are chunked (never clipped). */
  readonly windowBytes: number;
  complete(messages: readonly ChatMessage[], signal?: AbortSignal): Promise<string>;
}

export class SummarizerError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SummarizerError";
  }
}

export interface FakeSummarizerOptions {
  /** Answer this many bytes over the limit, 5 fewer on each retry (how real models behave, seed 002 §4.3). */
  readonly overshootBytes?: number;
  /** Fail every call. */
  readonly alwaysFail?: boolean;
  /** Fail the first N calls for each distinct step, then work. */
  readonly failFirst?: number;
  /** Wait this long before answering (to exercise leases and crashes). */
  readonly delayMs?: number;
  readonly windowBytes?: number;
}

/**
 * A deterministic, extractive summarizer for tests and the demo. It reads the step out of the request exactly as a
 * model would receive it, and:
 * - compress: keeps the kind tag and the message's first words, up to the limit;
 * - merge: splits both lines into tagged items, puts the user's items first, and keeps whole items while they fit;
 * - retries (feedback in the same conversation): answers the previous line cut shorter.
 */
export function createFakeSummarizer(options: FakeSummarizerOptions = {}): Summarizer {
  const failures = new Map<string, number>();
  return {
    identity: "fake-extractive/1",
    windowBytes: options.windowBytes ?? 64 * 1024,
    async complete(messages, signal) {
      if (options.delayMs) await sleep(options.delayMs, signal);
      const request = messages.find((m) => m.role === "user")?.content ?? "";
      if (options.alwaysFail) throw new SummarizerError("fake summarizer: configured to fail every call");
      if (options.failFirst) {
        const seen = failures.get(request) ?? 0;
        if (seen < options.failFirst) {
          failures.set(request, seen + 1);
          throw new SummarizerError(`fake summarizer: configured failure ${seen + 1} of ${options.failFirst}`);
        }
      }
      const retries = messages.filter((m) => m.role === "assistant").length;
      const step = parseStep(request);
      if (!step) throw new SummarizerError("fake summarizer: the request holds no compress or merge step");
      if (options.overshootBytes !== undefined) {
        const target = step.limit + Math.max(1, options.overshootBytes - 5 * retries);
        return padTo(extract(step, Number.MAX_SAFE_INTEGER), target);
      }
      // A well-behaved model: the first answer fits; a retry cuts further.
      return extract(step, step.limit - 8 * retries);
    },
  };
}

interface ParsedStep {
  readonly type: "compress" | "merge";
  readonly limit: number;
  readonly lines: readonly string[];
}

function parseStep(request: string): ParsedStep | undefined {
  for (const [type, marker] of [
    ["compress", STEP_MARKERS.compress],
    ["compress", STEP_MARKERS.compressPart],
    ["merge", STEP_MARKERS.merge],
  ] as const) {
    const at = request.lastIndexOf(`\n${marker} `);
    if (at < 0) continue;
    const rest = request.slice(at + marker.length + 2);
    const limit = Number.parseInt(rest, 10);
    const body = rest.slice(rest.indexOf("\n") + 1);
    return { type, limit, lines: type === "merge" ? body.split("\n").slice(0, 2) : [body] };
  }
  return undefined;
}

function extract(step: ParsedStep, limit: number): string {
  if (step.type === "compress") {
    const line = flattenLine(step.lines[0] ?? "").trim();
    return cutAtWord(line, limit);
  }
  const items = step.lines.flatMap((line) => line.split(/;\s+/)).filter((item) => item.trim().length > 0);
  const ordered = [...items.filter((i) => i.startsWith("user:")), ...items.filter((i) => !i.startsWith("user:"))];
  let out = "";
  for (const item of ordered) {
    const next = out ? `${out}; ${item}` : item;
    if (utf8Bytes(next) > limit) {
      if (!out) out = cutAtWord(item, limit);
      break;
    }
    out = next;
  }
  return out;
}

function cutAtWord(text: string, limit: number): string {
  if (utf8Bytes(text) <= limit) return text;
  const cut = cutToBytes(text, Math.max(1, limit - 4));
  const space = cut.lastIndexOf(" ");
  return `${space > cut.length / 2 ? cut.slice(0, space) : cut} ...`;
}

function padTo(text: string, bytes: number): string {
  let out = text;
  while (utf8Bytes(out) < bytes) out += " and more detail";
  return cutToBytes(out, bytes);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(new SummarizerError("aborted"));
    });
  });
}
