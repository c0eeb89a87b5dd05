/**
 * `bench long-turn` (issue 36): one prompt that makes the model call tools again and again, past the model's window.
 *
 * Each (case, variant) runs one fresh scripted model (Anthropic-simulated: OpenCode's own @ai-sdk/anthropic against
 * scripts/model-server.ts /v1/messages, with the simulator's prompt cache, and requests over the window refused as the
 * provider refuses them) and one `opencode serve`, natively or with optchat (its compactor through the real SDK to the
 * same scripted model, so its calls are billed too). The model is the diligent agent of scripts/diligent-agent.ts: it
 * calls `bash` for the first step whose output it cannot see, so lost progress shows as repeated steps. The person
 * sends the task once, then "continue" while the task is not done and the turn ended (at most MAX_TURNS turns).
 *
 * Cases (window tokens / steps × output bytes): 16k/40×4KB, 32k/40×4KB, 200k/150×8KB, 32k/1000×4KB, and
 * 24k/12×1KB with step 4 printing 45 KB (a result no request holds beside the instructions: optchat stops the turn,
 * saying so, and the "continue" turn must resume with no step repeated).
 * One JSON line per (case, variant):
 *   stepsCompleted, stepsRepeated   distinct steps run / runs of a step already run (from OpenCode's own messages)
 *   done                            the agent said every step's output was seen
 *   turns, errors                   turns prompted; assistant messages with an error, and refused requests
 *   requests, summaryRequests       main model requests; native compaction requests (billed: native pays for them)
 *   largestRequestTokens, window    the largest request as the simulator counts it (bytes / 3.5), and the window
 *   overWindow                      requests over the window (refused)
 *   billedInputTokens               uncached + 0.1 × read + 1.25 × written, main + summary + compactor requests;
 *                                   mainBilledInputTokens (main + native summary requests: the main model's) and
 *                                   compactorBilledInputTokens (optchat's compactor) apart
 *   dollars, mainDollars, compactorDollars  at list prices (issue 39): main model as claude-sonnet-4-5, compactor as
 *                                   claude-haiku-4-5 (src/compactor/prices.ts), input and output
 *   compactorCallsByPurpose         the compactor's calls by purpose, from the plugin's cost ledger
 *   withinTurnPrefixReuseMedian     consecutive main requests of one turn: common prefix / later request (cache.ts)
 *   capped, wallSeconds             the run hit its wall-time cap (then the figures are what it did until then)
 * then one `case: "<case>/ratios"` line (optchat / native).
 * Environment:
 *   OPTCHAT_BENCH_LONG_TURN_CASES     comma-separated subset of 16k-40x4k,32k-40x4k,200k-150x8k,32k-1000x4k,24k-12x1k-stop,
 *                                     32k-200x4k (not run by default: a proxy of 32k-1000x4k)
 *   OPTCHAT_BENCH_LONG_TURN_VARIANTS  comma-separated subset of native,optchat
 *   OPTCHAT_BENCH_LONG_TURN_CAP_S     wall-time cap of one run in seconds (default 900)
 *   OPTCHAT_BENCH_LONG_TURN_DUMP      a path prefix: every request the model received to <prefix>.<case>.<variant>.jsonl
 */
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { costOf } from "../../src/compactor/prices.js";
import { migrateAll } from "../../src/memory/migrate.js";
import { DONE_PREFIX, longTaskPrompt, stepOfCommand } from "../diligent-agent.js";
import { type CapturedRequest, type ModelServer, startModelServer } from "../model-server.js";
import {
  cleanupOpencodeEnv,
  createOpencodeEnv,
  type OpencodeServer,
  startOpencodeServer,
} from "../opencode-harness.js";
import { commonPrefixLength } from "../prompt-cache.js";
import { billed } from "./cache.js";
import {
  compactorEnv,
  listPrice,
  PRICE_PAIRS,
  readCompactorFigures,
  type Tokens,
  waitCompactorIdle,
} from "./cache-dollars.js";
import {
  type BenchContext,
  createDatabase,
  dropDatabase,
  envNumber,
  median,
  note,
  ratio,
  round,
  scratchDatabaseName,
  withDatabase,
} from "./common.js";

const ROOT = new URL("../..", import.meta.url).pathname;
const MAX_TURNS = 8;
const OUTPUT_LIMIT = 4_000;

interface LongTurnCase {
  readonly name: string;
  readonly window: number;
  readonly steps: number;
  readonly bytes: number;
  /** One step whose output is larger than any request can hold beside the instructions: the turn stops there. */
  readonly big?: { readonly step: number; readonly bytes: number };
}

