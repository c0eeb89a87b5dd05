import {
  cutToBytes,
  flattenLine,
  promptBytes,
  promptMessages,
  STEP_MARKERS,
  type SummaryPrompt,
  utf8Bytes,
} from "../../core/summary.js";
import { type Summarizer, SummarizerError } from "../summarizer.js";
import type { SummarizerProvider } from "./provider.js";

/** Token estimate of the fake's usage: the figure the prompt-cache simulator uses too (scripts/prompt-cache.ts). */
const BYTES_PER_TOKEN = 3.5;

export interface FakeSummarizerOptions {
  /** Answer this many bytes over the limit, 5 fewer on each retry (how real models behave, seed 002 §4.3). */
  readonly overshootBytes?: number;
  /**
   * Write lines of at most this many bytes (below the step's limit), where by default the fake fills each line up to
   * the limit. Seed 002 measured real models' lines at ~250 bytes on average under the 512-byte limit; `bench cache`
   * uses this to show what memory costs with lines of that length (docs/caching.md).
   */
  readonly lineBytes?: number;
  /** Fail every call. */
  readonly alwaysFail?: boolean;
  /** Fail the first N calls for each distinct step, then work. */
  readonly failFirst?: number;
  /** Wait this long before answering (to exercise leases and crashes). */
  readonly delayMs?: number;
  readonly windowBytes?: number;
}

/**
 * OPTCHAT_SUMMARIZER=fake: the deterministic extractive summarizer, for tests and the demo, only when chosen
 * explicitly. Options after a colon, comma-separated: overshoot=N, fail, fail-first=N, delay=MS, lines=BYTES.
 */
export const fakeProvider: SummarizerProvider = {
  name: "fake",
  summary: "the deterministic extractive summarizer (tests and the demo; it only trims text)",
  check(settings) {
    try {
      parseFakeOptions(settings.summarizer);
      return [];
    } catch (error) {
      return [(error as Error).message];
    }
  },
  async create(settings) {
    return createFakeSummarizer(parseFakeOptions(settings.summarizer));
  },
};

/** `fake:overshoot=40,fail-first=2` as options; throws naming OPTCHAT_SUMMARIZER for an unknown one. */
export function parseFakeOptions(setting: string): FakeSummarizerOptions {
  const options: { -readonly [K in keyof FakeSummarizerOptions]: FakeSummarizerOptions[K] } = {};
  for (const option of setting.split(":")[1]?.split(",") ?? []) {
    const [name, value] = option.split("=");
    if (name === "overshoot") options.overshootBytes = Number(value ?? 40);
    else if (name === "lines") options.lineBytes = lineBytesOption(value);
    else if (name === "fail") options.alwaysFail = true;
    else if (name === "fail-first") options.failFirst = Number(value ?? 1);
    else if (name === "delay") options.delayMs = Number(value ?? 1000);
    else
      throw new Error(
        `OPTCHAT_SUMMARIZER: unknown fake option '${name}' (known: overshoot=N, fail, fail-first=N, delay=MS, lines=BYTES)`,
      );
  }
  return options;
}

/**
 * A deterministic, extractive summarizer. It reads the step out of the prompt exactly as a model would receive it, and:
 * - compress: keeps the kind tag and the message's first words, up to the limit;
 * - merge: splits both lines into tagged items, puts the user's items first, and keeps whole items while they fit;
 * - retries (feedback in the same conversation): answers the previous line cut shorter.
 * Its usage is estimated from the prompt's bytes, with nothing cached.
 */
export function createFakeSummarizer(options: FakeSummarizerOptions = {}): Summarizer {
  const failures = new Map<string, number>();
  return {
    identity: "fake-extractive/1",
    provider: "fake",
    model: "fake-extractive/1",
    windowBytes: options.windowBytes ?? 64 * 1024,
    async complete(prompt, callOptions) {
      if (options.delayMs) await sleep(options.delayMs, callOptions?.signal);
      const text = fakeAnswer(prompt, options, failures);
      const usage = {
        inputTokens: Math.ceil(promptBytes(prompt) / BYTES_PER_TOKEN),
        cacheReadTokens: 0,
        cacheWriteTokens: 0,
        outputTokens: Math.ceil(utf8Bytes(text) / BYTES_PER_TOKEN),
      };
      return { text, usage, finishReason: "stop" };
    },
  };
}

