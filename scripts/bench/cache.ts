/**
 * `bench cache`: what model requests cost under a provider's prompt cache, native OpenCode 1.18.33 against OpenCode
 * with optchat (issue 14, docs/caching.md).
 *
 * For each provider (anthropic-sim: OpenCode's own @ai-sdk/anthropic against the scripted model's /v1/messages, with
 * OpenCode's cache marks; openai-sim: @ai-sdk/openai-compatible against /v1/chat/completions, automatic prefix
 * caching) and each variant (native: no plugin; optchat: the plugin with its embedded compactor and the
 * deterministic summarizer), one fresh scripted model (so a fresh cache), one `opencode serve` in one project and two
 * sessions of TURNS turns each:
 *   s1  notes and decisions, a two-call tool loop (small outputs) every third turn;
 *   s2  a tool loop with a 10 KB output every second turn.
 * s1 runs its first third alone, then both run side by side (each finished s1 turn is published while s2 works,
 * and the other way round), then s2 finishes alone.
 *
 * Every main request is attributed to its session and turn by the `[bench sN tK]` marker that opens the person's
 * prompt; title requests and native compaction are not counted (optchat's compactor runs in process, not here).
 * One JSON line per (provider, variant):
 *   turns, requests, inputTokens, cacheReadTokens, cacheWriteTokens  summed over all main requests
 *   billedInputTokens              uncached + 0.1 × read + 1.25 × written
 *   crossTurnPrefixReuseMedian     per session, first request of turn k+1 vs last request of turn k
 *   withinTurnPrefixReuseMedian    consecutive requests of one turn
 *     (prefix reuse: longest common prefix of the serialized system + messages, cache marks stripped, over the later
 *     request's length)
 *   withinTurnKeptMedian           (extra) the same pairs, over the EARLIER request's length: 1 when a step extends
 *                                  the previous step's request exactly (the JSON's closing brackets aside)
 *   requestBytesAtTurn             bytes of the first request of turns 10/30/60 of s1 (perSession has both)
 *   billedByPiece                  (extra) billed input tokens by what they were spent on: tools, memoryTools, system,
 *                                  memoryHead, sharedOpening, sharedLines, memoryVolatile, sharedUpdate, prompt,
 *                                  history (cache-breakdown.ts)
 * then one `case: "ratios"` line (optchat / native per provider, overall and per session) and an SVG plot of billed
 * input tokens per turn, whose path the ratios line names.
 * Environment:
 *   OPTCHAT_BENCH_CACHE_TURNS      turns per session (default 60)
 *   OPTCHAT_BENCH_CACHE_PROVIDERS  comma-separated subset of anthropic-sim,openai-sim
 *   OPTCHAT_BENCH_CACHE_VARIANTS   comma-separated subset of native,optchat,optchat-isolated,optchat-250-byte-lines
 *                                  (default native,optchat; optchat-isolated: the plugin with OPTCHAT_SCOPE=isolated, no
 *                                  shared memory; optchat-250-byte-lines: the compactor's lines at most 250 bytes;
 *                                  v2: native OpenCode V2 and optchat on V2, cache-v2.ts)
 *   OPTCHAT_BENCH_CACHE_PLOT       where the SVG goes (default $TMPDIR/optchat-bench-cache.svg)
 *   OPTCHAT_BENCH_CACHE_DUMP       a path prefix: every request the model received goes to <prefix>.<provider>.<variant>.jsonl
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { migrateAll } from "../../src/memory/migrate.js";
import { type CapturedRequest, startModelServer } from "../model-server.js";
import {
  cleanupOpencodeEnv,
  createOpencodeEnv,
  type OpencodeServer,
  startOpencodeServer,
} from "../opencode-harness.js";
import { commonPrefixLength } from "../prompt-cache.js";
import { billedByPiece, type Piece, requestPieces, sumPieces } from "./cache-breakdown.js";
import {
  addFigures,
  type CompactorFigures,
  compactorEnv,
  compactorFields,
  dollarRatios,
  mainDollars,
  NO_COMPACTOR,
  PRICE_PAIRS,
  readCompactorFigures,
  waitCompactorIdle,
} from "./cache-dollars.js";
import { runCacheBenchV2 } from "./cache-v2.js";
import {
  type BenchContext,
  createDatabase,
  dropDatabase,
  median,
  note,
  ratio,
  round,
  scratchDatabaseName,
  withDatabase,
} from "./common.js";

const ROOT = new URL("../..", import.meta.url).pathname;
const PROVIDERS = ["anthropic-sim", "openai-sim"] as const;
// "v2": native OpenCode V2 and optchat on V2, run by cache-v2.ts (issue 38).
const VARIANTS = ["native", "optchat", "optchat-isolated", "optchat-250-byte-lines", "v2"] as const;
/**
 * optchat-250-byte-lines: the compactor's lines at most 250 bytes where the deterministic summarizer otherwise fills them
 * to the 512-byte node limit; seed 002 measured real models' lines at ~250 bytes on average. What memory costs then is
 * what it would cost with such a model (free lines, the messages themselves, are unchanged).
 */
