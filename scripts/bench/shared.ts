/**
 * `bench shared`: read paths of one large scope (context assembly, zoom, search), built through the real product path.
 *
 * Build (real path, nothing written around the product's invariants):
 *   - SESSIONS sessions of one project scope (`openSession`);
 *   - PUBLICATIONS turns spread round-robin over the sessions, RECORDS records in all (records per turn = RECORDS /
 *     PUBLICATIONS: a user message, tool call/result pairs, assistant messages), every turn admitted (`admitTurn`),
 *     its records ingested with `ingestMany` in large multi-session batches, and finished (`finishTurn`), which
 *     schedules its publication;
 *   - the real compactor (`startWorker`, fake extractive summarizer, the product's default concurrency) runs during
 *     the ingest and is drained afterwards: every record summarized, every turn published, the shared tree built.
 *   The build reports its own cost per record and per publication, so the full-size build time can be extrapolated.
 *
 * Then search at scale (scripts/bench/search-scale.ts, case `search-scale`; `npm run bench -- search-scale` runs it
 * alone, OPTCHAT_BENCH_SHARED_SEARCH_SCALE=0 skips it): 1M records over 100 scopes written by a bulk loader into the
 * real schema, p50/p99 of memory.search for Latin, CJK, rare, common and mixed queries, as loaded and after ANALYZE.
 * Measured at 1M/100 scopes (docs/shared-memory.md "Retrieval" has the table): the bulk load took 26 min on the
 * shared machine (650 records/s at load average ~20; 1,587 records/s at ~8), statistics 3 min; p99 after ANALYZE
 * latin 97, cjk 15, rare 17, common 232, mixed 49 ms (before migration 011: 600, 71, 36, 3,256, 522 ms).
 *
 * Measurements, on a reader turn pinned after the build (session 0, whose own history is already summarized), once
 * as the build left the database and once after ANALYZE (a server with autovacuum off, like the development one,
 * never gets planner statistics for the new rows on its own):
 *   assemble-context  `assembleContext` with `waitMs: 0` (goal of the issue: p99 <= 10 ms), a 200k and a 32k window
 *   zoom              a mix of shared lines (pub:start+count, level > 0), publications (pub:i+1), session lines
 *                     (<session>:0:start+count, level > 0) and single messages (<session>:0:seq+1)
 *   search            a mix of common words (in most records) and rare words (a unique hash in exactly one record,
 *                     a module name in a few), alone and combined
 * Latencies are measured one call at a time after a short warm-up, nearest-rank p50/p99 over CALLS calls.
 *
 * Environment:
 *   OPTCHAT_BENCH_SHARED_RECORDS        records of the scope (default 10000; the target is 100000)
 *   OPTCHAT_BENCH_SHARED_SESSIONS       sessions (default 200; target 2000)
 *   OPTCHAT_BENCH_SHARED_PUBLICATIONS   published turns (default 1000; target 10000)
 *   OPTCHAT_BENCH_SHARED_CALLS          measured calls per case (default 200)
 *   OPTCHAT_BENCH_SHARED_BATCH          records per ingestMany call (default 1000)
 *   OPTCHAT_BENCH_SHARED_CONCURRENCY    compactor worker concurrency (default 8, the product default)
 *   OPTCHAT_BENCH_SHARED_DRAIN_SECONDS  longest wait for the compactor after the ingest (default 600)
 *   OPTCHAT_BENCH_SHARED_SEED           seed of the synthetic texts and of the sampled refs and queries (default 1)
 * The defaults are a tenth of the target in every dimension: on a 2-core machine the real path builds about 40-60
 * records/s and 4-6 publications/s (every node is a pg-boss job; a scope's publications serialize on its row), so the
 * target would take 30-40 minutes and the default about 3 minutes. The `build` case reports the cost per record and
 * per publication and an extrapolated build time for the target; every case says which sizes it measured.
 */
import { NODE_QUEUE, PUBLISH_QUEUE } from "../../src/compactor/queue.js";
import type { AssembleOptions } from "../../src/memory/assembly.js";
import { type Config, resolveConfig } from "../../src/memory/config.js";
import type { TurnContext } from "../../src/memory/reader.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import type { Memory } from "../../src/memory/service.js";
import { type RunningCompactor, startWorker } from "../../src/memory/worker.js";
import {
  type BenchContext,
  compactorRecorder,
  emit,
  envNumber,
  type LatencySummary,
  note,
  round,
  type SyntheticRecord,
  seededRandom,
  summarizeLatencies,
  syntheticEvent,
  withScratchMemory,
} from "./common.js";
import { runSearchScaleBench } from "./search-scale.js";

