/** `bench tree`'s compactor cases: compactor-inputs, compactor-cache, the pg-boss no-op batches, compactor-throughput. */
import type { PgBoss } from "pg-boss";
import { createFakeSummarizer } from "../../../src/compactor/providers/fake.js";
import { createBoss, NODE_QUEUE_OPTIONS } from "../../../src/compactor/queue.js";
import { resolveConfig } from "../../../src/memory/config.js";
import type { Memory } from "../../../src/memory/service.js";
import { type BenchContext, emit, errorMessage, note, ratio, round, sleep, withScratchMemory } from "../common.js";
import { compactorCacheCases } from "../compactor-cache.js";
import { type PhaseResult, phaseFields, relationSizes, runPhase } from "./phase.js";
import { BENCH, type Settings } from "./settings.js";
import { makeFiller } from "./synthetic.js";

export interface NoopResult {
  readonly variant: string;
  readonly jobs: number;
  readonly completed: number;
  readonly insertMs: number;
  readonly seconds: number;
  readonly jobsPerSec: number;
  readonly capped: boolean;
}

/** Inserts `jobs` no-op jobs into a fresh queue (the node queue's options) and works them; capped at `seconds`. */
export async function noopThroughput(
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

/** The live phase (ingest while the worker runs) and the backlog phase (worker started after), as settings ask. */
async function runPhases(
  memory: Memory,
  settings: Settings,
  filler: ReturnType<typeof makeFiller>,
  databaseUrl: string,
  signal: AbortSignal,
): Promise<{ live: PhaseResult | undefined; backlog: PhaseResult | undefined }> {
  let live: PhaseResult | undefined;
  let backlog: PhaseResult | undefined;
  if (settings.compactorMessages > 0) {
    live = await runPhase(memory, "live", settings, settings.compactorMessages, filler, databaseUrl, signal);
    if (live) live = { ...live, storage: await relationSizes(memory) };
  }
  if (signal.aborted) return { live, backlog };
  if (settings.backlogMessages > 0) {
    backlog = await runPhase(memory, "backlog", settings, settings.backlogMessages, filler, databaseUrl, signal);
  }
  return { live, backlog };
}

/** The compactor-inputs case: calls and bytes at the Summarizer seam, of the first phase run. */
function emitInputs(settings: Settings, live: PhaseResult | undefined, backlog: PhaseResult | undefined): void {
  const first = live ?? backlog;
  if (!first) return;
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

/** The pg-boss no-op batch cases (the compactor's worker options, then batchSize 100), each emitted as it ends. */
async function noopCases(
  context: BenchContext,
  memory: Memory,
  databaseUrl: string,
  settings: Settings,
): Promise<NoopResult[]> {
  const noop: NoopResult[] = [];
  if (settings.noopJobs === 0) return noop;
  const base = { localConcurrency: settings.concurrency, includeMetadata: true } as const;
  const polling = { pollingIntervalSeconds: 1, notifyPollingIntervalSeconds: 5 } as const;
  const variants = [
    {
      variant: "batch1",
      caseName: "pgboss-noop-batch1",
      options: { ...base, batchSize: 1, ...polling },
      description: "the compactor's worker options (src/compactor/worker.ts), queue with the node queue's options",
    },
    {
      variant: "batch100",
      caseName: "pgboss-noop-batch100",
      options: { ...base, batchSize: 100, burstWhenBatchFull: true, ...polling },
      description: "batchSize 100 with burstWhenBatchFull, otherwise the same",
    },
  ];
  for (const { variant, caseName, options, description } of variants) {
    if (context.signal.aborted) return noop;
    note(`tree: pg-boss no-op ${variant}: ${settings.noopJobs} jobs, at most ${settings.noopSeconds} s`);
    const { noopJobs, noopSeconds } = settings;
    const result = await noopThroughput(memory, databaseUrl, variant, noopJobs, noopSeconds, options, context.signal);
    noop.push(result);
    emit(BENCH, caseName, { description, options, ...result });
  }
  return noop;
}

/** The compactor-throughput case: each phase's rates against the no-op batches measured in the same run. */
function emitThroughput(
  settings: Settings,
  live: PhaseResult | undefined,
  backlog: PhaseResult | undefined,
  noop: readonly NoopResult[],
): void {
  const noopRate = (variant: string) => noop.find((r) => r.variant === variant)?.jobsPerSec;
  const phaseRates = (result: PhaseResult) => ({
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
  });
  emit(BENCH, "compactor-throughput", {
    concurrency: settings.concurrency,
    sessions: settings.sessions,
    live: live ? { measured: "first ingest to drained queue (worker running throughout)", ...phaseRates(live) } : null,
    backlog: backlog
      ? { measured: "worker start to drained queue (messages ingested before)", ...phaseRates(backlog) }
      : null,
    noopJobsPerSec: { batch1: noopRate("batch1") ?? null, batch100: noopRate("batch100") ?? null },
    noopBatch100VsBatch1: ratio(noopRate("batch100"), noopRate("batch1")),
  });
}

export async function compactorCases(context: BenchContext, settings: Settings): Promise<void> {
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
    const { live, backlog } = await runPhases(memory, settings, filler, databaseUrl, context.signal);
    if (context.signal.aborted) return;
    emitInputs(settings, live, backlog);
    if (context.signal.aborted) return;
    await compactorCacheCases({ context, memory, settings, filler, databaseUrl, run: runPhase });
    if (context.signal.aborted) return;
    const noop = await noopCases(context, memory, databaseUrl, settings);
    if (context.signal.aborted) return;
    emitThroughput(settings, live, backlog, noop);
  });
}
