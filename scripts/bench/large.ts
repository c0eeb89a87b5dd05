/**
 * `bench large-records`: records at the payload limit through the real path, with the longest event-loop stall of
 * each step (issue 9 item 3: a 64 MiB record froze the compactor; its heartbeat stopped, and the worker that took the
 * job over froze the same way). Everything runs in this one process, as in the OpenCode host with its embedded
 * compactor: a stall anywhere delays heartbeats, lease renewals and the host's own work.
 *
 * For each size (1, 8 and 64 MiB by default; 64 MiB is MAX_PAYLOAD_BYTES), a deterministic text of words, lines and
 * some non-ASCII (so multi-byte widths are exercised) is
 *   ingest     sealed as one tool_result with memory.ingest (encoding, hashing, UTF-8 check, search tokens, the blob
 *              write, the tree leaf);
 *   summarize  summarized by the real worker (startWorker, the fake extractive summarizer: its 64 KiB window makes
 *              32 KiB parts, so 64 MiB is 2,048 parts and 2,047 merges) until its leaf is built; the node job's
 *              retry count says whether another worker had to take it over (its lease lapsed);
 *   search     memory.search for a word of the record (found: it is in the indexed first MiB) from a later turn;
 *   zoom       memory.zoom of the record paged to the end with the largest page (maxTokens 1,398,102 → 4 MiB), and
 *              20 default pages (maxTokens 4,000 → 12 KB) at its start and 20 at its last 4 MiB: the time of a page
 *              must not grow with its offset.
 * plus `chunkText` alone at 1, 2, 4 and 8 MiB (the issue's figures) and a `summary` line with per-MiB ratios.
 * Stalls: perf_hooks monitorEventLoopDelay (10 ms resolution) and a 10 ms timer-drift probe; the larger is reported.
 * Targets: 64 MiB summarized in ≤ 60 s, no stall over 200 ms.
 *
 * Environment:
 *   OPTCHAT_BENCH_LARGE_MIB              comma-separated sizes in MiB (default 1,8,64; 64 means exactly 64 MiB)
 *   OPTCHAT_BENCH_LARGE_TIMEOUT_SECONDS  per size, for the summary (default 300)
 */
import { monitorEventLoopDelay } from "node:perf_hooks";
import { NODE_QUEUE } from "../../src/compactor/queue.js";
import { chunkText, cutToBytes } from "../../src/core/summary.js";
import { type Config, resolveConfig } from "../../src/memory/config.js";
import type { Memory } from "../../src/memory/service.js";
import { type CompactorEvent, type RunningCompactor, startWorker } from "../../src/memory/worker.js";
import { type BenchContext, emit, envNumber, note, ratio, round, seededRandom, withScratchMemory } from "./common.js";

const BENCH = "large-records";
const MIB = 1024 * 1024;
const TARGET = { seconds64: 60, stallMs: 200 } as const;
/** A word that occurs in the indexed first MiB of every generated text. */
export const EARLY_WORD = "zephyrine";

const WORDS = (
  "the compactor worker lease heartbeat payload chunk record summary tree node merge build test failed passed error " +
  "warning retry commit query index table column value function return async await import export const let café " +
  "naïve déjà 部署 脚本 データ ß straße"
).split(" ");

/**
 * A deterministic text of exactly `bytes` UTF-8 bytes (or one less, never splitting a character): lines of 4–16 words,
 * {@link EARLY_WORD} on its first line. Built in pieces so that generating 64 MiB takes about a second.
 */
export function largeText(bytes: number, seed = 1): string {
  const random = seededRandom(seed);
  const lines: string[] = [`${EARLY_WORD} starts this record`];
  let size = lines[0]?.length ?? 0;
  while (size < bytes) {
    const count = 4 + Math.floor(random() * 13);
    const words: string[] = [];
    for (let k = 0; k < count; k++) words.push(WORDS[Math.floor(random() * WORDS.length)] as string);
    const line = words.join(" ");
    lines.push(line);
    size += Buffer.byteLength(line) + 1;
  }
  return cutToBytes(lines.join("\n"), bytes);
}

