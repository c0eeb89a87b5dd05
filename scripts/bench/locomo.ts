/**
 * `bench locomo`: LoCoMo-10 (snap-research/locomo, /work/shared/data/locomo10) through the real path, scored without
 * a model: does `search` with a question's text return the question's evidence turns, and how many zooms does an
 * oracle need from the shared view down to them.
 *
 * Modelling (decided here, reported in the `build` case):
 *   - one scope per conversation file (`project:locomo-<file>`): its questions are about that conversation only, and
 *     ten unrelated couples in one scope would only add noise (OPTCHAT_BENCH_LOCOMO_ONE_SCOPE=1 puts all in one scope);
 *   - each LoCoMo session is one optchat session of that scope, in session order;
 *   - each dialogue turn is one record: kind "user" when said by speaker_a, "assistant" when said by speaker_b; the
 *     content is "<speaker name>: <text>", followed by " [shares a photo: <blip_caption>]" when the turn shared an
 *     image (the caption is the only trace of the photo in the data);
 *   - consecutive dialogue turns are grouped into optchat turns of TURN_SIZE records (default 2, about one exchange;
 *     the last group of a session may be shorter), each admitted, ingested with one `ingestMany`, finished
 *     "completed", and so published once the compactor has summarized it;
 *   - timestamps: the session's `session_N_date_time` (read as UTC) plus 30 s per dialogue turn;
 *   - the real compactor (`startWorker`, fake extractive summarizer) runs during the ingest and is drained after it.
 *
 * Scoring, from a reader session opened in each scope after the build (one admitted turn, so its snapshot holds
 * every publication):
 *   - evidence: the question's `evidence` dia_ids, normalized ("D30:05" -> D30:5, "D:11:26" -> D11:26, several ids in
 *     one string split); questions without evidence or with an id that names no turn are left out and counted;
 *   - search: `search(ctx, { query: <question text>, limit: 10 })`, top 5 = its first 5 hits. A hit finds an evidence
 *     record exactly when it is that record (a "message" hit); it covers it when it is that record or a summary line
 *     whose range contains it (a session line of its session, or a shared line whose publications include the
 *     record's turn). recall@k "all" = share of questions whose every evidence record is found in the top k; "any" =
 *     share with at least one. Reported for exact and covering, overall and per category;
 *   - `search-recall` asks for every word (match "all"), so a question is found only when all its
 *     words, "what", "did" and "the" included, occur in one record or summary; `termsCoverage` reports how often the
 *     question's terms all occur in its evidence text at all (tokenized as search does), to explain the figures;
 *   - `memory-search` (k 5 and k 10): the product's path exactly as the plugin's memory_search calls it (match "any",
 *     limit 10): evidenceRecall (an evidence record as a "message" hit in the top k, for at least one of the
 *     question's evidence records), coveringRecall (a covering summary counted too), next to bm25EvidenceRecall: the
 *     bench's own Okapi BM25 over the conversation's verbatim turns (scripts/bench/bm25-baseline.ts, nothing shared
 *     with src/), the reference the targets are set against;
 *   - a second, diagnostic case (`search-recall-keywords`) queries the question's terms minus a fixed list of English
 *     function words, as a model writing a keyword query might; it is not the product's behaviour and tunes nothing;
 *   - oracle zoom walk, per evidence record: assemble the reader's context (waitMs 0), take the shared view line whose
 *     range contains the record's publication, zoom down the shared tree to that publication (`pub:i+1`, which
 *     returns its session cover), then down the cover line containing the record to the record itself; every
 *     `zoom` call counts, the last one (which returns the record's text) included. Averaged per evidence record and
 *     per question (independent walks for each of its records, summed). For a 200k and a 32k window.
 *
 * Environment:
 *   OPTCHAT_BENCH_LOCOMO_DATA            the data folder (default /work/shared/data/locomo10)
 *   OPTCHAT_BENCH_LOCOMO_CONVERSATIONS   how many conversation files, in name order (default all)
 *   OPTCHAT_BENCH_LOCOMO_TURN_SIZE       dialogue turns per optchat turn (default 2)
 *   OPTCHAT_BENCH_LOCOMO_ONE_SCOPE       1: every conversation in one scope (default 0: a scope per conversation)
 *   OPTCHAT_BENCH_LOCOMO_CONCURRENCY     compactor worker concurrency (default 8, the product default)
 *   OPTCHAT_BENCH_LOCOMO_DRAIN_SECONDS   longest wait for the compactor after the ingest (default 600)
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { queryGroups, tokenize } from "../../src/core/tokenize.js";
import type { AssembleOptions } from "../../src/memory/assembly.js";
import { resolveConfig } from "../../src/memory/config.js";
import type { TurnContext } from "../../src/memory/reader.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import type { Memory } from "../../src/memory/service.js";
import type { SearchAnswer } from "../../src/memory/shared.js";
import { type RunningCompactor, startWorker } from "../../src/memory/worker.js";
import { bm25Index } from "./bm25-baseline.js";
import {
  type BenchContext,
  compactorRecorder,
  emit,
  envNumber,
  note,
  round,
  summarizeLatencies,
  withScratchMemory,
} from "./common.js";
import {
  blockRefs,
  buildState,
  databaseBytes,
  mapLimit,
  rangeOf,
  treeCounts,
  WINDOW_32K,
  WINDOW_200K,
  waitForCompactor,
} from "./shared.js";

const BENCH = "locomo";
const DEFAULT_DATA = "/work/shared/data/locomo10";
const SECONDS_PER_DIALOGUE_TURN = 30;

interface Settings {
  readonly data: string;
  readonly conversations: number;
  readonly turnSize: number;
  readonly oneScope: boolean;
  readonly concurrency: number;
  readonly drainSeconds: number;
}

function readSettings(): Settings {
  const data = process.env.OPTCHAT_BENCH_LOCOMO_DATA;
  return {
    data: data && data.trim() !== "" ? data : DEFAULT_DATA,
    conversations: envNumber("OPTCHAT_BENCH_LOCOMO_CONVERSATIONS", 0, { integer: true }),
    turnSize: envNumber("OPTCHAT_BENCH_LOCOMO_TURN_SIZE", 2, { min: 1, integer: true }),
    oneScope: envNumber("OPTCHAT_BENCH_LOCOMO_ONE_SCOPE", 0, { integer: true }) === 1,
    concurrency: envNumber("OPTCHAT_BENCH_LOCOMO_CONCURRENCY", 8, { min: 1, integer: true }),
    drainSeconds: envNumber("OPTCHAT_BENCH_LOCOMO_DRAIN_SECONDS", 600, { min: 1 }),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// The data

interface DialogueTurn {
  readonly speaker: string;
  readonly dia_id: string;
  readonly text: string;
  readonly blip_caption?: string;
}

interface Question {
  readonly question: string;
  readonly answer?: unknown;
  readonly evidence?: readonly string[];
  readonly category: number;
}

interface LocomoSession {
  readonly number: number;
  readonly startsAt: Date;
  readonly turns: readonly DialogueTurn[];
}

interface Conversation {
  readonly name: string;
  readonly speakerA: string;
  readonly speakerB: string;
  readonly sessions: readonly LocomoSession[];
  readonly questions: readonly Question[];
}

const MONTHS = [
  "january",
  "february",
  "march",
  "april",
  "may",
  "june",
  "july",
  "august",
  "september",
  "october",
  "november",
  "december",
];

/** "1:56 pm on 8 May, 2023" as UTC. */
function parseSessionDate(text: string): Date {
  const match = /^(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})$/i.exec(text.trim());
  const month = match ? MONTHS.indexOf((match[5] as string).toLowerCase()) : -1;
  if (!match || month < 0) throw new Error(`unrecognized LoCoMo session date ${JSON.stringify(text)}`);
  const hour = (Number(match[1]) % 12) + ((match[3] as string).toLowerCase() === "pm" ? 12 : 0);
  return new Date(Date.UTC(Number(match[6]), month, Number(match[4]), hour, Number(match[2])));
}