const BENCH = "shared";
const TARGET = { records: 100_000, sessions: 2000, publications: 10_000 } as const;
/** The goal for context assembly with the own history already summarized. */
const ASSEMBLE_GOAL_P99_MS = 10;

interface Settings {
  readonly records: number;
  readonly sessions: number;
  readonly publications: number;
  readonly calls: number;
  readonly batch: number;
  readonly concurrency: number;
  readonly drainSeconds: number;
  readonly seed: number;
}

function readSettings(): Settings {
  const settings = {
    records: envNumber("OPTCHAT_BENCH_SHARED_RECORDS", 10_000, { min: 1, integer: true }),
    sessions: envNumber("OPTCHAT_BENCH_SHARED_SESSIONS", 200, { min: 1, integer: true }),
    publications: envNumber("OPTCHAT_BENCH_SHARED_PUBLICATIONS", 1000, { min: 1, integer: true }),
    calls: envNumber("OPTCHAT_BENCH_SHARED_CALLS", 200, { min: 1, integer: true }),
    batch: envNumber("OPTCHAT_BENCH_SHARED_BATCH", 1000, { min: 1, integer: true }),
    concurrency: envNumber("OPTCHAT_BENCH_SHARED_CONCURRENCY", 8, { min: 1, integer: true }),
    drainSeconds: envNumber("OPTCHAT_BENCH_SHARED_DRAIN_SECONDS", 600, { min: 1 }),
    seed: envNumber("OPTCHAT_BENCH_SHARED_SEED", 1, { integer: true }),
  };
  if (settings.publications > settings.records)
    throw new Error("OPTCHAT_BENCH_SHARED_PUBLICATIONS must not exceed OPTCHAT_BENCH_SHARED_RECORDS");
  return settings;
}

// ---------------------------------------------------------------------------------------------------------------
// Helpers shared with the locomo benchmark

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Runs `run` over `items` with at most `limit` calls in flight; results in input order. */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  run: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const loop = async () => {
    for (;;) {
      const index = next++;
      if (index >= items.length) return;
      out[index] = await run(items[index] as T, index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, loop));
  return out;
}

export interface BuildState {
  readonly publications: number;
  readonly openNodeJobs: number;
  readonly openPublishJobs: number;
  readonly unbuiltLeaves: number;
}

/** Where the compactor stands: publications so far, open jobs of both queues, records not yet summarized. */
export async function buildState(memory: Memory): Promise<BuildState> {
  const result = await memory.pool.query<{ pubs: number; node_jobs: number; publish_jobs: number; unbuilt: number }>(
    `SELECT (SELECT count(*)::int FROM optchat.publications) AS pubs,
            (SELECT count(*)::int FROM pgboss.job WHERE name = $1 AND state IN ('created', 'retry', 'active')) AS node_jobs,
            (SELECT count(*)::int FROM pgboss.job WHERE name = $2 AND state IN ('created', 'retry', 'active')) AS publish_jobs,
            (SELECT coalesce(sum(leaf_count - built_leaves), 0)::int FROM optchat.trees WHERE kind = 'session') AS unbuilt`,
    [NODE_QUEUE, PUBLISH_QUEUE],
  );
  const row = result.rows[0];
  return {
    publications: row?.pubs ?? 0,
    openNodeJobs: row?.node_jobs ?? 0,
    openPublishJobs: row?.publish_jobs ?? 0,
    unbuiltLeaves: row?.unbuilt ?? 0,
  };
}

export interface DrainResult {
  readonly state: BuildState;
  /** performance.now() when every record of every session had its leaf summary (null: never seen). */
  readonly recordsSummarizedAt: number | null;
  /** performance.now() when everything was published and both queues were empty. */
  readonly doneAt: number;
}

/**
 * Waits until `publications` turns are published and both queues are empty (every node of every tree built, the
 * shared trees included); progress on stderr every 10 s; throws after `deadline` (a performance.now() time).
 */
export async function waitForCompactor(
  memory: Memory,
  publications: number,
  deadline: number,
  signal: AbortSignal,
  label: string,
): Promise<DrainResult> {
  let lastNote = performance.now();
  let recordsSummarizedAt: number | null = null;
  for (;;) {
    const state = await buildState(memory);
    if (state.unbuiltLeaves === 0) recordsSummarizedAt ??= performance.now();
    if (
      (state.publications >= publications && state.openNodeJobs === 0 && state.openPublishJobs === 0) ||
      signal.aborted
    )
      return { state, recordsSummarizedAt, doneAt: performance.now() };
    if (performance.now() > deadline) {
      throw new Error(
        `${label}: compactor not done at the drain timeout: ${state.publications}/${publications} published, ` +
          `${state.openNodeJobs} node and ${state.openPublishJobs} publication job(s) open, ${state.unbuiltLeaves} record(s) unsummarized`,
      );
    }
    if (performance.now() - lastNote > 10_000) {
      lastNote = performance.now();
      note(
        `${label}: ${state.publications}/${publications} published, ${state.openNodeJobs} node job(s) open, ${state.unbuiltLeaves} record(s) unsummarized`,
      );
    }
    await sleep(100);
  }
}

