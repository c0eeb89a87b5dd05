/**
 * Benchmark dispatcher: `npm run bench -- [name...]` (or `node --import tsx scripts/bench.ts [name...]`) runs the
 * named benchmarks in order, or all of them when none is named. Results are JSON lines on stdout, each with `bench`
 * and `case`; progress goes to stderr. Each benchmark works in its own scratch database (optchat_bench_<pid>...)
 * on the server of DATABASE_URL (default postgres://postgres@127.0.0.1:5432) and drops it when done.
 *
 * A benchmark is a module under scripts/bench/ exporting a function `(context: BenchContext) => Promise<void>`;
 * register it in BENCHMARKS below.
 */

import { runCacheBench } from "./bench/cache.js";
import {
  type BenchContext,
  type BenchModule,
  emit,
  errorMessage,
  note,
  readMachineFacts,
  serverUrlFromEnv,
} from "./bench/common.js";
import { runCompactorQualityBench } from "./bench/compactor-quality.js";
import { runDeleteBench } from "./bench/delete.js";
import { runEmbeddedBench } from "./bench/embedded.js";
import { runIngestBench } from "./bench/ingest.js";
import { runLargeRecordsBench } from "./bench/large.js";
import { runLocomoBench } from "./bench/locomo.js";
import { runLongTurnBench } from "./bench/long-turn.js";
import { runPluginBench } from "./bench/plugin.js";
import { runPublicationBench } from "./bench/publication.js";
import { runRunOnlyBench } from "./bench/run-only.js";
import { runSearchScaleBench } from "./bench/search-scale.js";
import { runSharedBench } from "./bench/shared.js";
import { runTreeBench } from "./bench/tree/index.js";

const BENCHMARKS: Readonly<Record<string, BenchModule>> = {
  cache: {
    description:
      "billed input tokens under simulated Anthropic and OpenAI prompt caches, native OpenCode vs optchat, 2 sessions in real OpenCode",
    run: runCacheBench,
  },
  "compactor-quality": {
    description:
      "a corpus of sessions with known facts summarized by each model named: checks on every node and the top, pass rates, tokens, cost",
    run: runCompactorQualityBench,
  },
  delete: {
    description:
      "forgetting one session of a large scope (default 1,000 of 10,000 records; env for 10,000 of 100,000), the shared rebuild after it, and `optchat rebuild` of a session and of the scope to another model",
    run: runDeleteBench,
  },
  embedded: {
    description:
      "the embedded PostgreSQL server: cold/warm start, a second process's start-up, idle RSS, the idle stop, a kill loop (server and writers SIGKILLed) losing no committed record; `npm run bench:embedded` runs it with no server",
    run: runEmbeddedBench,
  },
  ingest: {
    description: "records/s and latency of memory.ingest / ingestMany, 1 and 8 clients, next to pgbench TPC-B",
    run: runIngestBench,
  },
  shared: {
    description:
      "one large scope built through the real path (ingest, turns, compactor); p50/p99 of assembleContext, zoom, search",
    run: runSharedBench,
  },
  "search-scale": {
    description:
      "the search part of `shared` alone: 1M records over 100 scopes bulk-loaded; p50/p99 per query kind, fresh and ANALYZE'd",
    run: runSearchScaleBench,
  },
  "large-records": {
    description:
      "1, 8 and 64 MiB records ingested, summarized by the real worker, searched and zoomed: time and longest event-loop stall",
    run: runLargeRecordsBench,
  },
  locomo: {
    description:
      "LoCoMo-10 through the real path: search evidence recall@5/@10 and oracle zoom walks from the shared view",
    run: runLocomoBench,
  },
  "long-turn": {
    description:
      "one prompt of many tool calls past the model's window (16k-200k), native OpenCode vs optchat in real OpenCode: steps done and repeated, turns, errors, largest request, billed input, prefix reuse",
    run: runLongTurnBench,
  },
  plugin: {
    description:
      "time the plugin adds per model step (transform) and per finalized message (ingest) inside real OpenCode runs, next to the model's",
    run: runPluginBench,
  },
  publication: {
    description:
      "publication lag (finishTurn → publication) p50/p99 with 8 writer and 2 worker processes, steady and with workers SIGKILLed",
    run: runPublicationBench,
  },
  "run-only": {
    description:
      "a soak of 200 `opencode run`s only (3 projects, 2 configurations, local servers killed and idled out): publication lag, stuck jobs, processes left",
    run: runRunOnlyBench,
  },
  tree: {
    description:
      "view fold cost and prefix sharing (synthetic), compactor calls/bytes and nodes/s next to pg-boss no-op jobs",
    run: runTreeBench,
  },
};

function usage(): string {
  const names = Object.entries(BENCHMARKS).map(([name, bench]) => `  ${name.padEnd(10)} ${bench.description}`);
  return [
    "Usage: npm run bench -- [name...]   (no name: run all)",
    "",
    "Benchmarks:",
    ...names,
    "",
    "Settings: DATABASE_URL (the server; its database name is ignored), OPTCHAT_BENCH_SECONDS (per case, default 5),",
    "OPTCHAT_BENCH_PGBENCH_SECONDS (default 10, 0 skips pgbench); see scripts/bench/<name>.ts for the rest.",
  ].join("\n");
}

async function main(argv: readonly string[]): Promise<number> {
  if (argv.some((arg) => arg === "-h" || arg === "--help" || arg === "help")) {
    process.stderr.write(`${usage()}\n`);
    return 0;
  }
  const known = Object.keys(BENCHMARKS);
  const unknown = argv.filter((name) => !Object.hasOwn(BENCHMARKS, name));
  if (unknown.length > 0) {
    const names = unknown.map((name) => `"${name}"`).join(", ");
    const plural = unknown.length > 1 ? "s" : "";
    process.stderr.write(`bench: unknown benchmark${plural} ${names}; known: ${known.join(", ")}\n\n${usage()}\n`);
    return 2;
  }
  const selected = argv.length > 0 ? [...new Set(argv)] : known;

  const controller = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => {
    if (controller.signal.aborted) process.exit(130);
    note(`${signal}: stopping and cleaning up (send it again to exit at once)`);
    controller.abort();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  const serverUrl = serverUrlFromEnv();
  let context: BenchContext;
  try {
    context = { serverUrl, signal: controller.signal, machine: await readMachineFacts(serverUrl) };
  } catch (error) {
    process.stderr.write(`bench: cannot reach PostgreSQL (${errorMessage(error)}); set DATABASE_URL\n`);
    return 1;
  }

  let failed = 0;
  for (const name of selected) {
    if (controller.signal.aborted) break;
    const bench = BENCHMARKS[name] as BenchModule;
    const start = performance.now();
    note(`${name}: start`);
    try {
      await bench.run(context);
      const seconds = ((performance.now() - start) / 1000).toFixed(1);
      note(`${name}: ${controller.signal.aborted ? "interrupted" : "done"} after ${seconds} s`);
    } catch (error) {
      failed += 1;
      note(`${name}: failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      emit(name, "error", { error: errorMessage(error) });
    }
  }
  if (controller.signal.aborted) return 130;
  return failed > 0 ? 1 : 0;
}

process.exitCode = await main(process.argv.slice(2));