function loadConversations(settings: Settings): Conversation[] {
  const files = readdirSync(settings.data)
    .filter((name) => name.endsWith(".json"))
    .sort((a, b) => a.localeCompare(b, "en", { numeric: true }));
  const chosen = settings.conversations > 0 ? files.slice(0, settings.conversations) : files;
  return chosen.map((file) => {
    const raw = JSON.parse(readFileSync(join(settings.data, file), "utf8")) as Record<string, unknown>;
    const sessions: LocomoSession[] = Object.keys(raw)
      .map((key) => /^session_(\d+)$/.exec(key))
      .filter((match): match is RegExpExecArray => match !== null)
      .map((match) => Number(match[1]))
      .sort((a, b) => a - b)
      .map((number) => ({
        number,
        startsAt: parseSessionDate(String(raw[`session_${number}_date_time`])),
        turns: raw[`session_${number}`] as DialogueTurn[],
      }))
      .filter((session) => session.turns.length > 0);
    return {
      name: file.replace(/\.json$/, ""),
      speakerA: String(raw.speaker_a),
      speakerB: String(raw.speaker_b),
      sessions,
      questions: raw.qa as Question[],
    };
  });
}

/** Evidence ids as written ("D30:05", "D:11:26", "D9:1 D4:4", "D8:6; D9:17") normalized to "D<session>:<turn>". */
function normalizeEvidence(evidence: readonly string[] | undefined): { ids: string[]; malformed: number } {
  const ids: string[] = [];
  let malformed = 0;
  for (const entry of evidence ?? []) {
    const found = [...entry.matchAll(/D:?(\d+):(\d+)/g)].map((m) => `D${Number(m[1])}:${Number(m[2])}`);
    if (found.length === 0) malformed += 1;
    ids.push(...found);
  }
  return { ids: [...new Set(ids)], malformed };
}