/** The server's autovacuum setting and whether the big tables have planner statistics yet. */
export async function statisticsState(memory: Memory): Promise<Record<string, unknown>> {
  const result = await memory.pool.query<{ autovacuum: string; analyzed: string[]; unanalyzed: string[] }>(
    `SELECT current_setting('autovacuum') AS autovacuum,
            coalesce(array_agg(relname::text ORDER BY relname) FILTER (WHERE coalesce(last_analyze, last_autoanalyze) IS NOT NULL), '{}') AS analyzed,
            coalesce(array_agg(relname::text ORDER BY relname) FILTER (WHERE coalesce(last_analyze, last_autoanalyze) IS NULL), '{}') AS unanalyzed
       FROM pg_stat_user_tables WHERE schemaname = 'optchat' AND relname IN ('records', 'nodes', 'sessions', 'publications', 'trees')`,
  );
  const row = result.rows[0];
  return {
    autovacuum: row?.autovacuum ?? "unknown",
    analyzed: row?.analyzed ?? [],
    notAnalyzed: row?.unanalyzed ?? [],
  };
}

export interface TreeCounts {
  readonly sessionNodes: number;
  readonly sessionLeaves: number;
  readonly sharedNodes: number;
  readonly modelNodes: number;
  readonly modelCalls: number;
  readonly overshootNodes: number;
}

export async function treeCounts(memory: Memory): Promise<TreeCounts> {
  const result = await memory.pool.query<{
    session_nodes: number;
    session_leaves: number;
    shared_nodes: number;
    model_nodes: number;
    model_calls: number;
    overshoot_nodes: number;
  }>(
    `SELECT count(*) FILTER (WHERE t.kind = 'session')::int AS session_nodes,
            count(*) FILTER (WHERE t.kind = 'session' AND n.level = 0)::int AS session_leaves,
            count(*) FILTER (WHERE t.kind = 'shared')::int AS shared_nodes,
            count(*) FILTER (WHERE n.attempts > 0)::int AS model_nodes,
            coalesce(sum(n.attempts), 0)::int AS model_calls,
            count(*) FILTER (WHERE n.overshoot)::int AS overshoot_nodes
       FROM optchat.nodes n JOIN optchat.trees t ON t.tree_id = n.tree_id`,
  );
  const row = result.rows[0];
  return {
    sessionNodes: row?.session_nodes ?? 0,
    sessionLeaves: row?.session_leaves ?? 0,
    sharedNodes: row?.shared_nodes ?? 0,
    modelNodes: row?.model_nodes ?? 0,
    modelCalls: row?.model_calls ?? 0,
    overshootNodes: row?.overshoot_nodes ?? 0,
  };
}

export async function databaseBytes(memory: Memory): Promise<number> {
  const result = await memory.pool.query<{ bytes: number }>(
    "SELECT pg_database_size(current_database())::bigint AS bytes",
  );
  return Number(result.rows[0]?.bytes ?? 0);
}

/** Times `calls` sequential calls of `run(i)` after `warmup` unmeasured ones; rejects on the first error. */
export async function timeCalls(
  calls: number,
  warmup: number,
  run: (index: number) => Promise<unknown>,
  signal: AbortSignal,
): Promise<number[]> {
  for (let i = 0; i < warmup && !signal.aborted; i++) await run(i);
  const latencies: number[] = [];
  for (let i = 0; i < calls && !signal.aborted; i++) {
    const start = performance.now();
    await run(i);
    latencies.push(performance.now() - start);
  }
  return latencies;
}

export const WINDOW_200K: AssembleOptions = {
  windowTokens: 200_000,
  instructionsTokens: 2000,
  activeTokens: 500,
  outputTokens: 8000,
  reserveTokens: 1000,
};

export const WINDOW_32K: AssembleOptions = {
  windowTokens: 32_000,
  instructionsTokens: 2000,
  activeTokens: 500,
  outputTokens: 4000,
  reserveTokens: 1000,
};