const SHORT_LINE_BYTES = 250;
/** The variants run unless OPTCHAT_BENCH_CACHE_VARIANTS names others (the issue's comparison). */
const DEFAULT_VARIANTS = ["native", "optchat"] as const;
type Provider = (typeof PROVIDERS)[number];
type Variant = (typeof VARIANTS)[number];
const SESSIONS = ["s1", "s2"] as const;
type SessionName = (typeof SESSIONS)[number];
const BYTES_AT = [10, 30, 60];
const TOOL_OUTPUT_BYTES = 10 * 1024;
const TURN_WAIT_MS = 180_000;
const COMPACTOR_IDLE_WAIT_MS = 60_000;

// biome-ignore lint/suspicious/noExplicitAny: wire JSON as the client sent it
type Json = any;

export interface CacheRun {
  readonly provider: Provider;
  readonly variant: Variant;
  readonly requests: readonly AttributedRequest[];
  /** The compactor's calls per session (s1, s2) and of the shared tree (shared), from the plugin's ledger. */
  readonly compactor: Readonly<Record<SessionName | "shared", CompactorFigures>>;
  /** Compactor requests the scripted model answered (a cross-check of the ledger). */
  readonly compactorRequestsSeen: number;
}

export interface AttributedRequest {
  readonly session: SessionName;
  readonly turn: number;
  /** system + messages, cache marks stripped, as JSON. */
  readonly serialized: string;
  readonly bytes: number;
  readonly inputTokens: number;
  readonly cacheReadTokens: number;
  readonly cacheWriteTokens: number;
  readonly outputTokens: number;
  /** Billed input tokens by piece of the request (cache-breakdown.ts). */
  readonly billedByPiece: Record<Piece, number>;
}

/**
 * The workload's order: s1 alone for its first third, then both sessions side by side, then s2 alone. `ask` runs turn
 * `turn` (from 1) of a session; progress goes to stderr under `label`.
 */
export async function alternateSessions(
  turns: number,
  signal: AbortSignal,
  label: string,
  ask: (session: SessionName, turn: number) => Promise<void>,
): Promise<void> {
  const next = { s1: 1, s2: 1 };
  const started = Date.now();
  const step = (session: SessionName) => ask(session, next[session]++);
  const lead = Math.ceil(turns / 3);
  while (next.s1 <= turns || next.s2 <= turns) {
    if (signal.aborted) throw new Error("bench cache: aborted");
    const both: Promise<void>[] = [];
    if (next.s1 <= turns) both.push(step("s1"));
    if (next.s1 > lead + 1 && next.s2 <= turns) both.push(step("s2"));
    await Promise.all(both);
    const done = next.s1 - 1 + next.s2 - 1;
    if (done % 20 === 0 || done === 2 * turns)
      note(`cache ${label}: ${done}/${2 * turns} turns, ${Math.round((Date.now() - started) / 1000)} s`);
  }
}

/** The person's prompt of turn `turn` in session `session`: its directives drive the scripted model. */
export function promptFor(session: SessionName, turn: number): string {
  const tag = `[bench ${session} t${turn}]`;
  const topic = `module-${(turn * 7) % 13} and the ${["parser", "cache", "store", "worker", "cli"][turn % 5]}`;
  const note = `${tag} Working on ${topic}: we decided that option ${String.fromCharCode(65 + (turn % 4))} stays, the retry limit is ${turn + 2}, and the open question is whether ${topic} needs its own test fixture.`;
  if (session === "s1" && turn % 3 === 0) {
    return `${note} TOOLS=[{"name":"bash","args":{"command":"echo s1-check-${turn}","description":"check"}},{"name":"bash","args":{"command":"echo s1-verify-${turn}","description":"verify"}}] END`;
  }
  if (session === "s2" && turn % 2 === 0) {
    return `${note} TOOLS=[{"name":"bash","args":{"command":"cat data/out-${turn}.txt","description":"read the output"}}] END`;
  }
  return `${note} REPLY=noted ${session} turn ${turn}: option ${String.fromCharCode(65 + (turn % 4))}, retry limit ${turn + 2}.`;
}