const CASES: readonly LongTurnCase[] = [
  { name: "16k-40x4k", window: 16_000, steps: 40, bytes: 4096 },
  { name: "32k-40x4k", window: 32_000, steps: 40, bytes: 4096 },
  { name: "200k-150x8k", window: 200_000, steps: 150, bytes: 8192 },
  { name: "32k-1000x4k", window: 32_000, steps: 1000, bytes: 4096 },
  // A cheaper proxy of the 1,000-step case's shape (many moves of the cut, a growing checkpoint), for iterating.
  { name: "32k-200x4k", window: 32_000, steps: 200, bytes: 4096 },
  // A stopped turn resumed by "continue" (issue 36 deliver 4): step 4 prints 45 KB (under OpenCode's truncation).
  { name: "24k-12x1k-stop", window: 24_000, steps: 12, bytes: 1024, big: { step: 4, bytes: 45_000 } },
];
const VARIANTS = ["native", "optchat"] as const;
type Variant = (typeof VARIANTS)[number];

// biome-ignore lint/suspicious/noExplicitAny: wire JSON as the client sent it
type Json = any;

export interface LongTurnFigures {
  readonly stepsCompleted: number;
  readonly stepsRepeated: number;
  readonly done: boolean;
  readonly turns: number;
  readonly errors: number;
  readonly errorTexts: readonly string[];
  readonly requests: number;
  readonly summaryRequests: number;
  readonly compactorRequests: number;
  readonly largestRequestTokens: number;
  readonly window: number;
  readonly overWindow: number;
  readonly billedInputTokens: number;
  readonly mainBilledInputTokens: number;
  readonly compactorBilledInputTokens: number;
  readonly dollars: number;
  readonly mainDollars: number;
  readonly compactorDollars: number;
  readonly compactorCallsByPurpose?: Record<string, number>;
  readonly withinTurnPrefixReuseMedian: number | null;
  readonly withinTurnPrefixReuseMin: number | null;
  readonly capped: boolean;
  readonly wallSeconds: number;
}

function stripMarks(value: Json): Json {
  if (Array.isArray(value)) return value.map(stripMarks);
  if (typeof value !== "object" || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(value)) if (key !== "cache_control") out[key] = stripMarks(inner);
  return out;
}

function serialized(request: CapturedRequest): string {
  return JSON.stringify(stripMarks({ system: request.body?.system ?? null, messages: request.body?.messages ?? [] }));
}

/** Runs of the task's steps in OpenCode's own messages: every completed or failed bash call of a step. */
// biome-ignore lint/suspicious/noExplicitAny: OpenCode's message JSON
function stepRuns(messages: any[]): number[] {
  const runs: number[] = [];
  for (const message of messages) {
    for (const part of message.parts ?? []) {
      if (part.type !== "tool" || part.tool !== "bash") continue;
      if (part.state?.status !== "completed" && part.state?.status !== "error") continue;
      const step = stepOfCommand(String(part.state?.input?.command ?? ""));
      if (step !== undefined) runs.push(step);
    }
  }
  return runs;
}

/** The requests' tokens summed (input counts every input token, cached or not, as costOf wants). */
function tokensOf(requests: readonly CapturedRequest[]): Tokens {
  const sum = (pick: (r: CapturedRequest) => number) => requests.reduce((total, r) => total + pick(r), 0);
  return {
    inputTokens: sum((r) => r.cache?.inputTokens ?? 0),
    cacheReadTokens: sum((r) => r.cache?.cacheReadTokens ?? 0),
    cacheWriteTokens: sum((r) => r.cache?.cacheWriteTokens ?? 0),
    outputTokens: sum((r) => r.outputTokens ?? 0),
  };
}

