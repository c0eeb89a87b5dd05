/**
 * `bench tree`: the view fold (pure, synthetic) and the compactor (real code path, fake summarizer, pg-boss).
 *
 * Cases (defaults; sizes follow the settings below):
 *   fold-from-scratch     refold of 2,300 messages, every node built, one `applyFoldEvent` append per leaf, median of
 *                         several runs (seed 002 §5.2: 20 ms)
 *   fold-incremental      cost per message of append + fit on a growing view of 20,000 messages, every parent built
 *   view-prefix-sharing   20,000-message replay where the compactor keeps up (leaf built right after its append, each
 *                         parent as soon as both children exist); the view is rendered after every message as the model
 *                         reads it (`start+count|text` lines) and consecutive renders are compared: their common prefix
 *                         in characters (seed 002 §5.4: 73k of ~131k at 20k messages)
 *   compactor-inputs      summarizer calls and request bytes per message through the real code path (memory service,
 *                         compactor worker, pg-boss) with the fake summarizer wrapped to count, on a scratch database
 *   compactor-cache       the same live workload through the real AI SDK providers (Anthropic, OpenAI) at the
 *                         scripted model with its prompt-cache simulator: cache-read share of compactor input tokens,
 *                         calls and tokens per message (scripts/bench/compactor-cache.ts)
 *   pgboss-noop-batch1    bare pg-boss: no-op jobs worked with the compactor's worker options
 *   pgboss-noop-batch100  the same jobs with batchSize 100 and burstWhenBatchFull
 *   compactor-throughput  nodes/s of the compactor (live: worker running while messages arrive; backlog: messages first,
 *                         then the worker) next to the no-op figures
 *
 * Synthetic size model (fold cases): a node's text size is a deterministic function of (seed, level, index).
 *   leaf:   100 + 412·u³ bytes (skewed to short lines: median ≈ 150, mean ≈ 200)
 *   parent: free (left + "\n" + right) when that fits 512 bytes, else a model merge of 120 + 392·u² bytes
 * Calibrated so that a full 128,000-byte view holds ≈ 450 lines of ≈ 285 bytes (seed 002 §5.4: ~500 of ~250).
 *
 * Environment:
 *   OPTCHAT_BENCH_TREE_FOLD_MESSAGES     messages of fold-from-scratch (default 2300)
 *   OPTCHAT_BENCH_TREE_FOLD_RUNS         measured runs of fold-from-scratch (default 9, after 2 warm-up runs)
 *   OPTCHAT_BENCH_TREE_MESSAGES          messages of fold-incremental and view-prefix-sharing (default 20000)
 *   OPTCHAT_BENCH_TREE_VIEW_BYTES        the view budget everywhere, compactor included (default 128000)
 *   OPTCHAT_BENCH_TREE_SEED              seed of the synthetic sizes and texts (default 1)
 *   OPTCHAT_BENCH_TREE_COMPACTOR_MESSAGES  messages ingested while the worker runs (default 2000; 0 skips the compactor)
 *   OPTCHAT_BENCH_TREE_BACKLOG_MESSAGES  messages ingested before the worker starts (default 600; 0 skips)
 *   OPTCHAT_BENCH_TREE_SESSIONS          sessions each compactor phase spreads its messages over (default 4)
 *   OPTCHAT_BENCH_TREE_CONCURRENCY       compactor worker concurrency (default 8, the product default)
 *   OPTCHAT_BENCH_TREE_DRAIN_SECONDS     longest wait for the compactor to finish a phase (default 180)
 *   OPTCHAT_BENCH_TREE_NOOP_JOBS         no-op jobs per pg-boss variant (default 5000; 0 skips)
 *   OPTCHAT_BENCH_TREE_NOOP_SECONDS      longest measurement per pg-boss variant (default 10)
 *   OPTCHAT_BENCH_TREE_MERGES            the compactor cases' OPTCHAT_COMPACTOR_MERGES: needed (default) or all
 */
import type { PgBoss } from "pg-boss";
import { createFakeSummarizer } from "../../src/compactor/providers/fake.js";
import { createBoss, NODE_QUEUE, NODE_QUEUE_OPTIONS } from "../../src/compactor/queue.js";
import type { Summarizer } from "../../src/compactor/summarizer.js";
import { type RunningCompactor, startCompactor } from "../../src/compactor/worker.js";
import { applyFoldEvent, EMPTY_FOLD, type FoldParams, type FoldState, type NodeBytes } from "../../src/core/fold.js";
import { COMPACT_SYSTEM_PROMPT, NODE_BYTES, promptBytes } from "../../src/core/summary.js";
import { type NodeAddress, refOf } from "../../src/core/tree.js";
import { resolveConfig } from "../../src/memory/config.js";
import type { Memory } from "../../src/memory/service.js";
import { lineAsText } from "../../src/memory/views.js";
import {
  type BenchContext,
  compactorRecorder,
  emit,
  envNumber,
  errorMessage,
  note,
  ratio,
  round,
  type SyntheticRecord,
  syntheticEvent,
  withScratchMemory,
} from "./common.js";
import { compactorCacheCases } from "./compactor-cache.js";

const BENCH = "tree";
/** Seed 002 §5.2: "2,300 messages: 20 ms". */
const SEED_REFOLD_MS = 20;
const SEED_REFOLD_MESSAGES = 2300;
/** Seed 002 §5.4: consecutive views (~131k characters with markup) share 73k characters on average at 20k messages. */
const SEED_SHARED_CHARS_AT_20K = 73_000;
const SEED_VIEW_CHARS = 131_000;

export interface Settings {
  readonly foldMessages: number;
  readonly foldRuns: number;
  readonly messages: number;
  readonly viewBytes: number;
  readonly seed: number;
  readonly compactorMessages: number;
  readonly backlogMessages: number;
  readonly sessions: number;
  readonly concurrency: number;
  readonly drainSeconds: number;
  readonly noopJobs: number;
  readonly noopSeconds: number;
  /** OPTCHAT_COMPACTOR_MERGES for the compactor cases (default the product's: needed). */
  readonly merges: "needed" | "all";
}