/** What the fake answers to a prompt (the scripted model server answers compactor calls with it too). */
export function fakeAnswer(
  prompt: SummaryPrompt,
  options: FakeSummarizerOptions = {},
  failures: Map<string, number> = new Map(),
): string {
  const messages = promptMessages(prompt);
  const request = messages.find((m) => m.role === "user")?.content ?? "";
  if (options.alwaysFail)
    throw new SummarizerError("fake summarizer: configured to fail every call", { kind: "server" });
  if (options.failFirst) {
    const seen = failures.get(request) ?? 0;
    if (seen < options.failFirst) {
      failures.set(request, seen + 1);
      throw new SummarizerError(`fake summarizer: configured failure ${seen + 1} of ${options.failFirst}`, {
        kind: "server",
      });
    }
  }
  const retries = messages.filter((m) => m.role === "assistant").length;
  const batch = parseBatch(request);
  if (batch) {
    // One line per message or pair, each as the single step would answer it.
    return batch.steps
      .map((step) =>
        options.overshootBytes !== undefined
          ? padTo(
              extract(step, Number.MAX_SAFE_INTEGER),
              step.limit + Math.max(1, options.overshootBytes - 5 * retries),
            )
          : extract(step, Math.min(step.limit, options.lineBytes ?? step.limit) - 8 * retries),
      )
      .join("\n");
  }
  const step = parseStep(request);
  if (!step) throw new SummarizerError("fake summarizer: the request holds no compress or merge step");
  if (options.overshootBytes !== undefined) {
    const target = step.limit + Math.max(1, options.overshootBytes - 5 * retries);
    return padTo(extract(step, Number.MAX_SAFE_INTEGER), target);
  }
  // A well-behaved model: the first answer fits; a retry cuts further.
  return extract(step, Math.min(step.limit, options.lineBytes ?? step.limit) - 8 * retries);
}

/** `lines=BYTES`: a whole number from 64 (shorter lines say nothing) up. */
function lineBytesOption(value: string | undefined): number {
  const bytes = Number(value);
  if (!Number.isInteger(bytes) || bytes < 64)
    throw new Error(`OPTCHAT_SUMMARIZER: fake option lines=${value ?? ""} must be a whole number of bytes, 64 or more`);
  return bytes;
}

interface ParsedStep {
  readonly type: "compress" | "merge";
  readonly limit: number;
  readonly lines: readonly string[];
}

/** The step after the last of `markers` found in the request: its type, byte limit and the text after its line. */
function afterMarker(
  request: string,
  markers: readonly (readonly ["compress" | "merge", string])[],
): { type: "compress" | "merge"; limit: number; body: string } | undefined {
  for (const [type, marker] of markers) {
    const at = request.lastIndexOf(`\n${marker} `);
    if (at < 0) continue;
    const rest = request.slice(at + marker.length + 2);
    return { type, limit: Number.parseInt(rest, 10), body: rest.slice(rest.indexOf("\n") + 1) };
  }
  return undefined;
}

function parseStep(request: string): ParsedStep | undefined {
  const found = afterMarker(request, [
    ["compress", STEP_MARKERS.compress],
    ["compress", STEP_MARKERS.compressPart],
    ["merge", STEP_MARKERS.merge],
  ]);
  if (!found) return undefined;
  const { type, limit, body } = found;
  return { type, limit, lines: type === "merge" ? body.split("\n").slice(0, 2) : [body] };
}

/** A batch step (several messages, or several pairs, in one request) as the single steps it stands for. */
function parseBatch(request: string): { steps: ParsedStep[] } | undefined {
  const found = afterMarker(request, [
    ["compress", STEP_MARKERS.compressBatch],
    ["merge", STEP_MARKERS.mergeBatch],
  ]);
  if (!found) return undefined;
  const { type, limit, body } = found;
  const pattern = type === "compress" ? /<message>\n([\s\S]*?)\n<\/message>/g : /<pair>\n(.*)\n(.*)\n<\/pair>/g;
  const steps = [...body.matchAll(pattern)].map((m) => ({
    type,
    limit,
    lines: type === "compress" ? [m[1] ?? ""] : [m[1] ?? "", m[2] ?? ""],
  }));
  return { steps };
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
      reject(new SummarizerError("aborted", { kind: "aborted" }));
    });
  });
}