interface Stall {
  /** Longest event-loop delay seen by monitorEventLoopDelay, ms. */
  readonly loopDelayMaxMs: number;
  /** Longest gap between two runs of a 10 ms interval timer, beyond its period, ms. */
  readonly timerDriftMaxMs: number;
  readonly maxStallMs: number;
}

/** The longest gap between two runs of a 10 ms interval timer, beyond its period, until stopped. */
export function timerGaps(): { stop(): number } {
  let last = performance.now();
  let longest = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last - 10);
    last = now;
  }, 10);
  return {
    stop() {
      clearInterval(timer);
      return Math.max(longest, performance.now() - last - 10);
    },
  };
}

/** Measures the longest event-loop stall from now until `stop()`. */
function stallProbe(): { stop(): Stall } {
  const histogram = monitorEventLoopDelay({ resolution: 10 });
  histogram.enable();
  const gaps = timerGaps();
  return {
    stop() {
      const drift = gaps.stop();
      histogram.disable();
      const loop = histogram.max / 1e6;
      return {
        loopDelayMaxMs: round(loop, 1),
        timerDriftMaxMs: round(drift, 1),
        maxStallMs: round(Math.max(loop, drift), 1),
      };
    },
  };
}

async function measured<T>(run: () => Promise<T>): Promise<{ value: T; seconds: number; stall: Stall }> {
  const probe = stallProbe();
  const start = performance.now();
  const value = await run();
  const seconds = (performance.now() - start) / 1000;
  return { value, seconds: round(seconds, 3), stall: probe.stop() };
}

function sizesFromEnv(): number[] {
  const raw = process.env.OPTCHAT_BENCH_LARGE_MIB?.trim() || "1,8,64";
  const sizes = raw.split(",").map((part) => Number(part.trim()));
  if (sizes.some((size) => !Number.isFinite(size) || size <= 0 || size > 64))
    throw new Error(`OPTCHAT_BENCH_LARGE_MIB: expected sizes in MiB between 0 and 64, got '${raw}'`);
  return sizes;
}

function chunkTextAlone(): void {
  const text = largeText(8 * MIB, 7);
  const seconds: Record<string, number> = {};
  for (const mib of [1, 2, 4, 8]) {
    const part = text.slice(0, Math.floor((text.length * mib) / 8));
    const start = performance.now();
    const parts = chunkText(part, 32 * 1024).length;
    seconds[`${mib}MiB`] = round((performance.now() - start) / 1000, 3);
    note(`${BENCH}: chunkText ${mib} MiB: ${seconds[`${mib}MiB`]} s, ${parts} parts`);
  }
  emit(BENCH, "chunkText", {
    partBytes: 32 * 1024,
    seconds,
    ratio8to1: ratio(seconds["8MiB"], seconds["1MiB"]),
    note: "pure chunking of the generated text (fake summarizer's part size); linear means ratio8to1 near 8",
  });
}

interface SizeResult {
  readonly mib: number;
  readonly summarizeSeconds: number | null;
  readonly maxStallMs: number;
}

