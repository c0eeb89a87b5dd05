/** `bench tree`'s fold cases: fold-from-scratch, fold-incremental, view-prefix-sharing (pure, no database). */
import { applyFoldEvent, EMPTY_FOLD, type FoldParams, type FoldState, type NodeBytes } from "../../../src/core/fold.js";
import { type NodeAddress, refOf } from "../../../src/core/tree.js";
import { emit, mean, median, nearestRank, ratio, round, summarizeMicros } from "../common.js";
import {
  BENCH,
  SEED_REFOLD_MESSAGES,
  SEED_REFOLD_MS,
  SEED_SHARED_CHARS_AT_20K,
  SEED_VIEW_CHARS,
  type Settings,
} from "./settings.js";
import { SizeModel, TextModel } from "./synthetic.js";

export function foldParams(settings: Settings): FoldParams {
  // The product default: OPTCHAT_VIEW_LOWER_BYTES 0 means lower = upper.
  return {
    upperBytes: settings.viewBytes,
    lowerBytes: settings.viewBytes,
    ...(settings.merges === "all" ? { merges: "all" as const } : {}),
  };
}

/** Appends `messages` leaves in order with every node built; returns the final state and the merges made. */
export function refold(sizes: SizeModel, messages: number, params: FoldParams): { state: FoldState; merges: number } {
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

export function foldFromScratch(settings: Settings): void {
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
  // Never null: foldRuns ≥ 1.
  const medianMs = median(measured) ?? 0;
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

export function viewBytesOf(parts: readonly NodeAddress[], bytesOf: NodeBytes): number {
  let total = 0;
  for (const part of parts) total += (bytesOf(part) ?? 0) + `${refOf(part)}|`.length + 1;
  return total;
}

export function foldIncremental(settings: Settings): void {
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
 * One message with the compactor keeping up: appended, its leaf built at once, then every parent it completes
 * (readiness: both children built, leaves in order), each event folded as the store does.
 */
function foldMessage(
  state: FoldState,
  i: number,
  built: Uint8Array[],
  bytesOf: NodeBytes,
  params: FoldParams,
): { state: FoldState; merges: number; events: number } {
  let result = applyFoldEvent(state, { type: "append", index: i }, bytesOf, params);
  let merges = result.merged.length;
  (built[0] as Uint8Array)[i] = 1;
  result = applyFoldEvent(result.state, { type: "built", node: { level: 0, index: i } }, bytesOf, params);
  merges += result.merged.length;
  let events = 2;
  for (let level = 1; (i + 1) % 2 ** level === 0; level++) {
    const node = { level, index: (i + 1) / 2 ** level - 1 };
    (built[level] as Uint8Array)[node.index] = 1;
    result = applyFoldEvent(result.state, { type: "built", node }, bytesOf, params);
    merges += result.merged.length;
    events += 1;
  }
  return { state: result.state, merges, events };
}

interface Render {
  readonly parts: readonly NodeAddress[];
  readonly lengths: number[];
  readonly chars: number;
}

/** The characters a render shares with the one before it (its common prefix), and whether it only appended. */
function sharedWith(previous: Render, next: Render, texts: TextModel): { common: number; appendOnly: boolean } {
  const old = previous.parts;
  const { parts, lengths } = next;
  let k = 0;
  let prefix = 0;
  while (k < old.length && k < parts.length) {
    const a = old[k] as NodeAddress;
    const b = parts[k] as NodeAddress;
    if (a.level !== b.level || a.index !== b.index) break;
    prefix += (lengths[k] as number) + 1;
    k += 1;
  }
  // The old render is a prefix of the new one.
  if (k === old.length) return { common: previous.chars, appendOnly: true };
  if (k === parts.length) return { common: next.chars, appendOnly: false };
  const a = texts.line(old[k] as NodeAddress);
  const b = texts.line(parts[k] as NodeAddress);
  let c = 0;
  while (c < a.length && c < b.length && a.charCodeAt(c) === b.charCodeAt(c)) c += 1;
  return { common: prefix + c, appendOnly: false };
}

/** What the replay measured, per message (see `viewPrefixSharing`). */
interface PrefixSeries {
  readonly shared: Float64Array;
  readonly sharedFraction: Float64Array;
  readonly viewChars: Float64Array;
  readonly viewLines: Float64Array;
  readonly foldMs: Float64Array;
  readonly appendOnly: number;
  readonly events: number;
  readonly merges: number;
  readonly fullAt: number | null;
}

/** Replays the messages, rendering the view after each (one line per part, joined by newlines). */
function replayRenders(n: number, sizes: SizeModel, texts: TextModel, params: FoldParams): PrefixSeries {
  const built = sizes.levels.map((row) => new Uint8Array(row.length));
  const bytesOf: NodeBytes = (node) => (built[node.level]?.[node.index] === 1 ? sizes.bytes(node) : undefined);
  const series = {
    shared: new Float64Array(n - 1),
    sharedFraction: new Float64Array(n - 1),
    viewChars: new Float64Array(n),
    viewLines: new Float64Array(n),
    foldMs: new Float64Array(n),
  };
  let appendOnly = 0;
  let events = 0;
  let merges = 0;
  let state = EMPTY_FOLD;
  let previous: Render | undefined;
  let fullAt: number | null = null;
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const folded = foldMessage(state, i, built, bytesOf, params);
    series.foldMs[i] = performance.now() - t0;
    ({ state } = folded);
    merges += folded.merges;
    events += folded.events;
    if (fullAt === null && merges > 0) fullAt = i;
    const parts = state.parts;
    const lengths = parts.map((part) => texts.line(part).length);
    const render = {
      parts,
      lengths,
      chars: lengths.reduce((sum, length) => sum + length, Math.max(0, parts.length - 1)),
    };
    series.viewChars[i] = render.chars;
    series.viewLines[i] = parts.length;
    if (previous) {
      const { common, appendOnly: appended } = sharedWith(previous, render, texts);
      if (appended) appendOnly += 1;
      series.shared[i - 1] = common;
      series.sharedFraction[i - 1] = previous.chars > 0 ? common / previous.chars : 1;
    }
    previous = render;
  }
  return { ...series, appendOnly, events, merges, fullAt };
}

/**
 * Replays `messages` with the compactor keeping up: each message is appended, its leaf built at once, then every
 * parent it completes (readiness: both children built, leaves in order). Every event is folded, as the store does.
 * After each message the view is rendered and compared with the previous render.
 */
export function viewPrefixSharing(settings: Settings): void {
  const n = settings.messages;
  const sizes = new SizeModel(n, settings.seed);
  const texts = new TextModel(sizes);
  const { shared, sharedFraction, viewChars, viewLines, foldMs, appendOnly, events, merges, fullAt } = replayRenders(
    n,
    sizes,
    texts,
    foldParams(settings),
  );
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