/** The 10 KB a turn's tool reads (data/out-<turn>.txt), the same in every variant. */
export function toolOutput(turn: number): string {
  const lines: string[] = [];
  let size = 0;
  for (let n = 0; size < TOOL_OUTPUT_BYTES; n++) {
    const line = `out-${turn} line ${n}: value=${(n * 2654435761 + turn) % 1000003} status=${n % 7 === 0 ? "warn" : "ok"}\n`;
    lines.push(line);
    size += line.length;
  }
  return lines.join("").slice(0, TOOL_OUTPUT_BYTES);
}

function stripMarks(value: Json): Json {
  if (Array.isArray(value)) return value.map(stripMarks);
  if (typeof value !== "object" || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(value)) if (key !== "cache_control") out[key] = stripMarks(inner);
  return out;
}

/** Every text block of the request's user messages, in order (a merged user message has several). */
function userTextBlocks(request: CapturedRequest): string[] {
  const messages: Json[] = request.body?.messages ?? [];
  return messages
    .filter((m) => m.role === "user")
    .flatMap((m) =>
      typeof m.content === "string"
        ? [m.content]
        : (Array.isArray(m.content) ? m.content : [])
            .filter((c: Json) => c?.type === "text")
            .map((c: Json) => String(c.text)),
    )
    .filter((t) => t !== "");
}

export function attribute(request: CapturedRequest): AttributedRequest | undefined {
  if (request.kind !== "main" || !request.cache) return undefined;
  // The person's prompt is the last user text block: the memory message comes before it (Anthropic merges the two
  // into one user message of two blocks) and may quote earlier prompts; tool results carry no text block.
  const text = userTextBlocks(request).at(-1) ?? "";
  const match = /\[bench (s[12]) t(\d+)\]/.exec(text);
  if (!match) return undefined;
  const serialized = JSON.stringify(
    stripMarks({ system: request.body.system ?? null, messages: request.body.messages }),
  );
  return {
    session: match[1] as SessionName,
    turn: Number(match[2]),
    serialized,
    bytes: Buffer.byteLength(JSON.stringify(request.body)),
    inputTokens: request.cache.inputTokens,
    cacheReadTokens: request.cache.cacheReadTokens,
    cacheWriteTokens: request.cache.cacheWriteTokens,
    outputTokens: request.outputTokens ?? 0,
    billedByPiece: billedByPiece(requestPieces(request.api, request.body), request.cache),
  };
}

export function billed(r: { inputTokens: number; cacheReadTokens: number; cacheWriteTokens: number }): number {
  return r.inputTokens - r.cacheReadTokens - r.cacheWriteTokens + 0.1 * r.cacheReadTokens + 1.25 * r.cacheWriteTokens;
}

function reuse(earlier: AttributedRequest, later: AttributedRequest): number {
  return commonPrefixLength(earlier.serialized, later.serialized) / later.serialized.length;
}

/** How much of the earlier request the later one repeats verbatim (1 less the closing brackets: it extends it). */
function kept(earlier: AttributedRequest, later: AttributedRequest): number {
  return commonPrefixLength(earlier.serialized, later.serialized) / earlier.serialized.length;
}

/** The figures of one run (or of one session of it). */
export function summarize(requests: readonly AttributedRequest[]) {
  const sum = (pick: (r: AttributedRequest) => number) => requests.reduce((total, r) => total + pick(r), 0);
  const cross: number[] = [];
  const within: number[] = [];
  const withinKept: number[] = [];
  const firstOfTurn = new Map<string, AttributedRequest>();
  for (const session of SESSIONS) {
    const own = requests.filter((r) => r.session === session);
    for (let i = 1; i < own.length; i++) {
      const [a, b] = [own[i - 1] as AttributedRequest, own[i] as AttributedRequest];
      if (a.turn === b.turn) {
        within.push(reuse(a, b));
        withinKept.push(kept(a, b));
      } else if (b.turn === a.turn + 1) cross.push(reuse(a, b));
    }
    for (const r of own) if (!firstOfTurn.has(`${session}/${r.turn}`)) firstOfTurn.set(`${session}/${r.turn}`, r);
  }
  const bytesAt = (session: SessionName) =>
    Object.fromEntries(BYTES_AT.map((t) => [String(t), firstOfTurn.get(`${session}/${t}`)?.bytes ?? null]));
  const inputTokens = sum((r) => r.inputTokens);
  const cacheReadTokens = sum((r) => r.cacheReadTokens);
  const cacheWriteTokens = sum((r) => r.cacheWriteTokens);
  const outputTokens = sum((r) => r.outputTokens);
  return {
    turns: new Set(requests.map((r) => `${r.session}/${r.turn}`)).size,
    requests: requests.length,
    inputTokens,
    cacheReadTokens,
    cacheWriteTokens,
    outputTokens,
    billedInputTokens: Math.round(billed({ inputTokens, cacheReadTokens, cacheWriteTokens })),
    crossTurnPrefixReuseMedian: nullableRound(median(cross)),
    withinTurnPrefixReuseMedian: nullableRound(median(within)),
    withinTurnKeptMedian: nullableRound(median(withinKept)),
    billedByPiece: sumPieces(requests.map((r) => r.billedByPiece)),
    bytesAt,
  };
}