function readSettings(): Settings {
  return {
    foldMessages: envNumber("OPTCHAT_BENCH_TREE_FOLD_MESSAGES", SEED_REFOLD_MESSAGES, { min: 1, integer: true }),
    foldRuns: envNumber("OPTCHAT_BENCH_TREE_FOLD_RUNS", 9, { min: 1, integer: true }),
    messages: envNumber("OPTCHAT_BENCH_TREE_MESSAGES", 20_000, { min: 2, integer: true }),
    viewBytes: envNumber("OPTCHAT_BENCH_TREE_VIEW_BYTES", 128_000, { min: 1024, integer: true }),
    seed: envNumber("OPTCHAT_BENCH_TREE_SEED", 1, { integer: true }),
    compactorMessages: envNumber("OPTCHAT_BENCH_TREE_COMPACTOR_MESSAGES", 2000, { integer: true }),
    backlogMessages: envNumber("OPTCHAT_BENCH_TREE_BACKLOG_MESSAGES", 600, { integer: true }),
    sessions: envNumber("OPTCHAT_BENCH_TREE_SESSIONS", 4, { min: 1, integer: true }),
    concurrency: envNumber("OPTCHAT_BENCH_TREE_CONCURRENCY", 8, { min: 1, integer: true }),
    drainSeconds: envNumber("OPTCHAT_BENCH_TREE_DRAIN_SECONDS", 180, { min: 1 }),
    noopJobs: envNumber("OPTCHAT_BENCH_TREE_NOOP_JOBS", 5000, { integer: true }),
    noopSeconds: envNumber("OPTCHAT_BENCH_TREE_NOOP_SECONDS", 10, { min: 0.5 }),
    merges: process.env.OPTCHAT_BENCH_TREE_MERGES === "all" ? "all" : "needed",
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Deterministic synthetic sizes and texts

/** A uniform number in [0, 1) from (seed, a, b, c): a 32-bit integer mix, the same on every platform. */
function unit(seed: number, a: number, b: number, c: number): number {
  let h = (seed ^ 0x9e3779b9) >>> 0;
  for (const v of [a, b, c]) {
    h = Math.imul(h ^ v, 0x85ebca6b) >>> 0;
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35) >>> 0;
    h ^= h >>> 16;
  }
  return (h >>> 0) / 2 ** 32;
}

/** Text sizes of every node of a complete tree over `leaves` leaves (see the file header for the model). */
class SizeModel {
  /** levels[l][i]: UTF-8 bytes of node (l, i)'s text. */
  readonly levels: Int32Array[] = [];
  /** free[l][i] = 1 when parent (l, i) is the free concatenation of its children. */
  readonly free: Uint8Array[] = [];
  freeParents = 0;
  parents = 0;

  constructor(
    readonly leaves: number,
    readonly seed: number,
  ) {
    const leafSizes = new Int32Array(leaves);
    for (let i = 0; i < leaves; i++) leafSizes[i] = Math.round(100 + 412 * unit(seed, 0, i, 0) ** 3);
    this.levels.push(leafSizes);
    this.free.push(new Uint8Array(leaves));
    for (let level = 1; 2 ** level <= leaves; level++) {
      const below = this.levels[level - 1] as Int32Array;
      const sizes = new Int32Array(Math.floor(below.length / 2));
      const free = new Uint8Array(sizes.length);
      for (let i = 0; i < sizes.length; i++) {
        const joined = (below[2 * i] as number) + 1 + (below[2 * i + 1] as number);
        this.parents += 1;
        if (joined <= NODE_BYTES) {
          sizes[i] = joined;
          free[i] = 1;
          this.freeParents += 1;
        } else {
          sizes[i] = Math.round(120 + (NODE_BYTES - 120) * unit(seed, level, i, 1) ** 2);
        }
      }
      this.levels.push(sizes);
      this.free.push(free);
    }
  }

  bytes(node: NodeAddress): number | undefined {
    return this.levels[node.level]?.[node.index];
  }

  meanLeafBytes(): number {
    const leaves = this.levels[0] as Int32Array;
    let sum = 0;
    for (const size of leaves) sum += size;
    return leaves.length > 0 ? sum / leaves.length : 0;
  }
}

const WORDS = (
  "the importer queue durable broker retries commit failed passed test suite config worker reads writes file " +
  "src/consumer.ts decided asked wants because ack after before dead-letter open question fixed ordering delay " +
  "seconds ops monitors backups schema migration index lock session view fold node parent leaf summary line " +
  "budget cache prefix zoom record payload hash generation tree compactor job lease heartbeat notify poll " +
  "error timeout pool client transaction"
).split(" ");
const TAGS = ["user", "assistant", "tool_call", "tool_result", "assistant", "tool_result", "tool_call", "user"];

/** A long run of words (single spaces, no newlines), sliced to make texts of exact lengths. */
function makeFiller(seed: number, chars: number): string {
  const words: string[] = [];
  let length = 0;
  for (let k = 0; length < chars; k++) {
    const word =
      unit(seed, 7, k, 0) < 0.06
        ? `${TAGS[k % TAGS.length]}:`
        : (WORDS[Math.floor(unit(seed, 7, k, 1) * WORDS.length)] as string);
    words.push(unit(seed, 7, k, 2) < 0.08 ? `${word};` : word);
    length += word.length + 2;
  }
  return words.join(" ");
}

/** Exactly `bytes` ASCII characters, starting with a kind tag, no leading/trailing space, no newline. */
function syntheticText(filler: string, bytes: number, pick: number, tag: string): string {
  const head = `${tag}: `;
  const bodyLength = Math.max(1, bytes - head.length);
  let at = Math.floor(pick * (filler.length - bodyLength - 64));
  at = filler.indexOf(" ", at) + 1;
  let body = filler.slice(at, at + bodyLength);
  if (body.endsWith(" ")) body = `${body.slice(0, -1)}.`;
  return `${head}${body}`.slice(0, Math.max(bytes, 1));
}

/** Texts of the size model's nodes, made on demand: free parents are their children joined by a newline. */
class TextModel {
  private readonly texts: (string | undefined)[][];
  private readonly lines: (string | undefined)[][];
  private readonly filler: string;

  constructor(readonly sizes: SizeModel) {
    this.filler = makeFiller(sizes.seed, 400_000);
    this.texts = sizes.levels.map(() => []);
    this.lines = sizes.levels.map(() => []);
  }

  text(node: NodeAddress): string {
    const row = this.texts[node.level] as (string | undefined)[];
    const cached = row[node.index];
    if (cached !== undefined) return cached;
    const bytes = this.sizes.bytes(node) ?? 0;
    let text: string;
    if (node.level > 0 && this.sizes.free[node.level]?.[node.index] === 1) {
      const left = this.text({ level: node.level - 1, index: 2 * node.index });
      const right = this.text({ level: node.level - 1, index: 2 * node.index + 1 });
      text = `${left}\n${right}`;
    } else {
      const tag = node.level === 0 ? (TAGS[node.index % TAGS.length] as string) : "user";
      text = syntheticText(this.filler, bytes, unit(this.sizes.seed, node.level, node.index, 3), tag);
    }
    row[node.index] = text;
    return text;
  }

  /** The view line as the model reads it (`start+count|text`, newlines flattened), through the product's renderer. */
  line(node: NodeAddress): string {
    const row = this.lines[node.level] as (string | undefined)[];
    const cached = row[node.index];
    if (cached !== undefined) return cached;
    const line = lineAsText({ ref: refOf(node), text: this.text(node) });
    row[node.index] = line;
    return line;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Statistics

interface MicroSummary {
  readonly p50Us: number | null;
  readonly p99Us: number | null;
  readonly meanUs: number | null;
  readonly maxUs: number | null;
}

/** Nearest-rank percentiles of durations in milliseconds, reported in microseconds. */
function summarizeMicros(durationsMs: Float64Array): MicroSummary {
  if (durationsMs.length === 0) return { p50Us: null, p99Us: null, meanUs: null, maxUs: null };
  const sorted = Float64Array.from(durationsMs).sort();
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? 0;
  let sum = 0;
  for (const value of sorted) sum += value;
  return {
    p50Us: round(at(0.5) * 1000, 2),
    p99Us: round(at(0.99) * 1000, 2),
    meanUs: round((sum / sorted.length) * 1000, 2),
    maxUs: round((sorted[sorted.length - 1] ?? 0) * 1000, 2),
  };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

function nearestRank(values: Float64Array, p: number): number {
  if (values.length === 0) return 0;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? 0;
}

function mean(values: Float64Array, from = 0, to = values.length): number {
  if (to <= from) return 0;
  let sum = 0;
  for (let k = from; k < to; k++) sum += values[k] as number;
  return sum / (to - from);
}

// ---------------------------------------------------------------------------------------------------------------
// Fold cases (pure, no database)

function foldParams(settings: Settings): FoldParams {
  // The product default: OPTCHAT_VIEW_LOWER_BYTES 0 means lower = upper.
  return {
    upperBytes: settings.viewBytes,
    lowerBytes: settings.viewBytes,
    ...(settings.merges === "all" ? { merges: "all" as const } : {}),
  };
}

/** Appends `messages` leaves in order with every node built; returns the final state and the merges made. */
function refold(sizes: SizeModel, messages: number, params: FoldParams): { state: FoldState; merges: number } {
  const bytesOf: NodeBytes = (node) => sizes.bytes(node);
  let state = EMPTY_FOLD;
  let merges = 0;
  for (let i = 0; i < messages; i++) {
    const result = applyFoldEvent(state, { type: "append", index: i }, bytesOf, params);
    state = result.state;
    merges += result.merged.length;
  }
  return { state, merges };
}

function foldFromScratch(settings: Settings): void {
  const sizes = new SizeModel(settings.foldMessages, settings.seed);
  const params = foldParams(settings);
  const runs: number[] = [];
  let last: { state: FoldState; merges: number } | undefined;
  const warmups = 2;
  for (let run = 0; run < warmups + settings.foldRuns; run++) {
    const start = performance.now();
    last = refold(sizes, settings.foldMessages, params);
    runs.push(performance.now() - start);
  }
  const measured = runs.slice(warmups);
  const medianMs = median(measured);
  const state = last?.state ?? EMPTY_FOLD;
  const bytesOf: NodeBytes = (node) => sizes.bytes(node);
  emit(BENCH, "fold-from-scratch", {
    messages: settings.foldMessages,
    viewBytes: settings.viewBytes,
    runs: measured.length,
    warmupRuns: warmups,
    medianMs: round(medianMs, 2),
    minMs: round(Math.min(...measured), 2),
    maxMs: round(Math.max(...measured), 2),
    firstRunMs: round(runs[0] ?? 0, 2),
    usPerMessage: round((medianMs / settings.foldMessages) * 1000, 2),
    referenceMs: SEED_REFOLD_MS,
    referenceMessages: SEED_REFOLD_MESSAGES,
    // Only comparable at the seed's size and budget.
    vsReference:
      settings.foldMessages === SEED_REFOLD_MESSAGES && settings.viewBytes === 128_000
        ? ratio(medianMs, SEED_REFOLD_MS)
        : null,
    merges: last?.merges ?? 0,
    finalLines: state.parts.length,
    finalBytes: viewBytesOf(state.parts, bytesOf),
    meanLeafBytes: round(sizes.meanLeafBytes(), 1),
    freeParentShare: ratio(sizes.freeParents, sizes.parents),
  });
}

function viewBytesOf(parts: readonly NodeAddress[], bytesOf: NodeBytes): number {
  let total = 0;
  for (const part of parts) total += (bytesOf(part) ?? 0) + `${refOf(part)}|`.length + 1;
  return total;
}

function foldIncremental(settings: Settings): void {
  const sizes = new SizeModel(settings.messages, settings.seed);
  const params = foldParams(settings);
  const bytesOf: NodeBytes = (node) => sizes.bytes(node);
  const perMessage = new Float64Array(settings.messages);
  let state = EMPTY_FOLD;
  let merges = 0;
  let maxMerges = 0;
  let fullAt: number | null = null;
  let bytes = 0;
  const start = performance.now();
  for (let i = 0; i < settings.messages; i++) {
    const t0 = performance.now();
    const result = applyFoldEvent(state, { type: "append", index: i }, bytesOf, params);
    perMessage[i] = performance.now() - t0;
    state = result.state;
    bytes = result.bytes;
    merges += result.merged.length;
    maxMerges = Math.max(maxMerges, result.merged.length);
    if (fullAt === null && result.merged.length > 0) fullAt = i;
  }
  const totalMs = performance.now() - start;
  const afterFull = fullAt === null ? new Float64Array(0) : perMessage.subarray(fullAt);
  emit(BENCH, "fold-incremental", {
    messages: settings.messages,
    viewBytes: settings.viewBytes,
    allParentsBuilt: true,
    ...summarizeMicros(perMessage),
    onceFull: { fromMessage: fullAt, ...summarizeMicros(afterFull) },
    totalMs: round(totalMs, 1),
    referenceUsPerMessage: round((SEED_REFOLD_MS / SEED_REFOLD_MESSAGES) * 1000, 1),
    mergesPerMessage: round(merges / settings.messages, 3),
    maxMergesPerMessage: maxMerges,
    finalLines: state.parts.length,
    finalBytes: bytes,
  });
}

/**
 * Replays `messages` with the compactor keeping up: each message is appended, its leaf built at once, then every
 * parent it completes (readiness: both children built, leaves in order). Every event is folded, as the store does.
 * After each message the view is rendered and compared with the previous render.
 */
function viewPrefixSharing(settings: Settings): void {
  const n = settings.messages;
  const sizes = new SizeModel(n, settings.seed);
  const texts = new TextModel(sizes);
  const params = foldParams(settings);
  const built = sizes.levels.map((row) => new Uint8Array(row.length));
  const bytesOf: NodeBytes = (node) => (built[node.level]?.[node.index] === 1 ? sizes.bytes(node) : undefined);

  const shared = new Float64Array(n - 1);
  const sharedFraction = new Float64Array(n - 1);
  const viewChars = new Float64Array(n);
  const viewLines = new Float64Array(n);
  const foldMs = new Float64Array(n);
  let appendOnly = 0;
  let events = 0;
  let merges = 0;
  let state = EMPTY_FOLD;
  let previous: { parts: readonly NodeAddress[]; lengths: number[]; chars: number } | undefined;
  let fullAt: number | null = null;

  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    let result = applyFoldEvent(state, { type: "append", index: i }, bytesOf, params);
    merges += result.merged.length;
    (built[0] as Uint8Array)[i] = 1;
    result = applyFoldEvent(result.state, { type: "built", node: { level: 0, index: i } }, bytesOf, params);
    merges += result.merged.length;
    events += 2;
    for (let level = 1; (i + 1) % 2 ** level === 0; level++) {
      const node = { level, index: (i + 1) / 2 ** level - 1 };
      (built[level] as Uint8Array)[node.index] = 1;
      result = applyFoldEvent(result.state, { type: "built", node }, bytesOf, params);
      merges += result.merged.length;
      events += 1;
    }
    foldMs[i] = performance.now() - t0;
    state = result.state;
    if (fullAt === null && merges > 0) fullAt = i;

    // Render: one line per part, joined by newlines.
    const parts = state.parts;
    const lengths = parts.map((part) => texts.line(part).length);
    let chars = parts.length > 0 ? parts.length - 1 : 0;
    for (const length of lengths) chars += length;
    viewChars[i] = chars;
    viewLines[i] = parts.length;

    if (previous) {
      const old = previous.parts;
      let k = 0;
      let prefix = 0;
      while (k < old.length && k < parts.length) {
        const a = old[k] as NodeAddress;
        const b = parts[k] as NodeAddress;
        if (a.level !== b.level || a.index !== b.index) break;
        prefix += (lengths[k] as number) + 1;
        k += 1;
      }
      let common: number;
      if (k === old.length) {
        common = previous.chars; // the old render is a prefix of the new one
        appendOnly += 1;
      } else if (k === parts.length) {
        common = chars;
      } else {
        const a = texts.line(old[k] as NodeAddress);
        const b = texts.line(parts[k] as NodeAddress);
        let c = 0;
        while (c < a.length && c < b.length && a.charCodeAt(c) === b.charCodeAt(c)) c += 1;
        common = prefix + c;
      }
      shared[i - 1] = common;
      sharedFraction[i - 1] = previous.chars > 0 ? common / previous.chars : 1;
    }
    previous = { parts, lengths, chars };
  }

  // "At N messages": the last tenth of the replay (at 20,000 messages: 18,001..20,000).
  const window = Math.max(1, Math.floor((n - 1) / 10));
  const from = n - 1 - window;
  const tail = shared.subarray(from);
  const meanSharedAtEnd = mean(shared, from);
  const meanViewCharsAtEnd = mean(viewChars, from + 1);
  const sinceFull = fullAt === null ? new Float64Array(0) : shared.subarray(Math.max(0, fullAt));
  emit(BENCH, "view-prefix-sharing", {
    messages: n,
    viewBytes: settings.viewBytes,
    renderedAfter: "every message",
    viewFullFromMessage: fullAt,
    meanSharedChars: round(mean(shared), 0),
    meanSharedCharsOnceFull: fullAt === null ? null : round(mean(sinceFull), 0),
    atEnd: {
      messages: `${from + 2}..${n}`,
      meanSharedChars: round(meanSharedAtEnd, 0),
      medianSharedChars: nearestRank(tail, 0.5),
      p10SharedChars: nearestRank(tail, 0.1),
      meanSharedFraction: round(mean(sharedFraction, from), 3),
      meanViewChars: round(meanViewCharsAtEnd, 0),
      meanViewLines: round(mean(viewLines, from + 1), 1),
      meanLineChars: round(meanViewCharsAtEnd / Math.max(1, mean(viewLines, from + 1)), 1),
    },
    meanViewChars: round(mean(viewChars), 0),
    meanViewLines: round(mean(viewLines), 1),
    appendOnlyShare: round(appendOnly / Math.max(1, n - 1), 3),
    reference: {
      sharedCharsAt20k: SEED_SHARED_CHARS_AT_20K,
      viewChars: SEED_VIEW_CHARS,
      note: "seed 002 §5.4: real sessions, views with markup, rendered per turn",
    },
    vsReferenceAtEnd:
      n === 20_000 && settings.viewBytes === 128_000 ? ratio(meanSharedAtEnd, SEED_SHARED_CHARS_AT_20K) : null,
    foldEventsPerMessage: round(events / n, 3),
    mergesPerMessage: round(merges / n, 3),
    foldPerMessage: summarizeMicros(foldMs),
    freeParentShare: ratio(sizes.freeParents, sizes.parents),
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Compactor cases (real code path on a scratch database)

export interface SummarizerStats {
  calls: number;
  retryCalls: number;
  requestBytes: number;
  contextBytes: number;
  busyMs: number;
  /** Token usage as the summarizer reported it (the fake estimates it; providers through the simulator measure it). */
  inputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  outputTokens: number;
}

/** The fake summarizer, counting calls and the bytes of every request it receives. */
function countingSummarizer(inner: Summarizer): { summarizer: Summarizer; stats: SummarizerStats } {
  const stats: SummarizerStats = {
    calls: 0,
    retryCalls: 0,
    requestBytes: 0,
    contextBytes: 0,
    busyMs: 0,
    inputTokens: 0,
    cacheReadTokens: 0,
    cacheWriteTokens: 0,
    outputTokens: 0,
  };
  return {
    stats,
    summarizer: {
      ...inner,
      async complete(prompt, options) {
        stats.calls += 1;
        stats.requestBytes += promptBytes(prompt);
        if (prompt.followUps.length > 0) stats.retryCalls += 1;
        stats.contextBytes += prompt.context.reduce((sum, block) => sum + block.bytes, 0);
        const start = performance.now();
        try {
          const answer = await inner.complete(prompt, options);
          stats.inputTokens += answer.usage.inputTokens;
          stats.cacheReadTokens += answer.usage.cacheReadTokens;
          stats.cacheWriteTokens += answer.usage.cacheWriteTokens;
          stats.outputTokens += answer.usage.outputTokens;
          return answer;
        } finally {
          stats.busyMs += performance.now() - start;
        }
      },
    },
  };
}

interface SyntheticMessage extends SyntheticRecord {
  readonly turn: number;
}

const TOOLS = ["read", "bash", "edit", "grep", "glob", "write"];

/**
 * A deterministic coding-agent conversation: turns of a user message, an assistant reply, 0-5 tool call/result pairs
 * and a closing reply. Sizes: user 20-600 B (mostly short), assistant 60-2,460 B, tool calls 40-400 B, tool results
 * log-uniform 80 B - 24 KB.
 */
function conversation(session: number, count: number, seed: number, filler: string): SyntheticMessage[] {
  const out: SyntheticMessage[] = [];
  const pick = (k: number, salt: number) => unit(seed + 1000 * (session + 1), 11, k, salt);
  const text = (k: number, bytes: number) => {
    const head = `[s${session} m${k}] `;
    const body = Math.max(1, Math.round(bytes) - head.length);
    let at = Math.floor(pick(k, 9) * (filler.length - body - 64));
    at = filler.indexOf(" ", at) + 1;
    return `${head}${filler.slice(at, at + body).trim()}`;
  };
  let turn = 0;
  while (out.length < count) {
    const k = () => out.length;
    out.push({ kind: "user", turn, content: text(k(), 20 + 580 * pick(k(), 1) ** 2.5) });
    out.push({ kind: "assistant", turn, content: text(k(), 60 + 2400 * pick(k(), 2) ** 2) });
    const tools = Math.floor(pick(k(), 3) * 6);
    for (let t = 0; t < tools; t++) {
      const toolName = TOOLS[Math.floor(pick(k(), 4) * TOOLS.length)] as string;
      const toolCallId = `call_${session}_${turn}_${t}`;
      out.push({ kind: "tool_call", turn, toolName, toolCallId, content: text(k(), 40 + 360 * pick(k(), 5) ** 1.5) });
      out.push({ kind: "tool_result", turn, toolName, toolCallId, content: text(k(), 80 * 300 ** pick(k(), 6)) });
    }
    out.push({ kind: "assistant", turn, content: text(k(), 60 + 2400 * pick(k(), 7) ** 2) });
    turn += 1;
  }
  return out.slice(0, count);
}

interface BenchSession {
  readonly sessionId: string;
  readonly hostSessionId: string;
  readonly messages: readonly SyntheticMessage[];
}

async function openSessions(
  memory: Memory,
  phase: string,
  sessions: number,
  messages: number,
  seed: number,
  filler: string,
  label: string = phase,
): Promise<BenchSession[]> {
  const out: BenchSession[] = [];
  for (let s = 0; s < sessions; s++) {
    const count = Math.floor(messages / sessions) + (s < messages % sessions ? 1 : 0);
    const hostSessionId = `bench-tree-${label}-s${s}`;
    const session = await memory.openSession({ host: "bench", hostSessionId, projectId: "bench-project" });
    const salt = phase === "live" ? s : s + sessions;
    out.push({ sessionId: session.sessionId, hostSessionId, messages: conversation(salt, count, seed, filler) });
  }
  return out;
}

const INGEST_BATCH = 10;

/** Ingests every session's messages in rounds of INGEST_BATCH per session, the sessions concurrently. */
async function ingestAll(memory: Memory, sessions: readonly BenchSession[], signal: AbortSignal): Promise<number> {
  let sealed = 0;
  const longest = Math.max(0, ...sessions.map((s) => s.messages.length));
  for (let from = 0; from < longest && !signal.aborted; from += INGEST_BATCH) {
    const results = await Promise.all(
      sessions.map((session) => {
        const slice = session.messages.slice(from, from + INGEST_BATCH);
        if (slice.length === 0) return Promise.resolve([]);
        return memory.ingestMany(
          slice.map((message, k) => syntheticEvent(session, `t${message.turn}`, from + k, message)),
        );
      }),
    );
    for (const list of results) for (const result of list) if (result.status === "sealed") sealed += 1;
  }
  return sealed;
}

async function openNodeJobs(memory: Memory): Promise<number> {
  const result = await memory.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pgboss.job WHERE name = $1 AND state IN ('created', 'retry', 'active')",
    [NODE_QUEUE],
  );
  return result.rows[0]?.n ?? 0;
}

/** Waits until every session is settled and no node job is left open; throws on timeout. */
async function waitDrained(
  memory: Memory,
  sessions: readonly BenchSession[],
  deadline: number,
  signal: AbortSignal,
): Promise<void> {
  for (const session of sessions) {
    if (signal.aborted) return;
    await memory.settle(session.sessionId, { timeoutMs: Math.max(0, Math.round(deadline - performance.now())) });
  }
  for (;;) {
    if (signal.aborted) return;
    const open = await openNodeJobs(memory);
    if (open === 0) return;
    if (performance.now() > deadline) throw new Error(`${open} optchat-node job(s) still open after the drain timeout`);
    await sleep(25);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Nodes of a complete binary tree over T leaves: every (level, index) with (index+1)·2^level <= T. */
function fullTreeNodes(leaves: number): number {
  let total = 0;
  for (let level = 0; 2 ** level <= leaves; level++) total += Math.floor(leaves / 2 ** level);
  return total;
}

interface NodeCounts {
  nodes: number;
  distinct_nodes: number;
  leaves: number;
  free_nodes: number;
  free_leaves: number;
  free_parents: number;
  attempts: number;
  model_nodes: number;
  retried_nodes: number;
  overshoot_nodes: number;
  text_bytes: number;
  view_revisions: number;
  view_parts: number;
  final_view_lines: number;
  final_view_bytes: number;
}

async function countNodes(memory: Memory, sessions: readonly BenchSession[]): Promise<NodeCounts> {
  const result = await memory.pool.query<NodeCounts>(
    `WITH t AS (SELECT tree_id FROM optchat.trees WHERE session_id = ANY($1::text[]))
     SELECT count(*)::int AS nodes,
            count(DISTINCT (n.tree_id, n.level, n.idx))::int AS distinct_nodes,
            count(*) FILTER (WHERE n.level = 0)::int AS leaves,
            count(*) FILTER (WHERE n.summarizer = 'free')::int AS free_nodes,
            count(*) FILTER (WHERE n.summarizer = 'free' AND n.level = 0)::int AS free_leaves,
            count(*) FILTER (WHERE n.summarizer = 'free' AND n.level > 0)::int AS free_parents,
            coalesce(sum(n.attempts), 0)::int AS attempts,
            count(*) FILTER (WHERE n.attempts > 0)::int AS model_nodes,
            count(*) FILTER (WHERE n.attempts > 1)::int AS retried_nodes,
            count(*) FILTER (WHERE n.overshoot)::int AS overshoot_nodes,
            coalesce(sum(n.byte_length), 0)::bigint AS text_bytes,
            (SELECT count(*) FROM optchat.view_revisions v WHERE v.tree_id IN (SELECT tree_id FROM t))::int AS view_revisions,
            (SELECT count(*) FROM optchat.view_parts p WHERE p.tree_id IN (SELECT tree_id FROM t))::int AS view_parts,
            (SELECT count(*) FROM optchat.view_parts p
              WHERE p.tree_id IN (SELECT tree_id FROM t) AND p.until_revision IS NULL)::int AS final_view_lines,
            (SELECT coalesce(sum(v.bytes), 0) FROM optchat.trees tr
               JOIN optchat.view_revisions v ON v.tree_id = tr.tree_id AND v.revision = tr.view_revision
              WHERE tr.tree_id IN (SELECT tree_id FROM t))::int AS final_view_bytes
       FROM optchat.nodes n WHERE n.tree_id IN (SELECT tree_id FROM t)`,
    [sessions.map((s) => s.sessionId)],
  );
  return result.rows[0] as NodeCounts;
}

export interface PhaseResult {
  readonly phase: string;
  readonly sessions: readonly BenchSession[];
  readonly messages: number;
  readonly sealed: number;
  readonly messageBytes: number;
  readonly ingestSeconds: number;
  /** live: first ingest → drained; backlog: worker start → drained. */
  readonly buildSeconds: number;
  readonly wallSeconds: number;
  readonly stats: SummarizerStats;
  readonly counts: NodeCounts;
  readonly events: Record<string, number>;
  readonly firstProblem: string | undefined;
  readonly nodeCpuPct: number;
  readonly jobs: JobTimings;
  readonly storage?: Record<string, number>;
}

interface JobTimings {
  readonly jobs: number;
  /** Created (or startAfter, or the phase's start if later) → fetched by a worker, ms: p50, p90, p99. */
  readonly waitMs: readonly number[] | null;
  /** Fetched → completed (pg-boss's completed_on is the commit transaction's start), ms: p50, p90, p99. */
  readonly runMs: readonly number[] | null;
}

/** Queue wait and run time of the phase's node jobs, from pg-boss's own timestamps. */
async function jobTimings(memory: Memory, sessions: readonly BenchSession[], since: Date): Promise<JobTimings> {
  const result = await memory.pool.query<{ jobs: number; wait: number[] | null; run: number[] | null }>(
    `WITH t AS (SELECT tree_id FROM optchat.trees WHERE session_id = ANY($1::text[])),
     j AS (SELECT extract(epoch FROM started_on - greatest(created_on, start_after, $3::timestamptz)) * 1000 AS wait_ms,
                  extract(epoch FROM completed_on - started_on) * 1000 AS run_ms
             FROM pgboss.job
            WHERE name = $2 AND state = 'completed' AND (data->>'treeId')::bigint IN (SELECT tree_id FROM t))
     SELECT count(*)::int AS jobs,
            percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY wait_ms) AS wait,
            percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY run_ms) AS run
       FROM j`,
    [sessions.map((session) => session.sessionId), NODE_QUEUE, since],
  );
  const row = result.rows[0];
  const ms = (values: number[] | null | undefined) => (values ? values.map((v) => round(Number(v), 1)) : null);
  return { jobs: row?.jobs ?? 0, waitMs: ms(row?.wait), runMs: ms(row?.run) };
}

/**
 * One compactor phase: `live` (worker running while messages arrive) or `backlog` (messages first). `inner` is the
 * summarizer (default the fake); `label` names the phase's sessions, so several live phases can share a database.
 */
export async function runPhase(
  memory: Memory,
  phase: "live" | "backlog",
  settings: Settings,
  messages: number,
  filler: string,
  databaseUrl: string,
  signal: AbortSignal,
  inner: Summarizer = createFakeSummarizer(),
  label: string = phase,
): Promise<PhaseResult | undefined> {
  const sessions = await openSessions(memory, phase, settings.sessions, messages, settings.seed, filler, label);
  const messageBytes = sessions.reduce(
    (sum, s) => sum + s.messages.reduce((total, m) => total + Buffer.byteLength(m.content, "utf8"), 0),
    0,
  );
  const { summarizer, stats } = countingSummarizer(inner);
  const recorder = compactorRecorder();
  const compactorSettings = {
    databaseUrl,
    concurrency: settings.concurrency,
    fold: foldParams(settings),
    failureRetrySeconds: 10,
  };
  let compactor: RunningCompactor | undefined;
  let cpuBefore = process.cpuUsage();
  let buildStartedAt = new Date();
  try {
    let ingestSeconds: number;
    let buildSeconds: number;
    let sealed: number;
    const wallStart = performance.now();
    if (phase === "live") {
      compactor = await startCompactor(memory.pool, compactorSettings, summarizer, recorder.report);
      note(`tree: live phase: ${messages} messages in ${sessions.length} sessions, worker running`);
      cpuBefore = process.cpuUsage();
      buildStartedAt = new Date();
      const start = performance.now();
      sealed = await ingestAll(memory, sessions, signal);
      ingestSeconds = (performance.now() - start) / 1000;
      await waitDrained(memory, sessions, start + settings.drainSeconds * 1000, signal);
      buildSeconds = (performance.now() - start) / 1000;
    } else {
      note(`tree: backlog phase: ${messages} messages in ${sessions.length} sessions, then the worker`);
      const start = performance.now();
      sealed = await ingestAll(memory, sessions, signal);
      ingestSeconds = (performance.now() - start) / 1000;
      cpuBefore = process.cpuUsage();
      buildStartedAt = new Date();
      const buildStart = performance.now();
      compactor = await startCompactor(memory.pool, compactorSettings, summarizer, recorder.report);
      await waitDrained(memory, sessions, buildStart + settings.drainSeconds * 1000, signal);
      buildSeconds = (performance.now() - buildStart) / 1000;
    }
    const wallSeconds = (performance.now() - wallStart) / 1000;
    const cpu = process.cpuUsage(cpuBefore);
    const cpuPct = round(((cpu.user + cpu.system) / 1000 / (buildSeconds * 1000)) * 100, 1);
    if (signal.aborted) return undefined;
    await compactor.stop(10_000);
    compactor = undefined;
    const counts = await countNodes(memory, sessions);
    return {
      phase: label,
      sessions,
      messages,
      sealed,
      messageBytes,
      ingestSeconds,
      buildSeconds,
      wallSeconds,
      stats,
      counts,
      events: recorder.events,
      firstProblem: recorder.first(),
      nodeCpuPct: cpuPct,
      jobs: await jobTimings(memory, sessions, buildStartedAt),
    };
  } finally {
    await compactor?.stop(5000).catch(() => {});
  }
}

async function relationSizes(memory: Memory): Promise<Record<string, number>> {
  const result = await memory.pool.query<Record<string, number>>(
    `SELECT pg_total_relation_size('optchat.view_revisions')::bigint AS view_revisions,
            pg_total_relation_size('optchat.view_parts')::bigint AS view_parts,
            pg_total_relation_size('optchat.nodes')::bigint AS nodes`,
  );
  return result.rows[0] ?? {};
}

export function phaseFields(result: PhaseResult): Record<string, unknown> {
  const { counts, stats, messages } = result;
  const perSession = result.sessions.map((s) => s.messages.length);
  const expectedNodes = perSession.reduce((sum, leaves) => sum + fullTreeNodes(leaves), 0);
  return {
    phase: result.phase,
    messages,
    sessions: result.sessions.length,
    sealed: result.sealed,
    meanMessageBytes: round(result.messageBytes / Math.max(1, messages), 0),
    nodes: counts.nodes,
    expectedNodes,
    complete: counts.nodes === expectedNodes && counts.distinct_nodes === expectedNodes,
    leaves: counts.leaves,
    parents: counts.nodes - counts.leaves,
    modelCalls: stats.calls,
    modelCallsFromNodes: counts.attempts,
    callsPerMessage: ratio(stats.calls, messages),
    callsPerStoredRecord: ratio(stats.calls, messages),
    callsPerNode: ratio(stats.calls, counts.nodes),
    retryCalls: stats.retryCalls,
    freeNodeShare: ratio(counts.free_nodes, counts.nodes),
    freeLeafShare: ratio(counts.free_leaves, counts.leaves),
    freeParentShare: ratio(counts.free_parents, counts.nodes - counts.leaves),
    overshootNodes: counts.overshoot_nodes,
    requestBytes: stats.requestBytes,
    requestBytesPerMessage: round(stats.requestBytes / Math.max(1, messages), 0),
    requestBytesPerCall: stats.calls > 0 ? round(stats.requestBytes / stats.calls, 0) : null,
    contextBytesPerCall: stats.calls > 0 ? round(stats.contextBytes / stats.calls, 0) : null,
    systemPromptBytes: Buffer.byteLength(COMPACT_SYSTEM_PROMPT, "utf8"),
    summarizerBusyMs: round(stats.busyMs, 0),
    viewRevisionsPerMessage: ratio(counts.view_revisions, messages),
    // Fold events are derived from the nodes (migration 005); a revision's parts are rows valid over revisions.
    viewPartRowsPerMessage: ratio(counts.view_parts, messages),
    finalViewLines: counts.final_view_lines,
    finalViewBytes: counts.final_view_bytes,
    events: result.events,
    ...(result.firstProblem ? { firstProblem: result.firstProblem } : {}),
  };
}

interface NoopResult {
  readonly variant: string;
  readonly jobs: number;
  readonly completed: number;
  readonly insertMs: number;
  readonly seconds: number;
  readonly jobsPerSec: number;
  readonly capped: boolean;
}

/** Inserts `jobs` no-op jobs into a fresh queue (the node queue's options) and works them; capped at `seconds`. */
async function noopThroughput(
  memory: Memory,
  databaseUrl: string,
  variant: string,
  jobs: number,
  seconds: number,
  options: Parameters<PgBoss["work"]>[1] & object,
  signal: AbortSignal,
): Promise<NoopResult> {
  const boss = await createBoss(databaseUrl, "worker");
  boss.on("error", (error) => note(`pg-boss (${variant}): ${errorMessage(error)}`));
  await boss.start();
  const queue = `optchat-bench-noop-${variant}`;
  try {
    await boss.createQueue(queue, NODE_QUEUE_OPTIONS);
    const insertStart = performance.now();
    for (let from = 0; from < jobs; from += 1000) {
      const count = Math.min(1000, jobs - from);
      await boss.insert(
        queue,
        Array.from({ length: count }, (_, k) => ({ data: { n: from + k } })),
      );
    }
    const insertMs = performance.now() - insertStart;
    const completedCount = async () => {
      const rows = await memory.pool.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pgboss.job WHERE name = $1 AND state = 'completed'",
        [queue],
      );
      return rows.rows[0]?.n ?? 0;
    };
    const start = performance.now();
    const deadline = start + seconds * 1000;
    await boss.work(queue, options, async () => {});
    let completed = 0;
    for (;;) {
      completed = await completedCount();
      if (completed >= jobs || performance.now() >= deadline || signal.aborted) break;
      await sleep(20);
    }
    const elapsed = (performance.now() - start) / 1000;
    await boss.offWork(queue, { wait: false }).catch(() => {});
    return {
      variant,
      jobs,
      completed,
      insertMs: round(insertMs, 0),
      seconds: round(elapsed, 2),
      jobsPerSec: round(completed / elapsed, 1),
      capped: completed < jobs,
    };
  } finally {
    await boss.stop({ graceful: false, close: true, timeout: 2000 }).catch(() => {});
  }
}

async function compactorCases(context: BenchContext, settings: Settings): Promise<void> {
  if (settings.compactorMessages === 0 && settings.backlogMessages === 0) {
    emit(BENCH, "compactor-inputs", { skipped: "OPTCHAT_BENCH_TREE_COMPACTOR_MESSAGES=0 and BACKLOG_MESSAGES=0" });
    return;
  }
  const configFor = (databaseUrl: string) =>
    resolveConfig({
      overrides: {
        databaseUrl,
        poolSize: Math.max(16, settings.concurrency + 8),
        viewBytes: settings.viewBytes,
        compactorMerges: settings.merges,
      },
    });
  await withScratchMemory(context.serverUrl, "tree", configFor, async (memory, _config, { url: databaseUrl }) => {
    const filler = makeFiller(settings.seed + 17, 400_000);

    let live: PhaseResult | undefined;
    let backlog: PhaseResult | undefined;
    if (settings.compactorMessages > 0) {
      live = await runPhase(memory, "live", settings, settings.compactorMessages, filler, databaseUrl, context.signal);
      if (live) live = { ...live, storage: await relationSizes(memory) };
    }
    if (context.signal.aborted) return;
    if (settings.backlogMessages > 0) {
      backlog = await runPhase(
        memory,
        "backlog",
        settings,
        settings.backlogMessages,
        filler,
        databaseUrl,
        context.signal,
      );
    }
    if (context.signal.aborted) return;

    const first = live ?? backlog;
    if (first) {
      const storage = live?.storage;
      emit(BENCH, "compactor-inputs", {
        summarizer: "fake-extractive/1 (wrapped to count calls and request bytes)",
        note:
          "calls and bytes counted at the Summarizer seam (every request the compactor sends, retries included); " +
          `the context each call carries is capped by the fake's ${createFakeSummarizer().windowBytes}-byte window, ` +
          "a real model with a larger window would get up to the whole view",
        viewBytes: settings.viewBytes,
        concurrency: settings.concurrency,
        ...phaseFields(first),
        ...(storage && live
          ? {
              storageBytesPerMessage: Object.fromEntries(
                Object.entries(storage).map(([table, bytes]) => [table, round(Number(bytes) / live.messages, 0)]),
              ),
            }
          : {}),
        ...(live && backlog ? { backlogPhase: phaseFields(backlog) } : {}),
      });
    }

    if (context.signal.aborted) return;
    await compactorCacheCases({ context, memory, settings, filler, databaseUrl, run: runPhase });
    if (context.signal.aborted) return;

    const noop: NoopResult[] = [];
    if (settings.noopJobs > 0) {
      const base = { localConcurrency: settings.concurrency, includeMetadata: true } as const;
      const variants = [
        {
          variant: "batch1",
          caseName: "pgboss-noop-batch1",
          options: { ...base, batchSize: 1, pollingIntervalSeconds: 1, notifyPollingIntervalSeconds: 5 },
          description: "the compactor's worker options (src/compactor/worker.ts), queue with the node queue's options",
        },
        {
          variant: "batch100",
          caseName: "pgboss-noop-batch100",
          options: {
            ...base,
            batchSize: 100,
            burstWhenBatchFull: true,
            pollingIntervalSeconds: 1,
            notifyPollingIntervalSeconds: 5,
          },
          description: "batchSize 100 with burstWhenBatchFull, otherwise the same",
        },
      ];
      for (const { variant, caseName, options, description } of variants) {
        if (context.signal.aborted) return;
        note(`tree: pg-boss no-op ${variant}: ${settings.noopJobs} jobs, at most ${settings.noopSeconds} s`);
        const result = await noopThroughput(
          memory,
          databaseUrl,
          variant,
          settings.noopJobs,
          settings.noopSeconds,
          options,
          context.signal,
        );
        noop.push(result);
        emit(BENCH, caseName, { description, options, ...result });
      }
    }
    if (context.signal.aborted) return;

    const noopRate = (variant: string) => noop.find((r) => r.variant === variant)?.jobsPerSec;
    const phaseRates = (result: PhaseResult | undefined) =>
      result
        ? {
            messages: result.messages,
            nodes: result.counts.nodes,
            ingestSeconds: round(result.ingestSeconds, 2),
            buildSeconds: round(result.buildSeconds, 2),
            wallSeconds: round(result.wallSeconds, 2),
            nodesPerSec: round(result.counts.nodes / result.buildSeconds, 1),
            messagesPerSec: round(result.messages / result.buildSeconds, 1),
            nodeCpuPct: result.nodeCpuPct,
            jobWaitMsP50P90P99: result.jobs.waitMs,
            jobRunMsP50P90P99: result.jobs.runMs,
            vsNoopBatch1: ratio(result.counts.nodes / result.buildSeconds, noopRate("batch1")),
            vsNoopBatch100: ratio(result.counts.nodes / result.buildSeconds, noopRate("batch100")),
          }
        : null;
    emit(BENCH, "compactor-throughput", {
      concurrency: settings.concurrency,
      sessions: settings.sessions,
      live: live
        ? { measured: "first ingest to drained queue (worker running throughout)", ...phaseRates(live) }
        : null,
      backlog: backlog
        ? { measured: "worker start to drained queue (messages ingested before)", ...phaseRates(backlog) }
        : null,
      noopJobsPerSec: { batch1: noopRate("batch1") ?? null, batch100: noopRate("batch100") ?? null },
      noopBatch100VsBatch1: ratio(noopRate("batch100"), noopRate("batch1")),
    });
  });
}

export async function runTreeBench(context: BenchContext): Promise<void> {
  const settings = readSettings();
  emit(BENCH, "machine", { ...context.machine, settings });
  note(`tree: fold-from-scratch (${settings.foldMessages} messages × ${settings.foldRuns + 2} runs)`);
  foldFromScratch(settings);
  if (context.signal.aborted) return;
  note(`tree: fold-incremental (${settings.messages} messages)`);
  foldIncremental(settings);
  if (context.signal.aborted) return;
  note(`tree: view-prefix-sharing (${settings.messages} messages, rendered after each)`);
  viewPrefixSharing(settings);
  if (context.signal.aborted) return;
  await compactorCases(context, settings);
}