/** `pub:start+count` or `<session>:<generation>:start+count` lines of a rendered memory block. */
export function blockRefs(text: string, prefix: "pub:" | "session"): string[] {
  const out: string[] = [];
  for (const line of text.split("\n")) {
    const bar = line.indexOf("|");
    if (bar < 0) continue;
    const ref = line.slice(0, bar);
    if (prefix === "pub:" ? /^pub:\d+\+\d+$/.test(ref) : /^\d+\+\d+$/.test(ref)) out.push(ref);
  }
  return out;
}

/** start and count of `start+count` (after an optional prefix). */
export function rangeOf(ref: string): { start: number; count: number } {
  const match = /(\d+)\+(\d+)$/.exec(ref);
  if (!match) throw new Error(`not a range ref: ${ref}`);
  return { start: Number(match[1]), count: Number(match[2]) };
}

// ---------------------------------------------------------------------------------------------------------------
// Synthetic transcripts: coding-agent turns with common words, a few hundred module names and a unique hash each.

const MODULES = Array.from({ length: 600 }, (_, k) => `mod${k.toString(36)}${((k * 7919) % 1000).toString(36)}`);
const VERBS = ["fix", "refactor", "rename", "document", "test", "speed up", "review", "split", "simplify", "port"];
const OBJECTS = [
  "the session cache",
  "the import queue",
  "the retry loop",
  "the config loader",
  "the search index",
  "the deploy script",
  "the payment webhook",
  "the migration",
  "the login form",
  "the report export",
];
const RESULTS = [
  "All tests pass now.",
  "One test still fails: the timeout is too short on CI.",
  "The build is green; coverage went up by two percent.",
  "The error was a missing null check in the handler.",
  "I left a TODO where the behaviour is unclear.",
];