function nullableRound(value: number | null): number | null {
  return value === null ? null : round(value, 4);
}

function perTurnBilled(requests: readonly AttributedRequest[], session: SessionName, turns: number): number[] {
  const series = new Array<number>(turns).fill(0);
  for (const r of requests)
    if (r.session === session && r.turn <= turns) series[r.turn - 1] = (series[r.turn - 1] ?? 0) + billed(r);
  return series.map((v) => Math.round(v));
}

async function runOne(context: BenchContext, provider: Provider, variant: Variant, turns: number): Promise<CacheRun> {
  const dump = process.env.OPTCHAT_BENCH_CACHE_DUMP;
  const model = await startModelServer(dump ? { logFile: `${dump}.${provider}.${variant}.jsonl` } : {});
  const name = scratchDatabaseName(`cache_${variant}_${provider.replace("-", "_")}`);
  const url = variant === "native" ? undefined : withDatabase(context.serverUrl, name);
  if (url) {
    await createDatabase(context.serverUrl, name);
    await migrateAll(url);
  }
  const env = await createOpencodeEnv({
    modelUrl: model.url,
    modelApi: provider === "anthropic-sim" ? "anthropic" : "openai-compatible",
    ...(url ? { pluginPath: join(ROOT, "plugin", "index.ts"), pluginOptions: { databaseUrl: url } } : {}),
    extraEnv: {
      OPTCHAT_READINESS_WAIT_MS: "60000",
      ...(variant === "optchat-isolated" ? { OPTCHAT_SCOPE: "isolated" } : {}),
      // The plugin's compactor is the in-process deterministic summarizer (scripts/opencode-harness.ts).
      // The compactor goes through the real SDK provider to the same scripted model, whose cache simulator counts
      // its tokens (issue 39); the 250-byte-lines variant keeps the deterministic summarizer, which it shortens.
      ...(variant === "optchat-250-byte-lines"
        ? { OPTCHAT_SUMMARIZER: `fake:lines=${SHORT_LINE_BYTES}` }
        : variant === "native"
          ? {}
          : compactorEnv(provider, model.url)),
    },
  });
  try {
    mkdirSync(join(env.projectDir, "data"), { recursive: true });
    for (let t = 1; t <= turns; t++) writeFileSync(join(env.projectDir, "data", `out-${t}.txt`), toolOutput(t));
    const server = await startOpencodeServer(env);
    const ids = { s1: "", s2: "" };
    try {
      ids.s1 = await server.createSession("bench s1");
      ids.s2 = await server.createSession("bench s2");
      await alternateSessions(turns, context.signal, `${provider}/${variant}`, (session, turn) =>
        ask(server, ids[session], promptFor(session, turn)),
      );
      // The compactor's work for the last turns (leaves, merges, publications) belongs to this bill too.
      const left = url ? await waitCompactorIdle(url, COMPACTOR_IDLE_WAIT_MS) : 0;
      if (left > 0) note(`cache ${provider}/${variant}: ${left} compactor job(s) still open after the wait`);
    } finally {
      await server.stop();
    }
    const requests = model.requests().flatMap((r) => attribute(r) ?? []);
    const ledger = url ? await readCompactorFigures(url) : new Map<string, CompactorFigures>();
    const compactor = {
      s1: ledger.get(ids.s1) ?? NO_COMPACTOR,
      s2: ledger.get(ids.s2) ?? NO_COMPACTOR,
      shared: ledger.get("shared") ?? NO_COMPACTOR,
    };
    const compactorRequestsSeen = model.requests().filter((r) => r.kind === "compactor").length;
    return { provider, variant, requests, compactor, compactorRequestsSeen };
  } finally {
    await cleanupOpencodeEnv(env).catch(() => {});
    await model.close();
    if (url) await dropDatabase(context.serverUrl, name);
  }
}