function recordText(turn: DialogueTurn): string {
  const caption = turn.blip_caption ? ` [shares a photo: ${turn.blip_caption}]` : "";
  return `${turn.speaker}: ${turn.text}${caption}`;
}

// ---------------------------------------------------------------------------------------------------------------
// Build

/** Where a dialogue turn ended up. */
interface Placed {
  readonly sessionId: string;
  readonly generation: number;
  readonly seq: number;
  readonly text: string;
  /** Filled after the build: the publication number of its optchat turn. */
  publication: number;
}

interface BuiltConversation {
  readonly conversation: Conversation;
  readonly scopeId: string;
  /** dia_id -> where it is. */
  readonly placed: Map<string, Placed>;
  readonly turns: number;
  readonly records: number;
}

async function ingestConversation(
  memory: Memory,
  conversation: Conversation,
  settings: Settings,
): Promise<BuiltConversation> {
  const projectId = settings.oneScope ? "locomo" : `locomo-${conversation.name}`;
  const placed = new Map<string, Placed>();
  let turns = 0;
  let records = 0;
  for (const session of conversation.sessions) {
    const hostSessionId = `locomo-${conversation.name}-session-${session.number}`;
    const opened = await memory.openSession({
      host: "bench",
      hostSessionId,
      projectId,
      title: `LoCoMo ${conversation.name} session ${session.number}: ${conversation.speakerA} and ${conversation.speakerB}`,
    });
    for (let from = 0; from < session.turns.length; from += settings.turnSize) {
      const group = session.turns.slice(from, from + settings.turnSize);
      const ctx: TurnContext = { sessionId: opened.sessionId, turnId: `t${from / settings.turnSize}` };
      await memory.admitTurn({ ...ctx, query: recordText(group[0] as DialogueTurn) });
      const events: IngestEvent[] = group.map((turn, k) => ({
        sessionId: opened.sessionId,
        turnId: ctx.turnId,
        kind: turn.speaker === conversation.speakerA ? "user" : "assistant",
        finalization: { hostSessionId, messageId: turn.dia_id },
        occurredAt: new Date(session.startsAt.getTime() + (from + k) * SECONDS_PER_DIALOGUE_TURN * 1000).toISOString(),
        content: recordText(turn),
      }));
      const results = await memory.ingestMany(events);
      results.forEach((result, k) => {
        const turn = group[k] as DialogueTurn;
        if (result.status !== "sealed" || !("seq" in result))
          throw new Error(`${conversation.name} ${turn.dia_id}: not sealed (${result.status})`);
        placed.set(turn.dia_id, {
          sessionId: result.sessionId,
          generation: result.generation,
          seq: result.seq,
          text: recordText(turn),
          publication: -1,
        });
      });
      await memory.finishTurn(ctx, "completed");
      turns += 1;
      records += group.length;
    }
  }
  return { conversation, scopeId: `project:${projectId}`, placed, turns, records };
}