function hashOf(n: number, seed: number): string {
  let h = (n ^ (seed * 0x9e3779b9)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0;
  h = (h ^ (h >>> 16)) >>> 0;
  return `h${h.toString(16).padStart(8, "0")}`;
}

function pick<T>(random: () => number, list: readonly T[]): T {
  return list[Math.floor(random() * list.length)] as T;
}

/** The records of one turn; record n (global) carries the unique hash hashOf(n). */
function syntheticTurn(turn: number, records: number, firstRecord: number, seed: number): SyntheticRecord[] {
  const random = seededRandom(seed * 1_000_003 + turn);
  const module = pick(random, MODULES);
  const object = pick(random, OBJECTS);
  const out: SyntheticRecord[] = [];
  for (let k = 0; k < records; k++) {
    const hash = hashOf(firstRecord + k, seed);
    const file = `src/${module}/${pick(random, ["index", "handler", "store", "util", "types"])}.ts`;
    if (k === 0) {
      out.push({
        kind: "user",
        content: `Please ${pick(random, VERBS)} ${object} in ${module}; the last run failed with error ${hash}. Keep the public API unchanged and add a test.`,
      });
    } else if (k === records - 1 || (k % 2 === 1 && k === records - 2 && records % 2 === 1)) {
      out.push({
        kind: "assistant",
        content: `I changed ${file} to ${pick(random, VERBS)} ${object} (${hash}). ${pick(random, RESULTS)} The function now returns early when the input is empty, and the test file covers that case.`,
      });
    } else if (k % 2 === 1) {
      out.push({
        kind: "tool_call",
        toolCallId: `call-${firstRecord + k}`,
        toolName: pick(random, ["read", "edit", "bash", "grep"]),
        content: `{"path":"${file}","ref":"${hash}"}`,
      });
    } else {
      const lines = 2 + Math.floor(random() ** 2 * 24);
      const body = Array.from(
        { length: lines },
        (_, line) =>
          `${line + 1}  export function ${module}_${line}(input: string) { return check(input, "${object}"); }`,
      ).join("\n");
      out.push({
        kind: "tool_result",
        toolCallId: `call-${firstRecord + k - 1}`,
        toolName: "read",
        content: `${file} (${hash}) test output:\n${body}\nerror: 0, passed: ${lines}`,
      });
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Build

interface BuiltScope {
  readonly scopeId: string;
  readonly sessions: { sessionId: string; hostSessionId: string }[];
  readonly records: number;
  readonly recordBytes: number;
  readonly turns: number;
  /** (session index, turn ordinal, first global record number, record count) of every turn. */
  readonly turnPlan: { session: number; ordinal: number; first: number; count: number }[];
  readonly openSeconds: number;
  readonly ingestSeconds: number;
  readonly drainSeconds: number;
  /** Seconds from the first ingest until every record had its leaf summary. */
  readonly recordsSummarizedSeconds: number | null;
  readonly ingestCalls: { admit: number[]; ingestMany: number[]; finish: number[] };
  readonly compactor: ReturnType<typeof compactorRecorder>;
}

async function buildScope(
  memory: Memory,
  config: Config,
  settings: Settings,
  signal: AbortSignal,
): Promise<BuiltScope | undefined> {
  const projectId = "bench-shared";
  const openStart = performance.now();
  const sessions = await mapLimit(
    Array.from({ length: settings.sessions }, (_, s) => s),
    8,
    async (s) => {
      const hostSessionId = `bench-shared-s${s}`;
      const session = await memory.openSession({ host: "bench", hostSessionId, projectId, title: `session ${s}` });
      return { sessionId: session.sessionId, hostSessionId };
    },
  );
  const openSeconds = (performance.now() - openStart) / 1000;
  const scopeId = `project:${projectId}`;

  // Turn i goes to session i mod S as that session's ordinal floor(i / S); records are spread evenly over turns.
  const turnPlan: BuiltScope["turnPlan"] = [];
  let first = 0;
  for (let i = 0; i < settings.publications; i++) {
    const count =
      Math.floor(settings.records / settings.publications) + (i < settings.records % settings.publications ? 1 : 0);
    turnPlan.push({ session: i % settings.sessions, ordinal: Math.floor(i / settings.sessions), first, count });
    first += count;
  }

  const recorder = compactorRecorder();
  let worker: RunningCompactor | undefined = await startWorker(memory, config, recorder.report, {
    concurrency: settings.concurrency,
  });
  try {
    const ingestStart = performance.now();
    const admitMs: number[] = [];
    const ingestMs: number[] = [];
    const finishMs: number[] = [];
    let recordBytes = 0;
    // A chunk never holds two turns of one session, so each session's turns run one after another.
    const turnsPerChunk = Math.max(
      1,
      Math.min(settings.sessions, Math.floor(settings.batch / Math.max(1, settings.records / settings.publications))),
    );
    let lastNote = performance.now();
    for (let from = 0; from < turnPlan.length && !signal.aborted; from += turnsPerChunk) {
      const chunk = turnPlan.slice(from, from + turnsPerChunk);
      const ctxOf = (t: (typeof chunk)[number]): TurnContext => ({
        sessionId: (sessions[t.session] as BuiltScope["sessions"][number]).sessionId,
        turnId: `t${t.ordinal}`,
      });
      const texts = chunk.map((t, k) => syntheticTurn(from + k, t.count, t.first, settings.seed));
      await mapLimit(chunk, 4, async (t, k) => {
        const start = performance.now();
        await memory.admitTurn({ ...ctxOf(t), query: texts[k]?.[0]?.content ?? "" });
        admitMs.push(performance.now() - start);
      });
      const events: IngestEvent[] = [];
      chunk.forEach((t, k) => {
        const session = sessions[t.session] as BuiltScope["sessions"][number];
        (texts[k] as SyntheticRecord[]).forEach((record, j) => {
          const n = t.first + j;
          recordBytes += Buffer.byteLength(record.content, "utf8");
          events.push(syntheticEvent(session, `t${t.ordinal}`, n, record));
        });
      });
      for (let at = 0; at < events.length; at += settings.batch) {
        const start = performance.now();
        const results = await memory.ingestMany(events.slice(at, at + settings.batch));
        ingestMs.push(performance.now() - start);
        const notSealed = results.filter((r) => r.status !== "sealed");
        if (notSealed.length > 0) throw new Error(`ingestMany: ${notSealed.length} record(s) not sealed`);
      }
      await mapLimit(chunk, 4, async (t) => {
        const start = performance.now();
        await memory.finishTurn(ctxOf(t), "completed");
        finishMs.push(performance.now() - start);
      });
      if (performance.now() - lastNote > 10_000) {
        lastNote = performance.now();
        const state = await buildState(memory);
        note(
          `shared: ingested ${from + chunk.length}/${turnPlan.length} turns; ${state.publications} published, ${state.unbuiltLeaves} record(s) unsummarized`,
        );
      }
    }
    const ingestSeconds = (performance.now() - ingestStart) / 1000;
    if (signal.aborted) return undefined;
    note(`shared: ingest done in ${ingestSeconds.toFixed(1)} s; draining the compactor`);
    const drained = await waitForCompactor(
      memory,
      settings.publications,
      performance.now() + settings.drainSeconds * 1000,
      signal,
      "shared",
    );
    const drainSeconds = (drained.doneAt - ingestStart) / 1000 - ingestSeconds;
    await worker.stop(10_000);
    worker = undefined;
    return {
      scopeId,
      sessions,
      records: settings.records,
      recordBytes,
      turns: turnPlan.length,
      turnPlan,
      openSeconds,
      ingestSeconds,
      drainSeconds,
      recordsSummarizedSeconds:
        drained.recordsSummarizedAt === null ? null : (drained.recordsSummarizedAt - ingestStart) / 1000,
      ingestCalls: { admit: admitMs, ingestMany: ingestMs, finish: finishMs },
      compactor: recorder,
    };
  } finally {
    await worker?.stop(5000).catch(() => {});
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Measurements

interface ZoomTarget {
  readonly kind: "shared-line" | "publication" | "session-line" | "message";
  readonly ref: string;
}

function withPercentiles(latencies: readonly number[]): LatencySummary & { calls: number } {
  return { calls: latencies.length, ...summarizeLatencies(latencies) };
}

async function zoomTargets(
  memory: Memory,
  ctx: TurnContext,
  sharedBlock: string,
  built: BuiltScope,
  calls: number,
  random: () => number,
): Promise<ZoomTarget[]> {
  const perKind = Math.ceil(calls / 4);
  const sharedLines = blockRefs(sharedBlock, "pub:").filter((ref) => rangeOf(ref).count > 1);
  const targets: ZoomTarget[] = [];
  const publications: ZoomTarget[] = [];
  const sessionLines: ZoomTarget[] = [];
  const messages: ZoomTarget[] = [];
  // Publications at random; their covers give session lines, their ranges single messages (found through zoom itself).
  for (let i = 0; i < perKind; i++) {
    const seq = Math.floor(random() * built.turns);
    const ref = `pub:${seq}+1`;
    publications.push({ kind: "publication", ref });
    const answer = await memory.zoom(ctx, ref);
    if (answer.kind !== "publication") throw new Error(`${ref}: expected a publication, got ${answer.kind}`);
    const wide = answer.cover.filter((line) => rangeOf(line.ref).count > 1);
    const line = wide[Math.floor(random() * wide.length)];
    if (line) sessionLines.push({ kind: "session-line", ref: line.ref });
    const [lo, hi] = answer.range.split("..").map(Number) as [number, number];
    const msg = lo + Math.floor(random() * (hi - lo + 1));
    messages.push({ kind: "message", ref: `${answer.sessionId}:${answer.generation}:${msg}+1` });
  }
  for (let i = 0; i < perKind && sharedLines.length > 0; i++)
    targets.push({ kind: "shared-line", ref: sharedLines[Math.floor(random() * sharedLines.length)] as string });
  targets.push(...publications, ...sessionLines, ...messages);
  // Interleave the kinds deterministically, then cut to `calls`.
  for (let i = targets.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [targets[i], targets[j]] = [targets[j] as ZoomTarget, targets[i] as ZoomTarget];
  }
  return targets.slice(0, calls);
}

interface SearchQuery {
  readonly kind: "common" | "rare" | "rare+common" | "module";
  readonly query: string;
}

function searchQueries(built: BuiltScope, calls: number, seed: number, random: () => number): SearchQuery[] {
  const common = ["test", "error", "function", "the session cache", "input", "passed", "all tests pass"];
  const out: SearchQuery[] = [];
  for (let i = 0; i < calls; i++) {
    const n = Math.floor(random() * built.records);
    switch (i % 4) {
      case 0:
        out.push({ kind: "common", query: common[Math.floor(random() * common.length)] as string });
        break;
      case 1:
        out.push({ kind: "rare", query: hashOf(n, seed) });
        break;
      case 2:
        out.push({ kind: "rare+common", query: `${hashOf(n, seed)} test` });
        break;
      default:
        out.push({ kind: "module", query: MODULES[Math.floor(random() * MODULES.length)] as string });
    }
  }
  return out;
}

interface Prepared {
  readonly ctx: TurnContext;
  readonly pinned: Record<string, number | null>;
  readonly targets: readonly ZoomTarget[];
  readonly queries: readonly SearchQuery[];
}

/** Admits the reader turn (session 0, own history summarized) and samples the zoom refs and search queries once. */
async function prepare(memory: Memory, built: BuiltScope, settings: Settings): Promise<Prepared> {
  const reader = built.sessions[0] as BuiltScope["sessions"][number];
  const ctx: TurnContext = { sessionId: reader.sessionId, turnId: "bench-reader" };
  const turn = await memory.admitTurn({ ...ctx, query: "continue the refactoring of the session cache" });
  const pinned = {
    publicationHighWater: turn.snapshot.publicationHighWater,
    sharedViewRevision: turn.snapshot.sharedViewRevision,
    ownBoundary: turn.snapshot.ownBoundary,
  };
  note(`shared: reader turn pinned at ${JSON.stringify(pinned)}`);
  const random = seededRandom(settings.seed * 7 + 3);
  const assembled = await memory.assembleContext(ctx, { ...WINDOW_200K, waitMs: 0 });
  const sharedBlock = assembled.blocks.find((b) => b.name === "shared_memory")?.text ?? "";
  const targets = await zoomTargets(memory, ctx, sharedBlock, built, settings.calls, random);
  const queries = searchQueries(built, settings.calls, settings.seed, random);
  return { ctx, pinned, targets, queries };
}

/** One pass of every measurement; `statistics` labels the planner statistics it ran with. */
async function measure(
  memory: Memory,
  prepared: Prepared,
  settings: Settings,
  sizes: Record<string, unknown>,
  statistics: Record<string, unknown>,
  signal: AbortSignal,
): Promise<void> {
  const { ctx, pinned, targets, queries } = prepared;
  const warmup = Math.min(10, settings.calls);
  const common = { statistics, ...sizes, pinnedSnapshot: pinned };

  for (const [name, window] of [
    ["200k", WINDOW_200K],
    ["32k", WINDOW_32K],
  ] as const) {
    if (signal.aborted) return;
    const options: AssembleOptions = { ...window, waitMs: 0 };
    const sample = await memory.assembleContext(ctx, options);
    const latencies = await timeCalls(settings.calls, warmup, () => memory.assembleContext(ctx, options), signal);
    const summary = withPercentiles(latencies);
    emit(BENCH, "assemble-context", {
      window: name,
      options,
      ...common,
      blocks: sample.blocks.map((b) => ({ name: b.name, lines: b.lines, tokens: b.tokens })),
      tokens: sample.tokens,
      omitted: sample.omitted,
      ...summary,
      goalP99Ms: ASSEMBLE_GOAL_P99_MS,
      meetsGoal: summary.p99Ms !== null && summary.p99Ms <= ASSEMBLE_GOAL_P99_MS,
    });
  }
  if (signal.aborted) return;

  // Warm-up: the first calls of the list, unmeasured; then every call measured and filed under its kind.
  for (const target of targets.slice(0, warmup)) await memory.zoom(ctx, target.ref);
  const byZoomKind = new Map<string, number[]>();
  const zoomLatencies: number[] = [];
  let zoomErrors = 0;
  for (const target of targets) {
    if (signal.aborted) return;
    const start = performance.now();
    const answer = await memory.zoom(ctx, target.ref).catch(() => undefined);
    const ms = performance.now() - start;
    if (!answer) zoomErrors += 1;
    zoomLatencies.push(ms);
    byZoomKind.set(target.kind, [...(byZoomKind.get(target.kind) ?? []), ms]);
  }
  emit(BENCH, "zoom", {
    ...common,
    errors: zoomErrors,
    ...withPercentiles(zoomLatencies),
    byKind: Object.fromEntries([...byZoomKind].map(([kind, list]) => [kind, withPercentiles(list)])),
  });

  for (const query of queries.slice(0, warmup)) await memory.search(ctx, { query: query.query });
  const byQueryKind = new Map<string, { ms: number[]; hits: number[] }>();
  const searchLatencies: number[] = [];
  for (const query of queries) {
    if (signal.aborted) return;
    const start = performance.now();
    const answer = await memory.search(ctx, { query: query.query });
    const ms = performance.now() - start;
    searchLatencies.push(ms);
    const entry = byQueryKind.get(query.kind) ?? { ms: [], hits: [] };
    entry.ms.push(ms);
    entry.hits.push(answer.hits.length);
    byQueryKind.set(query.kind, entry);
  }
  emit(BENCH, "search", {
    ...common,
    limit: 10,
    queries: {
      common: "one of: test, error, function, 'the session cache', input, passed, 'all tests pass' (in most records)",
      rare: "a unique 9-character hash that occurs in exactly one record (and the summaries that kept it)",
      "rare+common": "that hash and 'test'",
      module: "one of 600 module names (each in about records/600 records, plus summaries)",
    },
    ...withPercentiles(searchLatencies),
    byKind: Object.fromEntries(
      [...byQueryKind].map(([kind, entry]) => [
        kind,
        {
          ...withPercentiles(entry.ms),
          meanHits: round(entry.hits.reduce((a, b) => a + b, 0) / Math.max(1, entry.hits.length), 2),
        },
      ]),
    ),
  });
}

export async function runSharedBench(context: BenchContext): Promise<void> {
  const settings = readSettings();
  const atTarget =
    settings.records === TARGET.records &&
    settings.sessions === TARGET.sessions &&
    settings.publications === TARGET.publications;
  emit(BENCH, "machine", { ...context.machine, settings, targetSizes: TARGET, atTargetSizes: atTarget });
  const configFor = (databaseUrl: string) =>
    resolveConfig({ overrides: { databaseUrl, poolSize: Math.max(16, settings.concurrency + 8), summarizer: "fake" } });
  await withScratchMemory(context.serverUrl, "shared", configFor, async (memory, config) => {
    note(
      `shared: building ${settings.records} records in ${settings.sessions} sessions, ${settings.publications} turns, compactor running`,
    );
    const cpuBefore = process.cpuUsage();
    const built = await buildScope(memory, config, settings, context.signal);
    if (!built || context.signal.aborted) return;
    const cpu = process.cpuUsage(cpuBefore);
    const state = await buildState(memory);
    const counts = await treeCounts(memory);
    const buildSeconds = built.ingestSeconds + built.drainSeconds;
    const sizes = {
      measuredSizes: {
        records: built.records,
        sessions: built.sessions.length,
        publications: state.publications,
        sessionNodes: counts.sessionNodes,
        sharedNodes: counts.sharedNodes,
      },
      atTargetSizes: atTarget,
    };
    const perRecordMs = (buildSeconds * 1000) / built.records;
    const perPublicationMs = (buildSeconds * 1000) / built.turns;
    // Extrapolation: the build is linear in records and publications (each node and publication is one job); scaled
    // by the larger of the two ratios.
    const scale = Math.max(TARGET.records / built.records, TARGET.publications / built.turns);
    emit(BENCH, "build", {
      path: "real: openSession, admitTurn/ingestMany/finishTurn, compactor (startWorker, fake summarizer) running throughout",
      synthetic: false,
      ...sizes,
      targetSizes: TARGET,
      recordsPerTurn: round(built.records / built.turns, 2),
      meanRecordBytes: round(built.recordBytes / built.records, 0),
      ingestBatch: settings.batch,
      concurrency: settings.concurrency,
      openSessionsSeconds: round(built.openSeconds, 2),
      ingestSeconds: round(built.ingestSeconds, 2),
      drainAfterIngestSeconds: round(built.drainSeconds, 2),
      buildSeconds: round(buildSeconds, 2),
      allRecordsSummarizedAfterSeconds:
        built.recordsSummarizedSeconds === null ? null : round(built.recordsSummarizedSeconds, 2),
      publicationTailSeconds:
        built.recordsSummarizedSeconds === null ? null : round(buildSeconds - built.recordsSummarizedSeconds, 2),
      recordsPerSec: round(built.records / buildSeconds, 1),
      publicationsPerSec: round(built.turns / buildSeconds, 1),
      nodesPerSec: round((counts.sessionNodes + counts.sharedNodes) / buildSeconds, 1),
      msPerRecord: round(perRecordMs, 3),
      msPerPublication: round(perPublicationMs, 3),
      extrapolatedTargetBuildSeconds: round(buildSeconds * scale, 0),
      callLatency: {
        admitTurn: summarizeLatencies(built.ingestCalls.admit),
        [`ingestMany${settings.batch}`]: summarizeLatencies(built.ingestCalls.ingestMany),
        finishTurn: summarizeLatencies(built.ingestCalls.finish),
      },
      nodes: counts,
      nodeCpuPct: round(((cpu.user + cpu.system) / 1000 / (buildSeconds * 1000)) * 100, 1),
      databaseBytes: await databaseBytes(memory),
      compactorEvents: built.compactor.events,
      ...(built.compactor.first() ? { firstProblem: built.compactor.first() } : {}),
    });
    const prepared = await prepare(memory, built, settings);
    // First as the build left the database (this server's autovacuum setting decides whether the planner has
    // statistics yet), then after an explicit ANALYZE, as a server with autovacuum would have them soon.
    const before = await statisticsState(memory);
    await measure(memory, prepared, settings, sizes, { phase: "as built", ...before }, context.signal);
    if (context.signal.aborted) return;
    await memory.pool.query("ANALYZE");
    await measure(
      memory,
      prepared,
      settings,
      sizes,
      { phase: "after ANALYZE", ...(await statisticsState(memory)) },
      context.signal,
    );
  });
  // Search at scale: 1M records over 100 scopes, bulk-loaded (scripts/bench/search-scale.ts).
  if (!context.signal.aborted && envNumber("OPTCHAT_BENCH_SHARED_SEARCH_SCALE", 1, { integer: true }) === 1)
    await runSearchScaleBench(context);
}