async function ask(server: OpencodeServer, session: string, text: string): Promise<void> {
  await server.prompt(session, text);
  await server.waitIdle(session, TURN_WAIT_MS);
}

function listSetting<T extends string>(name: string, all: readonly T[], defaults = all): readonly T[] {
  const raw = process.env[name];
  if (!raw) return defaults;
  const picked = raw.split(",").map((s) => s.trim());
  const unknown = picked.filter((p) => !all.includes(p as T));
  if (unknown.length > 0) throw new Error(`${name}: unknown ${unknown.join(", ")}; accepted: ${all.join(", ")}`);
  return picked as T[];
}

export async function runCacheBench(context: BenchContext): Promise<void> {
  const raw = process.env.OPTCHAT_BENCH_CACHE_TURNS;
  const turns = raw ? Number(raw) : 60;
  if (!Number.isInteger(turns) || turns < 2) throw new Error(`OPTCHAT_BENCH_CACHE_TURNS=${raw}: an integer >= 2`);
  const providers = listSetting("OPTCHAT_BENCH_CACHE_PROVIDERS", PROVIDERS);
  const variants = listSetting("OPTCHAT_BENCH_CACHE_VARIANTS", VARIANTS, DEFAULT_VARIANTS);
  const plotPath = process.env.OPTCHAT_BENCH_CACHE_PLOT || join(tmpdir(), "optchat-bench-cache.svg");
  const runs: CacheRun[] = [];
  const figures = new Map<string, ReturnType<typeof summarize>>();
  const sessionFigures = new Map<string, ReturnType<typeof summarize>>();
  const dollars = new Map<
    string,
    { main: number; compactor: number; compactorFigures: ReturnType<typeof compactorFields> }
  >();
  for (const provider of providers) {
    if (variants.includes("v2")) await runCacheBenchV2(context, provider, turns);
    for (const variant of variants) {
      if (variant === "v2") continue;
      const run = await runOne(context, provider, variant, turns);
      runs.push(run);
      const all = summarize(run.requests);
      figures.set(`${provider}/${variant}`, all);
      const perSession: Record<string, unknown> = {};
      for (const session of SESSIONS) {
        const own = summarize(run.requests.filter((r) => r.session === session));
        sessionFigures.set(`${provider}/${variant}/${session}`, own);
        const { bytesAt, ...rest } = own;
        perSession[session] = { ...rest, requestBytesAtTurn: bytesAt(session) };
      }
      const pair = PRICE_PAIRS[provider];
      const project = addFigures([run.compactor.s1, run.compactor.s2, run.compactor.shared]);
      for (const session of SESSIONS) {
        const own = sessionFigures.get(`${provider}/${variant}/${session}`);
        const main = own ? mainDollars(own, pair) : 0;
        const compactor = compactorFields(run.compactor[session], pair);
        (perSession[session] as Record<string, unknown>).compactor = compactor;
        (perSession[session] as Record<string, unknown>).dollars = {
          main: round(main, 4),
          compactor: compactor.dollars,
          total: round(main + compactor.dollars, 4),
        };
      }
      const main = mainDollars(all, pair);
      const compactor = compactorFields(project, pair);
      dollars.set(`${provider}/${variant}`, { main, compactor: compactor.dollars, compactorFigures: compactor });
      const { bytesAt, ...rest } = all;
      process.stdout.write(
        `${JSON.stringify({
          bench: "cache",
          provider,
          variant,
          ...rest,
          requestBytesAtTurn: bytesAt("s1"),
          case: "run",
          prices: pair,
          compactor: {
            ...compactor,
            summarizer: variant === "optchat-250-byte-lines" ? `fake:lines=${SHORT_LINE_BYTES}` : pair.compactor,
            sharedTreeCalls: run.compactor.shared.calls,
            requestsSeenByModel: run.compactorRequestsSeen,
          },
          dollars: { main: round(main, 4), compactor: compactor.dollars, total: round(main + compactor.dollars, 4) },
          perSession,
        })}\n`,
      );
    }
  }
  if (!variants.includes("native")) return;
  const ratios: Record<string, unknown> = {};
  for (const provider of providers) {
    const of = (variant: Variant, field: "billedInputTokens" | "inputTokens") =>
      ratio(figures.get(`${provider}/${variant}`)?.[field], figures.get(`${provider}/native`)?.[field]);
    const sessionRatio = (variant: Variant, session: SessionName) =>
      ratio(
        sessionFigures.get(`${provider}/${variant}/${session}`)?.billedInputTokens,
        sessionFigures.get(`${provider}/native/${session}`)?.billedInputTokens,
      );
    const versus = (variant: Variant) => ({
      billedInputTokens: of(variant, "billedInputTokens"),
      inputTokens: of(variant, "inputTokens"),
      billedS1: sessionRatio(variant, "s1"),
      billedS2: sessionRatio(variant, "s2"),
    });
    ratios[provider] = {
      ...versus("optchat"),
      ...(variants.includes("optchat-isolated") ? { isolated: versus("optchat-isolated") } : {}),
      ...(variants.includes("optchat-250-byte-lines") ? { lines250: versus("optchat-250-byte-lines") } : {}),
    };
  }
  writeFileSync(plotPath, plotSvg(runs, turns));
  process.stdout.write(`${JSON.stringify({ bench: "cache", case: "ratios", turns, ...ratios, plot: plotPath })}\n`);
  const bill = dollarRatios(providers, variants, dollars);
  process.stdout.write(`${JSON.stringify({ bench: "cache", case: "dollars", turns, ...bill })}\n`);
  note(`cache: plot of billed input tokens per turn written to ${plotPath}`);
}