async function runSize(
  memory: Memory,
  config: Config,
  mib: number,
  timeoutSeconds: number,
  signal: AbortSignal,
): Promise<SizeResult> {
  const bytes = Math.round(mib * MIB);
  const text = largeText(bytes, mib);
  const name = `large-${mib}`;
  const session = await memory.openSession({ host: "bench", hostSessionId: name, projectId: "prj_large" });
  await memory.admitTurn({ sessionId: session.sessionId, turnId: "t0", query: "read the big log" });
  const ingest = await measured(() =>
    memory.ingest({
      sessionId: session.sessionId,
      turnId: "t0",
      kind: "tool_result",
      toolName: "bash",
      toolCallId: "call_0",
      finalization: { hostSessionId: name, messageId: "m0", partId: "p0" },
      occurredAt: new Date().toISOString(),
      content: text,
    }),
  );
  const sealed = ingest.value as { seq?: number };
  const seq = sealed.seq ?? 0;
  note(`${BENCH}: ${mib} MiB ingested in ${ingest.seconds} s (stall ${ingest.stall.maxStallMs} ms)`);

  // The worker starts after the ingest, so the summary is measured alone; its leaf is done when the built event
  // for level 0 of this session's tree arrives.
  let resolveBuilt: (event: CompactorEvent & { type: "built" }) => void = () => {};
  const built = new Promise<CompactorEvent & { type: "built" }>((resolve) => {
    resolveBuilt = resolve;
  });
  const tree = await memory.pool.query<{ tree_id: number }>(
    "SELECT tree_id FROM optchat.trees WHERE session_id = $1 AND kind = 'session'",
    [session.sessionId],
  );
  const treeId = Number(tree.rows[0]?.tree_id);
  const problems: string[] = [];
  let worker: RunningCompactor | undefined;
  let summarize: { value: (CompactorEvent & { type: "built" }) | "timeout"; seconds: number; stall: Stall };
  try {
    summarize = await measured(async () => {
      worker = await startWorker(memory, config, (event) => {
        if (event.type === "built" && event.treeId === treeId && event.level === 0 && event.ref === `${seq}+1`)
          resolveBuilt(event);
        if (event.type === "error" || event.type === "failure" || event.type === "lease_lost")
          problems.push(`${event.type}: ${"error" in event ? event.error : event.ref}`);
      });
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<"timeout">((resolve) => {
        timer = setTimeout(() => resolve("timeout"), timeoutSeconds * 1000);
        signal.addEventListener("abort", () => resolve("timeout"));
      });
      const outcome = await Promise.race([built, timeout]);
      clearTimeout(timer);
      return outcome;
    });
  } finally {
    await worker?.stop(5_000).catch(() => {});
  }
  const job = await memory.pool.query<{ retry_count: number; state: string }>(
    `SELECT retry_count, state FROM pgboss.job WHERE name = $1 AND (data->>'treeId')::bigint = $2
        AND (data->>'level')::int = 0 AND (data->>'index')::int = $3 ORDER BY created_on DESC LIMIT 1`,
    [NODE_QUEUE, treeId, seq],
  );
  const chunks = await memory.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM optchat.node_chunks WHERE tree_id = $1 AND level = 0 AND idx = $2",
    [treeId, seq],
  );
  const done = summarize.value !== "timeout";
  note(
    `${BENCH}: ${mib} MiB ${done ? "summarized" : "NOT summarized"} in ${summarize.seconds} s (stall ${summarize.stall.maxStallMs} ms)`,
  );

  // Search and zoom from a later turn of the session, which sees the record.
  await memory.finishTurn({ sessionId: session.sessionId, turnId: "t0" }, "completed");
  const ctx = { sessionId: session.sessionId, turnId: "t1" };
  await memory.admitTurn({ ...ctx, query: "what did the log say" });
  const search = await measured(() => memory.search(ctx, { query: EARLY_WORD }));
  const ref = `${seq}+1`;
  const bigPages = await measured(async () => {
    const pages: number[] = [];
    const cursors: string[] = [];
    let cursor: string | undefined;
    for (;;) {
      const start = performance.now();
      const page = await memory.zoom(ctx, ref, { maxTokens: Math.ceil((4 * MIB) / 3), ...(cursor ? { cursor } : {}) });
      pages.push(performance.now() - start);
      if (page.kind !== "message" || !page.nextCursor) break;
      cursor = page.nextCursor;
      cursors.push(cursor);
    }
    return { pages, lastCursor: cursors.at(-1) };
  });
  // Default pages (12 KB): 20 from the start, and 20 from the start of the last 4 MiB page (a cursor is opaque; the
  // one the large pages handed back is reused), so the time of a page is compared at both ends of the record.
  const defaultPages = await measured(async () => {
    const walk = async (from: string | undefined) => {
      const times: number[] = [];
      let cursor = from;
      for (let k = 0; k < 20; k++) {
        const start = performance.now();
        const page = await memory.zoom(ctx, ref, cursor ? { cursor } : {});
        times.push(performance.now() - start);
        if (page.kind !== "message" || !page.nextCursor) break;
        cursor = page.nextCursor;
      }
      return times;
    };
    return { first: await walk(undefined), last: await walk(bigPages.value.lastCursor) };
  });
  const median = (values: readonly number[]) => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted.length === 0 ? null : round(sorted[Math.floor(sorted.length / 2)] as number, 2);
  };
  const maxStallMs = Math.max(
    ingest.stall.maxStallMs,
    summarize.stall.maxStallMs,
    search.stall.maxStallMs,
    bigPages.stall.maxStallMs,
    defaultPages.stall.maxStallMs,
  );
  emit(BENCH, `${mib}MiB`, {
    bytes,
    ingest: { seconds: ingest.seconds, ...ingest.stall },
    summarize: {
      done,
      seconds: summarize.seconds,
      ...summarize.stall,
      modelCalls: summarize.value === "timeout" ? null : summarize.value.calls,
      chunks: chunks.rows[0]?.n ?? 0,
      jobState: job.rows[0]?.state ?? null,
      jobRetries: job.rows[0]?.retry_count ?? null,
      problems: problems.slice(0, 3),
    },
    search: {
      seconds: search.seconds,
      hits: search.value.hits.length,
      foundRecord: search.value.hits.some((hit) => hit.ref.endsWith(`${seq}+1`)),
      ...search.stall,
    },
    zoom4MiBPages: {
      pages: bigPages.value.pages.length,
      seconds: bigPages.seconds,
      firstPageMs: round(bigPages.value.pages[0] ?? 0, 2),
      lastPageMs: round(bigPages.value.pages.at(-1) ?? 0, 2),
      medianPageMs: median(bigPages.value.pages),
      ...bigPages.stall,
    },
    zoomDefaultPages: {
      pagesTimed: defaultPages.value.first.length + defaultPages.value.last.length,
      medianFirstPagesMs: median(defaultPages.value.first),
      medianLastPagesMs: median(defaultPages.value.last),
      ...defaultPages.stall,
    },
    maxStallMs,
  });
  return { mib, summarizeSeconds: done ? summarize.seconds : null, maxStallMs };
}