/** The figures of one run from what OpenCode stored and what the model received (turn k = requests from turnStarts[k]). */
export function longTurnFigures(
  // biome-ignore lint/suspicious/noExplicitAny: OpenCode's message JSON
  messages: any[],
  requests: readonly CapturedRequest[],
  run: { window: number; turnStarts: readonly number[]; capped: boolean; wallSeconds: number },
): LongTurnFigures {
  const runs = stepRuns(messages);
  const distinct = new Set(runs);
  const errorTexts = messages
    .filter((m) => m.info?.role === "assistant" && m.info?.error)
    .map((m) => String(m.info.error.data?.message ?? m.info.error.name ?? "error").slice(0, 300));
  const refused = requests.filter((r) => r.reply.startsWith("error:"));
  const main = tokensOf(requests.filter((r) => r.cache && (r.kind === "main" || r.kind === "summary")));
  const compactor = tokensOf(requests.filter((r) => r.cache && r.kind === "compactor"));
  const pair = PRICE_PAIRS["anthropic-sim"];
  const mainDollars = costOf(listPrice(pair.main), main);
  const compactorDollars = costOf(listPrice(pair.compactor), compactor);
  const sized = requests.filter((r) => r.cache && (r.kind === "main" || r.kind === "summary"));
  const within: number[] = [];
  for (let t = 0; t < run.turnStarts.length; t++) {
    const from = run.turnStarts[t] as number;
    const to = run.turnStarts[t + 1] ?? Number.POSITIVE_INFINITY;
    const own = requests.filter((r) => r.kind === "main" && r.cache && r.index >= from && r.index < to);
    for (let i = 1; i < own.length; i++) {
      const [a, b] = [serialized(own[i - 1] as CapturedRequest), serialized(own[i] as CapturedRequest)];
      within.push(commonPrefixLength(a, b) / b.length);
    }
  }
  const last = [...messages].reverse().find((m) => m.info?.role === "assistant");
  const lastText = (last?.parts ?? [])
    .filter((p: Json) => p.type === "text")
    .map((p: Json) => String(p.text))
    .join("");
  return {
    stepsCompleted: distinct.size,
    stepsRepeated: runs.length - distinct.size,
    done: lastText.startsWith(DONE_PREFIX),
    turns: run.turnStarts.length,
    errors: errorTexts.length + refused.length,
    errorTexts: [...new Set([...errorTexts, ...refused.map((r) => r.reply)])].slice(0, 5),
    requests: requests.filter((r) => r.kind === "main").length,
    summaryRequests: requests.filter((r) => r.kind === "summary").length,
    compactorRequests: requests.filter((r) => r.kind === "compactor").length,
    largestRequestTokens: Math.max(0, ...sized.map((r) => r.cache?.inputTokens ?? 0)),
    window: run.window,
    overWindow: sized.filter((r) => (r.cache?.inputTokens ?? 0) > run.window).length,
    billedInputTokens: Math.round(billed(main) + billed(compactor)),
    mainBilledInputTokens: Math.round(billed(main)),
    compactorBilledInputTokens: Math.round(billed(compactor)),
    dollars: round(mainDollars + compactorDollars, 4),
    mainDollars: round(mainDollars, 4),
    compactorDollars: round(compactorDollars, 4),
    withinTurnPrefixReuseMedian: within.length > 0 ? round(median(within) as number, 4) : null,
    withinTurnPrefixReuseMin: within.length > 0 ? round(Math.min(...within), 4) : null,
    capped: run.capped,
    wallSeconds: run.wallSeconds,
  };
}

async function runOne(context: BenchContext, c: LongTurnCase, variant: Variant, capS: number) {
  const dump = process.env.OPTCHAT_BENCH_LONG_TURN_DUMP;
  const model = await startModelServer({
    windowTokens: c.window,
    ...(dump ? { logFile: `${dump}.${c.name}.${variant}.jsonl` } : {}),
  });
  const name = scratchDatabaseName(`long_${variant}_${c.name.replace(/-/g, "_")}`);
  const url = variant === "native" ? undefined : withDatabase(context.serverUrl, name);
  if (url) {
    await createDatabase(context.serverUrl, name);
    await migrateAll(url);
  }
  const env = await createOpencodeEnv({
    modelUrl: model.url,
    modelApi: "anthropic",
    contextLimit: c.window,
    outputLimit: OUTPUT_LIMIT,
    ...(url ? { pluginPath: join(ROOT, "plugin", "index.ts"), pluginOptions: { databaseUrl: url } } : {}),
    extraEnv: { OPTCHAT_READINESS_WAIT_MS: "60000", ...(url ? compactorEnv("anthropic-sim", model.url) : {}) },
  });
  const started = Date.now();
  const deadline = started + capS * 1000;
  const turnStarts: number[] = [];
  let capped = false;
  try {
    const server = await startOpencodeServer(env);
    try {
      const session = await server.createSession(`long-turn ${c.name}`);
      for (let turn = 1; turn <= MAX_TURNS; turn++) {
        if (context.signal.aborted) throw new Error("bench long-turn: aborted");
        turnStarts.push(nextIndex(model));
        await server.prompt(session, turn === 1 ? longTaskPrompt(c.steps, c.bytes, c.big) : "continue");
        capped = !(await idleBefore(server, session, model, deadline, `${c.name}/${variant} turn ${turn}`));
        if (capped) {
          await server.abort(session).catch(() => {});
          await server.waitIdle(session, 60_000).catch(() => {});
          break;
        }
        const messages = await server.messages(session);
        if (longTurnFigures(messages, [], { window: c.window, turnStarts, capped, wallSeconds: 0 }).done) break;
      }
      const messages = await server.messages(session);
      const wallSeconds = Math.round((Date.now() - started) / 1000);
      // The compactor's work the run caused is billed too: its last leaves, merges and publications finish first.
      if (url) await waitCompactorIdle(url, 120_000);
      const figures = longTurnFigures(messages, model.requests(), {
        window: c.window,
        turnStarts,
        capped,
        wallSeconds,
      });
      if (!url) return figures;
      const ledger = [...(await readCompactorFigures(url)).values()];
      const byPurpose: Record<string, number> = {};
      for (const f of ledger) for (const [k, n] of Object.entries(f.byPurpose)) byPurpose[k] = (byPurpose[k] ?? 0) + n;
      return { ...figures, compactorCallsByPurpose: byPurpose };
    } finally {
      await server.stop();
    }
  } finally {
    await cleanupOpencodeEnv(env).catch(() => {});
    await model.close();
    if (url) await dropDatabase(context.serverUrl, name);
  }
}

