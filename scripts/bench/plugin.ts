/**
 * `bench plugin`: the time the optchat plugin adds inside real OpenCode 1.18.33 runs, next to the model-call time of the
 * scripted server in the same run.
 *
 * One `opencode serve` process loads the plugin (embedded compactor on, deterministic summarizer) and drives TURNS
 * turns in one session against scripts/model-server.ts; every other turn is a two-step tool loop (a bash call, then
 * the answer), so the session's memory grows while the plugin replaces the native history on every step. The plugin
 * writes one JSON line per admission, request transform and finalized assistant message (OPTCHAT_TIMINGS_FILE);
 * the model server records how long it took to answer each request. Cases:
 *   transform  per model step: the request transform (memory assembly + replacement), p50/p99 in ms
 *   admit      per user message: chat.message (session lease, turn admission with its snapshot, the user record)
 *   ingest     per finalized assistant message: its records sealed (tree leaves, view fold, search tokens, jobs)
 *   model      per main request: the scripted model's answer time, the baseline the plugin's time compares to
 *   import     importing the plugin in OpenCode's Bun, wall and CPU ms: what OpenCode's thread imports (the entry and
 *              the thread bridge) and what the plugin's thread imports (scripts/bench/plugin-import.ts)
 *   run        per `opencode run` invocation: wall time with and without the plugin, and with a plugin that has no
 *              hooks (OpenCode's own charge for loading any plugin), interleaved (scripts/bench/plugin-run.ts);
 *              measured first, on the fresh database
 * Environment:
 *   OPTCHAT_BENCH_PLUGIN_TURNS   turns (default 40; 0 skips the serve cases)
 *   OPTCHAT_BENCH_PLUGIN_RUNS    rounds of `opencode run` (default 15; 0 skips the run case)
 *   OPTCHAT_BENCH_PLUGIN_IMPORTS rounds of the import case (default 9; 0 skips it)
 *   OPTCHAT_BENCH_PLUGIN_BASELINE another checkout's plugin/index.ts, measured in the same rounds (import and run), on
 *                                a database of its own migrated by that checkout's src/memory/migrate.ts
 */
import { existsSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import pg from "pg";
import { migrateAll } from "../../src/memory/migrate.js";
import { startModelServer } from "../model-server.js";
import { cleanupOpencodeEnv, createOpencodeEnv, type OpencodeEnv, startOpencodeServer } from "../opencode-harness.js";
import {
  type BenchContext,
  emit,
  envNumber,
  note,
  ratio,
  round,
  summarizeLatencies,
  withScratchDatabase,
} from "./common.js";
import { runPluginImportBench } from "./plugin-import.js";
import { runPluginRunBench } from "./plugin-run.js";

const ROOT = new URL("../..", import.meta.url).pathname;

export async function runPluginBench(context: BenchContext): Promise<void> {
  await withScratchDatabase(context.serverUrl, "plugin", ({ url }) => measurePlugin(context, url));
}

/**
 * The migrations of the checkout whose plugin entry is `pluginPath` (its src/memory/migrate.ts `migrateAll`), so that an
 * older checkout runs on the schema it was written for (this checkout's schema can refuse it: a migration it does not
 * know, a column it no longer writes). This checkout's own when that module is not there.
 */
async function baselineMigrate(pluginPath: string): Promise<(url: string) => Promise<unknown>> {
  const module = join(dirname(pluginPath), "..", "src", "memory", "migrate.ts");
  if (!existsSync(module)) return migrateAll;
  const imported = (await import(pathToFileURL(module).href)) as { migrateAll?: (url: string) => Promise<unknown> };
  if (typeof imported.migrateAll !== "function")
    throw new Error(
      `${module} exports no migrateAll: OPTCHAT_BENCH_PLUGIN_BASELINE must be a plugin/index.ts of an optchat checkout`,
    );
  return imported.migrateAll;
}

/** Every case of the plugin bench, on the scratch database at `url`. */
async function measurePlugin(context: BenchContext, url: string): Promise<void> {
  const turns = envNumber("OPTCHAT_BENCH_PLUGIN_TURNS", 40, { min: 0, integer: true });
  const runs = envNumber("OPTCHAT_BENCH_PLUGIN_RUNS", 15, { min: 0, integer: true });
  const model = await startModelServer();
  const timings = join(tmpdir(), `optchat-bench-plugin-${process.pid}.jsonl`);
  const env = await createOpencodeEnv({
    modelUrl: model.url,
    pluginPath: join(ROOT, "plugin", "index.ts"),
    pluginOptions: { databaseUrl: url },
    extraEnv: { OPTCHAT_TIMINGS_FILE: timings },
  });
  const bare = await createOpencodeEnv({ modelUrl: model.url });
  try {
    await runPluginImportBench(
      // What OpenCode's thread imports (the entry and the bridge), and what the plugin's thread imports.
      [join(ROOT, "plugin", "index.ts"), join(ROOT, "plugin", "transport", "remote-hooks.ts")].join(","),
      join(ROOT, "plugin", "host", "hooks.ts"),
      context.signal,
      process.env.OPTCHAT_BENCH_PLUGIN_BASELINE,
    );
    await migrateAll(url);
    if (runs > 0) {
      const db = new pg.Pool({ connectionString: url, max: 1 });
      const baselinePath = process.env.OPTCHAT_BENCH_PLUGIN_BASELINE;
      // The reference: a plugin with no hooks, measured in the same rounds (scripts/bench/empty-plugin.ts).
      const empty = await createOpencodeEnv({
        modelUrl: model.url,
        pluginPath: join(ROOT, "scripts", "bench", "empty-plugin.ts"),
      });
      const runBench = (baseline?: OpencodeEnv) =>
        runPluginRunBench({ env, timings }, { env: bare }, model, db, context.signal, {
          ...(baseline ? { baseline: { env: baseline } } : {}),
          emptyPlugin: { env: empty },
        });
      try {
        if (!baselinePath) await runBench();
        else
          await withScratchDatabase(context.serverUrl, "plugin_base", async ({ url: baselineUrl }) => {
            await (await baselineMigrate(baselinePath))(baselineUrl);
            const baseline = await createOpencodeEnv({
              modelUrl: model.url,
              pluginPath: baselinePath,
              pluginOptions: { databaseUrl: baselineUrl },
            });
            try {
              await runBench(baseline);
            } finally {
              await cleanupOpencodeEnv(baseline).catch(() => {});
            }
          });
      } finally {
        await db.end();
        await cleanupOpencodeEnv(empty).catch(() => {});
      }
    }
    if (turns === 0) return;
    model.clear();
    rmSync(timings, { force: true });
    const server = await startOpencodeServer(env);
    try {
      const session = await server.createSession("bench");
      const started = Date.now();
      for (let turn = 0; turn < turns && !context.signal.aborted; turn++) {
        const text =
          turn % 2 === 0
            ? `T${turn} note ${turn}: the build uses cache key v${turn}. REPLY=noted v${turn}`
            : `T${turn} TOOLS=[{"name":"bash","args":{"command":"echo step ${turn}","description":"echo"}}] END`;
        await server.prompt(session, text);
        await server.waitIdle(session, 120_000);
        if (turn % 10 === 9) note(`plugin: ${turn + 1}/${turns} turns, ${Math.round((Date.now() - started) / 1000)} s`);
      }
    } finally {
      await server.stop();
    }
    const lines = readFileSync(timings, "utf8")
      .split("\n")
      .filter(Boolean)
      .map(
        (line) =>
          JSON.parse(line) as {
            op: string;
            ms: number;
            status?: string;
            records?: number;
            assembleMs?: number;
            reused?: boolean;
          },
      );
    const main = model.requests().filter((r) => r.kind === "main");
    const modelMs = summarizeLatencies(main.map((r) => r.replyMs));
    const sizes = { turns, modelRequests: main.length };
    for (const op of ["transform", "admit", "ingest"]) {
      const samples = lines.filter((l) => l.op === op);
      const latency = summarizeLatencies(samples.map((l) => l.ms));
      emit("plugin", op, {
        ...sizes,
        samples: samples.length,
        ...latency,
        ...(op === "transform"
          ? {
              injected: samples.filter((s) => s.status === "injected").length,
              assembleContext: summarizeLatencies(
                samples.flatMap((s) => (s.assembleMs === undefined || s.reused ? [] : [s.assembleMs])),
              ),
              // Later steps of a turn reuse its assembly while it fits (plugin/host/adapter.ts).
              assembled: summarizeLatencies(samples.filter((s) => !s.reused).map((s) => s.ms)),
              reused: summarizeLatencies(samples.filter((s) => s.reused).map((s) => s.ms)),
              reusedSteps: samples.filter((s) => s.reused).length,
            }
          : op === "ingest"
            ? { records: samples.reduce((sum, s) => sum + (s.records ?? 0), 0) }
            : {}),
        p50VsModelP50: ratio(latency.p50Ms, modelMs.p50Ms),
      });
    }
    emit("plugin", "model", { ...sizes, samples: main.length, ...modelMs, note: "scripted server answer time" });
    note(`plugin: model p50 ${round(modelMs.p50Ms ?? 0)} ms over ${main.length} requests`);
  } finally {
    await cleanupOpencodeEnv(bare).catch(() => {});
    await cleanupOpencodeEnv(env).catch(() => {});
    rmSync(timings, { force: true });
    await model.close();
  }
}