/** The oracle's bookkeeping: the publication number of every placed record, read from the publications table. */
async function attachPublications(memory: Memory, built: readonly BuiltConversation[]): Promise<void> {
  const result = await memory.pool.query<{
    scope_id: string;
    publication_seq: number;
    session_id: string;
    start_seq: number;
    end_seq_exclusive: number;
  }>("SELECT scope_id, publication_seq, session_id, start_seq, end_seq_exclusive FROM optchat.publications");
  const bySession = new Map<string, { seq: number; start: number; end: number }[]>();
  for (const row of result.rows) {
    const list = bySession.get(row.session_id) ?? [];
    list.push({ seq: Number(row.publication_seq), start: Number(row.start_seq), end: Number(row.end_seq_exclusive) });
    bySession.set(row.session_id, list);
  }
  for (const conversation of built) {
    for (const [diaId, place] of conversation.placed) {
      const publication = bySession.get(place.sessionId)?.find((p) => place.seq >= p.start && place.seq < p.end);
      if (!publication) throw new Error(`${conversation.conversation.name} ${diaId}: no publication covers it`);
      place.publication = publication.seq;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Scoring

interface Tally {
  questions: number;
  /** Counts by key: "zeroHits", and "<k>:<exact|covering>:<all|any>". */
  counts: Record<string, number>;
}

function newTally(): Tally {
  return { questions: 0, counts: {} };
}

function bump(tally: Tally, key: string): void {
  tally.counts[key] = (tally.counts[key] ?? 0) + 1;
}

function recallOf(tally: Tally): Record<string, unknown> {
  const share = (key: string) => (tally.questions > 0 ? round((tally.counts[key] ?? 0) / tally.questions, 4) : null);
  const out: Record<string, unknown> = { questions: tally.questions, zeroHitShare: share("zeroHits") };
  for (const k of [5, 10]) {
    out[`recall@${k}`] = {
      exact: { all: share(`${k}:exact:all`), any: share(`${k}:exact:any`) },
      covering: { all: share(`${k}:covering:all`), any: share(`${k}:covering:any`) },
    };
  }
  return out;
}

/** Which of the evidence records a hit finds exactly, and which it covers. */
function hitMatches(
  hit: SearchAnswer["hits"][number],
  evidence: readonly Placed[],
): { exact: Set<number>; covering: Set<number> } {
  const exact = new Set<number>();
  const covering = new Set<number>();
  const { start, count } = rangeOf(hit.ref);
  evidence.forEach((place, k) => {
    if (hit.source === "shared summary") {
      if (place.publication >= start && place.publication < start + count) covering.add(k);
    } else if (hit.sessionId === place.sessionId && place.seq >= start && place.seq < start + count) {
      covering.add(k);
      if (hit.source === "message") exact.add(k);
    }
  });
  return { exact, covering };
}

interface WalkResult {
  readonly zooms: number;
  readonly sharedZooms: number;
  readonly coverZooms: number;
  readonly reached: boolean;
  readonly problem?: string;
}

/**
 * The oracle walk for one evidence record: from the shared view line holding its publication, down the shared tree
 * to the publication, then down the cover line holding the record to the record. Counts every zoom call.
 */
async function walkTo(memory: Memory, ctx: TurnContext, sharedLines: readonly string[], place: Placed) {
  let zooms = 0;
  let sharedZooms = 0;
  let coverZooms = 0;
  const fail = (problem: string): WalkResult => ({ zooms, sharedZooms, coverZooms, reached: false, problem });
  const contains = (ref: string, at: number) => {
    const { start, count } = rangeOf(ref);
    return at >= start && at < start + count;
  };
  /** Zooms from `from` down to the one-unit ref holding `at` (`what` names it); the ref reached, or the problem. */
  const descend = async (
    from: string,
    at: number,
    what: string,
    counted: () => void,
  ): Promise<{ ref: string } | { problem: string }> => {
    let ref = from;
    while (rangeOf(ref).count > 1) {
      const answer = await memory.zoom(ctx, ref);
      zooms += 1;
      counted();
      if (answer.kind !== "lines") return { problem: `${ref}: expected lines, got ${answer.kind}` };
      const next: string | undefined = answer.lines.find((line) => contains(line.ref, at))?.ref;
      if (!next) return { problem: `${ref}: no child holds ${what}` };
      ref = next;
    }
    return { ref };
  };
  const viewLine = sharedLines.find((line) => contains(line, place.publication));
  if (!viewLine) return fail("no shared view line holds its publication");
  const toPublication = await descend(viewLine, place.publication, `publication ${place.publication}`, () => {
    sharedZooms += 1;
  });
  if ("problem" in toPublication) return fail(toPublication.problem);
  const { ref } = toPublication;
  const publication = await memory.zoom(ctx, ref);
  zooms += 1;
  if (publication.kind !== "publication") return fail(`${ref}: expected a publication, got ${publication.kind}`);
  const coverLine = publication.cover.find((l) => contains(l.ref, place.seq))?.ref;
  if (!coverLine) return fail(`${ref}: no cover line holds seq ${place.seq}`);
  const toRecord = await descend(coverLine, place.seq, `seq ${place.seq}`, () => {
    coverZooms += 1;
  });
  if ("problem" in toRecord) return fail(toRecord.problem);
  const line = toRecord.ref;
  const message = await memory.zoom(ctx, line);
  zooms += 1;
  if (message.kind !== "message") return fail(`${line}: expected a message, got ${message.kind}`);
  if (message.text !== place.text) return fail(`${line}: the message is not the evidence text`);
  return { zooms, sharedZooms, coverZooms, reached: true };
}

function mean(values: readonly number[]): number | null {
  return values.length > 0 ? round(values.reduce((a, b) => a + b, 0) / values.length, 3) : null;
}

function distribution(values: readonly number[]): Record<string, number | null> {
  if (values.length === 0) return { mean: null, median: null, p90: null, max: null };
  const sorted = [...values].sort((a, b) => a - b);
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? 0;
  return { mean: mean(values), median: at(0.5), p90: at(0.9), max: sorted[sorted.length - 1] ?? 0 };
}

/**
 * Function words left out of the diagnostic keyword queries: a fixed English list chosen before looking at any figure
 * (articles, pronouns, auxiliaries, prepositions, question words), never derived from the data.
 */
const FUNCTION_WORDS = new Set(
  (
    "a an the and or but if of to in on at by for with about from into onto over under as than then so such " +
    "is are was were be been being am do does did doing has have had having will would can could shall should may " +
    "might must what when where who whom whose which why how that this these those it its he she they them his her " +
    "hers their theirs i me my mine you your yours we us our ours him not no nor there here s t any some all both " +
    "each other also ever very just"
  ).split(" "),
);

/** The question's search terms without function words, joined by spaces (undefined when none is left). */
function keywordQuery(question: string): string | undefined {
  const words = queryGroups(question)
    .filter((group) => group.length > 1 || !FUNCTION_WORDS.has(group[0] as string))
    // A CJK phrase is its overlapping bigrams: rebuild the run from the first bigram and each next one's last character.
    .map(
      (group) =>
        group[0] +
        group
          .slice(1)
          .map((bigram) => Array.from(bigram).slice(-1).join(""))
          .join(""),
    );
  return words.length > 0 ? words.join(" ") : undefined;
}

interface Variant {
  readonly name: "question" | "keywords" | "any";
  readonly query: (question: string) => string | undefined;
  readonly match?: "all" | "any";
  readonly overall: Tally;
  readonly byCategory: Map<number, Tally>;
  readonly ms: number[];
  /** Hits returned (top 10) by source: message, summary, shared summary. */
  readonly sources: Record<string, number>;
  skipped: number;
}

async function score(memory: Memory, built: readonly BuiltConversation[], signal: AbortSignal): Promise<void> {
  const variants: Variant[] = [
    { name: "question", query: (q) => q, overall: newTally(), byCategory: new Map(), ms: [], sources: {}, skipped: 0 },
    {
      name: "keywords",
      query: keywordQuery,
      overall: newTally(),
      byCategory: new Map(),
      ms: [],
      sources: {},
      skipped: 0,
    },
    {
      name: "any",
      query: (q) => q,
      match: "any",
      overall: newTally(),
      byCategory: new Map(),
      ms: [],
      sources: {},
      skipped: 0,
    },
  ];
  const scored = { questions: 0 };
  const zoomMs: number[] = [];
  let noEvidence = 0;
  let unresolved = 0;
  let malformedIds = 0;
  let allTermsInEvidence = 0;
  let termShareSum = 0;
  const questionTerms: number[] = [];
  const walks = new Map<string, { perRecord: WalkResult[]; perQuestion: number[] }>();
  // The bench's own BM25 over each conversation's verbatim turns (scripts/bench/bm25-baseline.ts): questions with an
  // evidence turn in its top k.
  const bm25Found = { 5: 0, 10: 0 } as Record<number, number>;
  const readers = new Map<string, TurnContext>();

  for (const conversation of built) {
    if (signal.aborted) return;
    // One reader per scope (a single one when every conversation shares the scope).
    let ctx = readers.get(conversation.scopeId);
    if (!ctx) {
      const reader = await memory.openSession({
        host: "bench",
        hostSessionId: `locomo-reader-${readers.size}`,
        projectId: conversation.scopeId.slice("project:".length),
        title: "LoCoMo questions",
      });
      ctx = { sessionId: reader.sessionId, turnId: "questions" };
      await memory.admitTurn({ ...ctx, query: "LoCoMo questions" });
      readers.set(conversation.scopeId, ctx);
    }
    const turnsInOrder = [...conversation.placed.values()];
    const baseline = bm25Index(turnsInOrder.map((place) => place.text));
    const sharedLines = new Map<string, string[]>();
    for (const [name, window] of [
      ["200k", WINDOW_200K],
      ["32k", WINDOW_32K],
    ] as const) {
      const assembled = await memory.assembleContext(ctx, { ...window, waitMs: 0 } satisfies AssembleOptions);
      sharedLines.set(name, blockRefs(assembled.blocks.find((b) => b.name === "shared_memory")?.text ?? "", "pub:"));
    }
    for (const question of conversation.conversation.questions) {
      if (signal.aborted) return;
      const { ids, malformed } = normalizeEvidence(question.evidence);
      malformedIds += malformed;
      if (ids.length === 0) {
        noEvidence += 1;
        continue;
      }
      const evidence = ids.map((id) => conversation.placed.get(id));
      if (evidence.some((place) => place === undefined)) {
        unresolved += 1;
        continue;
      }
      const places = evidence as Placed[];
      scored.questions += 1;

      // Why search can or cannot find it: the question's terms against the evidence text, tokenized like search.
      const terms = queryGroups(question.question).flat();
      const evidenceTerms = new Set(places.flatMap((place) => tokenize(place.text).map((token) => token.term)));
      const present = terms.filter((term) => evidenceTerms.has(term)).length;
      questionTerms.push(terms.length);
      termShareSum += terms.length > 0 ? present / terms.length : 0;
      if (terms.length > 0 && present === terms.length) allTermsInEvidence += 1;

      const baselineTop = baseline.top(question.question, 10).map((index) => turnsInOrder[index]);
      for (const k of [5, 10])
        if (baselineTop.slice(0, k).some((place) => places.includes(place as Placed)))
          bm25Found[k] = (bm25Found[k] ?? 0) + 1;

      for (const variant of variants) {
        const query = variant.query(question.question);
        if (query === undefined) {
          variant.skipped += 1;
          continue;
        }
        const category = variant.byCategory.get(question.category) ?? newTally();
        variant.byCategory.set(question.category, category);
        const start = performance.now();
        const answer = await memory.search(ctx, { query, limit: 10, match: variant.match ?? "all" });
        variant.ms.push(performance.now() - start);
        for (const hit of answer.hits) variant.sources[hit.source] = (variant.sources[hit.source] ?? 0) + 1;
        for (const tally of [variant.overall, category]) {
          tally.questions += 1;
          if (answer.hits.length === 0) bump(tally, "zeroHits");
        }
        for (const k of [5, 10]) {
          const exact = new Set<number>();
          const covering = new Set<number>();
          for (const hit of answer.hits.slice(0, k)) {
            const matched = hitMatches(hit, places);
            for (const i of matched.exact) exact.add(i);
            for (const i of matched.covering) covering.add(i);
          }
          for (const [definition, found] of [
            ["exact", exact],
            ["covering", covering],
          ] as const) {
            for (const tally of [variant.overall, category]) {
              if (found.size === places.length) bump(tally, `${k}:${definition}:all`);
              if (found.size > 0) bump(tally, `${k}:${definition}:any`);
            }
          }
        }
      }

      for (const [name, lines] of sharedLines) {
        const entry = walks.get(name) ?? { perRecord: [], perQuestion: [] };
        walks.set(name, entry);
        let sum = 0;
        for (const place of places) {
          const walkStart = performance.now();
          const walk = await walkTo(memory, ctx, lines, place);
          zoomMs.push((performance.now() - walkStart) / Math.max(1, walk.zooms));
          entry.perRecord.push(walk);
          sum += walk.zooms;
        }
        entry.perQuestion.push(sum);
      }
    }
  }

  const totalQuestions = built.reduce((sum, c) => sum + c.conversation.questions.length, 0);
  const definitions = {
    exact: "a 'message' hit that is the evidence record itself",
    covering: "the record itself, or a summary line (session or shared) whose range contains it",
    all: "every evidence record of the question is found in the top k",
    any: "at least one evidence record of the question is found in the top k",
  };
  for (const variant of variants) {
    const caseName = { question: "search-recall", keywords: "search-recall-keywords", any: "search-recall-any" }[
      variant.name
    ];
    emit(BENCH, caseName, {
      query: {
        question: "the question text verbatim, every word required, limit 10 (top 5 = first 5 hits)",
        keywords:
          "DIAGNOSTIC, not the product's behaviour: the question's terms minus a fixed list of English function " +
          "words (as a model writing a keyword query might), limit 10",
        any:
          "the question text verbatim with match 'any', limit 10: exactly what the memory_search tool calls by " +
          "default (a bag of words ranked by BM25, distinct places)",
      }[variant.name],
      definitions,
      questionsInData: totalQuestions,
      questionsScored: scored.questions,
      leftOut: { noEvidence, evidenceNamesNoTurn: unresolved, malformedEvidenceEntries: malformedIds },
      ...(variant.skipped > 0 ? { noKeywordsLeft: variant.skipped } : {}),
      ...recallOf(variant.overall),
      hitsBySource: variant.sources,
      byCategory: Object.fromEntries(
        [...variant.byCategory]
          .sort(([a], [b]) => a - b)
          .map(([category, tally]) => [String(category), recallOf(tally)]),
      ),
      categoryNote:
        "the data's `category` numbers; papers label them differently (5 is the adversarial set, whose questions " +
        "often name the other speaker)",
      ...(variant.name === "question"
        ? {
            termsCoverage: {
              meanQuestionTerms: mean(questionTerms),
              meanShareOfQuestionTermsInEvidence: round(termShareSum / Math.max(1, scored.questions), 4),
              questionsWithAllTermsInEvidence: round(allTermsInEvidence / Math.max(1, scored.questions), 4),
              note: "search requires every query term in one record or summary (AND); this is how often the evidence alone has them all",
            },
          }
        : {}),
      searchLatency: summarizeLatencies(variant.ms),
    });
  }

  // The product's path as the plugin calls it (match any, limit 10) next to the bench's own BM25 over the turns.
  const tool = variants.find((variant) => variant.name === "any") as Variant;
  for (const k of [5, 10]) {
    const share = (key: string) => round((tool.overall.counts[key] ?? 0) / Math.max(1, tool.overall.questions), 4);
    emit(BENCH, "memory-search", {
      k,
      evidenceRecall: share(`${k}:exact:any`),
      coveringRecall: share(`${k}:covering:any`),
      bm25EvidenceRecall: round((bm25Found[k] ?? 0) / Math.max(1, scored.questions), 4),
      evidenceRecallAll: share(`${k}:exact:all`),
      questions: scored.questions,
      searchLatency: summarizeLatencies(tool.ms),
      definitions: {
        evidenceRecall: "share of questions with at least one evidence record as a 'message' hit in the top k",
        coveringRecall: "the same, a summary hit whose range contains an evidence record also counted",
        bm25EvidenceRecall:
          "Okapi BM25 (k1 1.2, b 0.75, Latin words + CJK bigrams, no stop words or stemming) over the conversation's verbatim turns, the bench's own implementation: an evidence turn in its top k",
      },
    });
  }

  for (const [name, entry] of walks) {
    const reached = entry.perRecord.filter((w) => w.reached);
    const problems = entry.perRecord.filter((w) => !w.reached);
    emit(BENCH, "oracle-zoom", {
      window: name,
      walk:
        "shared view line holding the publication -> zoom down the shared tree -> pub:i+1 (publication and cover) -> " +
        "zoom down the cover line -> the record (every zoom call counted, the last included)",
      evidenceRecords: entry.perRecord.length,
      reached: reached.length,
      notReached: problems.length,
      ...(problems[0]?.problem ? { firstProblem: problems[0].problem } : {}),
      zoomsPerEvidenceRecord: distribution(reached.map((w) => w.zooms)),
      breakdownMeans: {
        sharedTreeZooms: mean(reached.map((w) => w.sharedZooms)),
        publicationZooms: 1,
        coverZooms: mean(reached.map((w) => w.coverZooms)),
        recordZooms: 1,
      },
      zoomsPerQuestion: distribution(entry.perQuestion),
    });
  }
  emit(BENCH, "oracle-zoom-latency", { meanZoomMsPerCallPerWalk: summarizeLatencies(zoomMs) });
}

export async function runLocomoBench(context: BenchContext): Promise<void> {
  const settings = readSettings();
  const conversations = loadConversations(settings);
  emit(BENCH, "machine", { ...context.machine, settings });
  const configFor = (databaseUrl: string) =>
    resolveConfig({ overrides: { databaseUrl, poolSize: Math.max(16, settings.concurrency + 8), summarizer: "fake" } });
  await withScratchMemory(context.serverUrl, "locomo", configFor, async (memory, config) => {
    let worker: RunningCompactor | undefined;
    try {
      const recorder = compactorRecorder();
      worker = await startWorker(memory, config, recorder.report, { concurrency: settings.concurrency });
      const records = conversations.reduce(
        (sum, c) => sum + c.sessions.reduce((s, session) => s + session.turns.length, 0),
        0,
      );
      note(
        `locomo: ingesting ${conversations.length} conversation(s), ${records} dialogue turns, compactor running (turn size ${settings.turnSize})`,
      );
      const start = performance.now();
      const db = memory;
      // Conversations in parallel (4 at a time), each one's sessions and turns in order.
      const built = await mapLimit(conversations, 4, (conversation) => ingestConversation(db, conversation, settings));
      const ingestSeconds = (performance.now() - start) / 1000;
      if (context.signal.aborted) return;
      const turns = built.reduce((sum, c) => sum + c.turns, 0);
      note(`locomo: ingest done in ${ingestSeconds.toFixed(1)} s (${turns} turns); draining the compactor`);
      await waitForCompactor(memory, turns, performance.now() + settings.drainSeconds * 1000, context.signal, "locomo");
      const buildSeconds = (performance.now() - start) / 1000;
      await worker.stop(10_000);
      worker = undefined;
      if (context.signal.aborted) return;
      await attachPublications(memory, built);
      const state = await buildState(memory);
      const counts = await treeCounts(memory);
      emit(BENCH, "build", {
        modelling: {
          scopes: settings.oneScope ? "one scope for all conversations" : "one scope per conversation file",
          sessions: "one optchat session per LoCoMo session",
          records:
            "one record per dialogue turn: speaker_a -> user, speaker_b -> assistant; '<speaker>: <text>' plus ' [shares a photo: <blip_caption>]'",
          turns: `${settings.turnSize} consecutive dialogue turns per optchat turn (admitTurn, ingestMany, finishTurn completed)`,
          timestamps: `session_N_date_time (UTC) + ${SECONDS_PER_DIALOGUE_TURN} s per dialogue turn`,
          compactor: "startWorker (fake extractive summarizer) during the ingest, drained after it",
        },
        conversations: conversations.length,
        scopes: new Set(built.map((c) => c.scopeId)).size,
        sessions: conversations.reduce((sum, c) => sum + c.sessions.length, 0),
        records,
        turns,
        publications: state.publications,
        nodes: counts,
        ingestSeconds: round(ingestSeconds, 2),
        buildSeconds: round(buildSeconds, 2),
        msPerRecord: round((buildSeconds * 1000) / records, 2),
        msPerPublication: round((buildSeconds * 1000) / Math.max(1, state.publications), 2),
        databaseBytes: await databaseBytes(memory),
        compactorEvents: recorder.events,
        ...(recorder.first() ? { firstProblem: recorder.first() } : {}),
      });
      note("locomo: scoring");
      await score(memory, built, context.signal);
    } finally {
      await worker?.stop(5000).catch(() => {});
    }
  });
}