/** Billed input tokens per turn, one panel per provider, a line per (variant, session). */
export function plotSvg(runs: readonly CacheRun[], turns: number): string {
  const providers = [...new Set(runs.map((r) => r.provider))];
  const width = 760;
  const panel = 300;
  const pad = { left: 70, right: 150, top: 30, bottom: 40 };
  const colors: Record<string, string> = {
    "native/s1": "#1f77b4",
    "native/s2": "#9ecae1",
    "optchat/s1": "#d62728",
    "optchat/s2": "#ff9896",
    "optchat-isolated/s1": "#2ca02c",
    "optchat-isolated/s2": "#98df8a",
    "optchat-250-byte-lines/s1": "#9467bd",
    "optchat-250-byte-lines/s2": "#c5b0d5",
  };
  const parts: string[] = [];
  providers.forEach((provider, p) => {
    const y0 = p * panel;
    const series = runs
      .filter((r) => r.provider === provider)
      .flatMap((r) => SESSIONS.map((s) => ({ key: `${r.variant}/${s}`, values: perTurnBilled(r.requests, s, turns) })));
    const max = Math.max(1, ...series.flatMap((s) => s.values));
    const x = (t: number) => pad.left + ((t - 1) / Math.max(1, turns - 1)) * (width - pad.left - pad.right);
    const y = (v: number) => y0 + panel - pad.bottom - (v / max) * (panel - pad.top - pad.bottom);
    parts.push(
      `<text x="${pad.left}" y="${y0 + 18}" font-size="14">${provider}: billed input tokens per turn (uncached + 0.1 read + 1.25 write)</text>`,
      `<line x1="${pad.left}" y1="${y(0)}" x2="${width - pad.right}" y2="${y(0)}" stroke="#000"/>`,
      `<line x1="${pad.left}" y1="${y(0)}" x2="${pad.left}" y2="${y(max)}" stroke="#000"/>`,
      `<text x="${pad.left - 6}" y="${y(max) + 4}" font-size="11" text-anchor="end">${Math.round(max)}</text>`,
      `<text x="${pad.left - 6}" y="${y(0) + 4}" font-size="11" text-anchor="end">0</text>`,
      `<text x="${(width - pad.right + pad.left) / 2}" y="${y(0) + 28}" font-size="11" text-anchor="middle">turn (1…${turns})</text>`,
    );
    series.forEach((s, i) => {
      const points = s.values.map((v, t) => `${round(x(t + 1), 1)},${round(y(v), 1)}`).join(" ");
      parts.push(
        `<polyline fill="none" stroke="${colors[s.key] ?? "#555"}" stroke-width="1.5" points="${points}"/>`,
        `<text x="${width - pad.right + 10}" y="${y0 + pad.top + 16 * i + 10}" font-size="12" fill="${colors[s.key] ?? "#555"}">${s.key}</text>`,
      );
    });
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${panel * providers.length}" font-family="sans-serif">\n${parts.join("\n")}\n</svg>\n`;
}