function nextIndex(model: ModelServer): number {
  return (model.requests().at(-1)?.index ?? 0) + 1;
}

/** Waits for the turn to end, noting progress; false when the run's deadline came first. */
async function idleBefore(
  server: OpencodeServer,
  session: string,
  model: ModelServer,
  deadline: number,
  label: string,
): Promise<boolean> {
  const idle = server.waitIdle(session, Math.max(1, deadline - Date.now())).then(
    () => true,
    () => false,
  );
  let lastNote = Date.now();
  for (;;) {
    const done = await Promise.race([idle, delay(5_000).then(() => undefined)]);
    if (done !== undefined) return done;
    if (Date.now() - lastNote >= 60_000) {
      lastNote = Date.now();
      note(`long-turn ${label}: ${model.requests().filter((r) => r.kind === "main").length} main requests so far`);
    }
  }
}

function listSetting<T extends string>(name: string, all: readonly T[], byDefault: readonly T[] = all): readonly T[] {
  const raw = process.env[name];
  if (!raw) return byDefault;
  const picked = raw.split(",").map((s) => s.trim());
  const unknown = picked.filter((p) => !all.includes(p as T));
  if (unknown.length > 0) throw new Error(`${name}: unknown ${unknown.join(", ")}; accepted: ${all.join(", ")}`);
  return picked as T[];
}

export async function runLongTurnBench(context: BenchContext): Promise<void> {
  const cases = listSetting(
    "OPTCHAT_BENCH_LONG_TURN_CASES",
    CASES.map((c) => c.name),
    CASES.filter((c) => c.name !== "32k-200x4k").map((c) => c.name),
  ).map((n) => CASES.find((c) => c.name === n) as LongTurnCase);
  const variants = listSetting("OPTCHAT_BENCH_LONG_TURN_VARIANTS", VARIANTS);
  const capS = envNumber("OPTCHAT_BENCH_LONG_TURN_CAP_S", 900, { min: 10, integer: true });
  for (const c of cases) {
    const figures = new Map<Variant, LongTurnFigures>();
    for (const variant of variants) {
      note(`long-turn ${c.name}/${variant}: start`);
      const f = await runOne(context, c, variant, capS);
      figures.set(variant, f);
      process.stdout.write(
        `${JSON.stringify({ bench: "long-turn", case: c.name, variant, steps: c.steps, outputBytes: c.bytes, ...f })}\n`,
      );
    }
    const native = figures.get("native");
    const optchat = figures.get("optchat");
    if (native && optchat) {
      process.stdout.write(
        `${JSON.stringify({
          bench: "long-turn",
          case: `${c.name}/ratios`,
          billedInputTokens: ratio(optchat.billedInputTokens, native.billedInputTokens),
          mainBilledInputTokens: ratio(optchat.mainBilledInputTokens, native.mainBilledInputTokens),
          dollars: ratio(optchat.dollars, native.dollars),
          // A run stopped by its wall-time cap did less of the task: per completed step, the bills compare.
          ...(optchat.capped || native.capped
            ? {
                capped: { optchat: optchat.capped, native: native.capped },
                dollarsPerStep: ratio(
                  optchat.dollars / Math.max(1, optchat.stepsCompleted),
                  native.dollars / Math.max(1, native.stepsCompleted),
                ),
                mainBilledInputTokensPerStep: ratio(
                  optchat.mainBilledInputTokens / Math.max(1, optchat.stepsCompleted),
                  native.mainBilledInputTokens / Math.max(1, native.stepsCompleted),
                ),
              }
            : {}),
          largestRequestTokens: ratio(optchat.largestRequestTokens, native.largestRequestTokens),
          turns: ratio(optchat.turns, native.turns),
          stepsRepeated: { optchat: optchat.stepsRepeated, native: native.stepsRepeated },
        })}\n`,
      );
    }
  }
}