export async function runLargeRecordsBench(context: BenchContext): Promise<void> {
  const sizes = sizesFromEnv();
  const timeoutSeconds = envNumber("OPTCHAT_BENCH_LARGE_TIMEOUT_SECONDS", 300, { min: 1 });
  emit(BENCH, "machine", { ...context.machine, sizesMiB: sizes, timeoutSeconds, targets: TARGET });
  chunkTextAlone();
  const configFor = (databaseUrl: string) => resolveConfig({ overrides: { databaseUrl, summarizer: "fake" } });
  await withScratchMemory(context.serverUrl, "large", configFor, async (memory, config) => {
    const results: SizeResult[] = [];
    for (const mib of sizes) {
      if (context.signal.aborted) return;
      results.push(await runSize(memory, config, mib, timeoutSeconds, context.signal));
    }
    const base = results[0];
    const largest = results.find((result) => result.mib === 64);
    emit(BENCH, "summary", {
      summarizeSecondsPerMiB: Object.fromEntries(
        results.map((r) => [`${r.mib}MiB`, r.summarizeSeconds === null ? null : round(r.summarizeSeconds / r.mib, 3)]),
      ),
      // Per-MiB time of the largest size over the smallest's: 1 when linear.
      linearity: (() => {
        const last = results.at(-1);
        if (!base || !last || base.summarizeSeconds === null || last.summarizeSeconds === null) return null;
        return round(last.summarizeSeconds / last.mib / (base.summarizeSeconds / base.mib), 2);
      })(),
      maxStallMs: Math.max(...results.map((r) => r.maxStallMs)),
      meets64MiBTarget: largest
        ? largest.summarizeSeconds !== null &&
          largest.summarizeSeconds <= TARGET.seconds64 &&
          largest.maxStallMs <= TARGET.stallMs
        : null,
      stallTargetMet: results.every((r) => r.maxStallMs <= TARGET.stallMs),
    });
  });
}
