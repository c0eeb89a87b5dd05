/**
 * `bench cache`, the OpenCode V2 variant (issue 38): native V2 (`@opencode/cli` 2.1.2, no plugin) against V2 with
 * optchat (plugin/v2), in the same run, on the V1 bench's workload (cache.ts: two sessions, s1 notes with a two-call
 * tool loop every third turn, s2 a 10 KB tool output every second turn, s1's first third alone). The prompts are the
 * V1 bench's with V2's shell tool (`shell`, no `description`). Each variant gets a fresh scripted model (a fresh cache)
 * and one V2 background service (`opencode service start`), which every turn's `opencode run --session` talks to, as a
 * person's terminals do; the window is 200k tokens, so that native V2 never compacts (its compaction request fails
 * against the scripted model, docs/opencode-v2-notes.md).
 *
 * Printed: one `{"case":"v2-run"}` line per variant (cache.ts's figures, plus the compactor's billed tokens) and one
 * `{"case":"v2"}` line: cross-turn prefix reuse, billed input main and with the compactor, ratios to native V2.
 * Selected with OPTCHAT_BENCH_CACHE_VARIANTS=v2 (docs/caching.md "OpenCode V2").
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { migrateAll } from "../../src/memory/migrate.js";
import { startModelServer } from "../model-server.js";
import {
  cleanupOpencode2Env,
  createOpencode2Env,
  OPTCHAT_V2_PLUGIN_DIR,
  type Opencode2Env,
  runOpencode2,
  startService,
} from "../opencode2-harness.js";
import {
  type AttributedRequest,
  alternateSessions,
  attribute,
  billed,
  promptFor,
  summarize,
  toolOutput,
} from "./cache.js";
import {
  addFigures,
  type CompactorFigures,
  compactorEnv,
  readCompactorFigures,
  waitCompactorIdle,
} from "./cache-dollars.js";
import {
  type BenchContext,
  createDatabase,
  dropDatabase,
  note,
  ratio,
  scratchDatabaseName,
  withDatabase,
} from "./common.js";

const V2_WINDOW = 200_000;
const TURN_WAIT_MS = 240_000;
const COMPACTOR_IDLE_WAIT_MS = 60_000;
type SessionName = "s1" | "s2";

/** The V1 bench's prompt with V2's shell tool: `shell` takes `command` (and no `description`). */
export function promptForV2(session: SessionName, turn: number): string {
  return promptFor(session, turn).replace(
    /\{"name":"bash","args":\{"command":("[^"]*"),"description":"[^"]*"\}\}/g,
    '{"name":"shell","args":{"command":$1}}',
  );
}

interface V2Run {
  readonly variant: "native" | "optchat";
  readonly requests: readonly AttributedRequest[];
  readonly compactor: CompactorFigures | undefined;
}

async function runVariant(
  context: BenchContext,
  provider: "anthropic-sim" | "openai-sim",
  variant: "native" | "optchat",
  turns: number,
): Promise<V2Run> {
  const dump = process.env.OPTCHAT_BENCH_CACHE_DUMP;
  const model = await startModelServer(dump ? { logFile: `${dump}.${provider}.v2-${variant}.jsonl` } : {});
  const name = scratchDatabaseName(`cache_v2_${variant}_${provider.replace("-", "_")}`);
  const url = variant === "optchat" ? withDatabase(context.serverUrl, name) : undefined;
  if (url) {
    await createDatabase(context.serverUrl, name);
    await migrateAll(url);
  }
  let env: Opencode2Env | undefined;
  try {
    env = await createOpencode2Env({
      modelUrl: model.url,
      modelApi: provider === "anthropic-sim" ? "anthropic" : "openai-compatible",
      contextLimit: V2_WINDOW,
      plugins: url ? [OPTCHAT_V2_PLUGIN_DIR] : [],
      extraEnv: url
        ? { DATABASE_URL: url, OPTCHAT_READINESS_WAIT_MS: "60000", ...compactorEnv(provider, model.url) }
        : {},
    });
    mkdirSync(join(env.projectDir, "data"), { recursive: true });
    for (let t = 1; t <= turns; t++) writeFileSync(join(env.projectDir, "data", `out-${t}.txt`), toolOutput(t));
    await startService(env);
    const ids: Record<SessionName, string | undefined> = { s1: undefined, s2: undefined };
    await alternateSessions(turns, context.signal, `${provider}/v2-${variant}`, async (session, turn) => {
      const run = await runOpencode2(env as Opencode2Env, promptForV2(session, turn), {
        standalone: false,
        ...(ids[session] ? { session: ids[session] } : {}),
        timeoutMs: TURN_WAIT_MS,
      });
      if (run.code !== 0 || !run.sessionId)
        throw new Error(`bench cache v2 ${variant} ${session} t${turn}: exit ${run.code}\n${run.stderr.slice(-2000)}`);
      ids[session] = run.sessionId;
    });
    const left = url ? await waitCompactorIdle(url, COMPACTOR_IDLE_WAIT_MS) : 0;
    if (left > 0) note(`cache ${provider}/v2-${variant}: ${left} compactor job(s) still open after the wait`);
    const compactor = url ? addFigures([...(await readCompactorFigures(url)).values()]) : undefined;
    return { variant, requests: model.requests().flatMap((r) => attribute(r) ?? []), compactor };
  } finally {
    if (env) await cleanupOpencode2Env(env).catch(() => {});
    await model.close();
    if (url) await dropDatabase(context.serverUrl, name);
  }
}

/** Runs native V2 and optchat on V2 on one provider and prints their lines. */
export async function runCacheBenchV2(
  context: BenchContext,
  provider: "anthropic-sim" | "openai-sim",
  turns: number,
): Promise<void> {
  const figures: Record<string, { main: number; compactor: number; reuse: number | null; within: number | null }> = {};
  for (const variant of ["native", "optchat"] as const) {
    const run = await runVariant(context, provider, variant, turns);
    const all = summarize(run.requests);
    const perSession = Object.fromEntries(
      (["s1", "s2"] as const).map((s) => {
        const { bytesAt: _, ...rest } = summarize(run.requests.filter((r) => r.session === s));
        return [s, rest];
      }),
    );
    const compactorBilled = run.compactor ? Math.round(billed(run.compactor)) : 0;
    figures[variant] = {
      main: all.billedInputTokens,
      compactor: compactorBilled,
      reuse: all.crossTurnPrefixReuseMedian,
      within: all.withinTurnPrefixReuseMedian,
    };
    const { bytesAt, ...rest } = all;
    process.stdout.write(
      `${JSON.stringify({
        bench: "cache",
        case: "v2-run",
        host: "opencode-v2 2.1.2",
        provider,
        variant: `v2-${variant}`,
        ...rest,
        requestBytesAtTurn: bytesAt("s1"),
        compactor: run.compactor
          ? { calls: run.compactor.calls, billedInputTokens: compactorBilled, outputTokens: run.compactor.outputTokens }
          : null,
        perSession,
      })}\n`,
    );
  }
  const native = figures.native;
  const optchat = figures.optchat;
  if (!native || !optchat) return;
  process.stdout.write(
    `${JSON.stringify({
      bench: "cache",
      case: "v2",
      provider,
      turns,
      crossTurnPrefixReuse: { native: native.reuse, optchat: optchat.reuse },
      withinTurnPrefixReuse: { native: native.within, optchat: optchat.within },
      billedInput: {
        native: native.main,
        optchatMain: optchat.main,
        optchatCompactor: optchat.compactor,
        optchatWithCompactor: optchat.main + optchat.compactor,
      },
      ratioToNativeV2: {
        main: ratio(optchat.main, native.main),
        withCompactor: ratio(optchat.main + optchat.compactor, native.main),
      },
      targets: { crossTurnPrefixReuse: 0.95, withCompactorVsNative: 1 },
      met: (optchat.reuse ?? 0) >= 0.95 && optchat.main + optchat.compactor <= native.main,
      billed: "uncached + 0.1 × read + 1.25 × written input tokens",
    })}\n`,
  );
}
