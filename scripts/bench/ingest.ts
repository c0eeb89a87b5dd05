/**
 * `bench ingest`: how fast final records are sealed through the public service API, next to pgbench's TPC-B figure
 * measured on the same server in the same run.
 *
 * Cases (defaults; the numbers follow OPTCHAT_BENCH_CLIENTS and OPTCHAT_BENCH_BATCH):
 *   ingest-1client                    one `memory.ingest(event)` (one transaction) at a time
 *   ingest-8clients-own-sessions      8 async loops sharing one Memory, each writing to its own session
 *   ingest-8clients-own-sessions-after-1000  the same, each session already holding 1000 records (a view of that many
 *                                     parts when no compactor runs: what a long session's write costs)
 *   ingest-8clients-one-session       the same 8 loops all writing to one session (one hot generation row)
 *   ingestMany100-1client             `memory.ingestMany(100 events)` per call, one loop
 *   ingestMany100-8clients-own-sessions  the same with 8 loops, each on its own session
 *
 * Environment:
 *   OPTCHAT_BENCH_SECONDS            measured seconds per case (default 5)
 *   OPTCHAT_BENCH_WARMUP_SECONDS     unmeasured warm-up per case (default 0.5)
 *   OPTCHAT_BENCH_CLIENTS            concurrent loops in the concurrent cases and pgbench clients (default 8)
 *   OPTCHAT_BENCH_BATCH              events per ingestMany call (default 100)
 *   OPTCHAT_BENCH_PREFILL            records per session before the "-after-N" case (default 1000; 0 skips the case)
 *   OPTCHAT_BENCH_PGBENCH_SECONDS    pgbench -T for the multi-client run (default 10; 0 skips pgbench)
 *   OPTCHAT_BENCH_PGBENCH_SCALE      pgbench -i -s (default 10)
 *   OPTCHAT_BENCH_PGBENCH            path of the pgbench binary (default: PATH, /usr/bin, /usr/lib/postgresql/N/bin)
 *   OPTCHAT_BENCH_INGEST_CASES       comma-separated case names to run (default: all; for profiling one case)
 *
 *   growth                            turns through a worker, rows per record in every table before and after the
 *                                     retention floor, next to the documented bound (scripts/bench/growth.ts;
 *                                     OPTCHAT_BENCH_GROWTH=0 skips it)
 *
 * Each case also reports the rows written per sealed record in every optchat table and in pgboss.job
 * (rowsWrittenPerRecord, split by operation in rowOpsPerRecord) and the growth of each table in bytes per record
 * (bytesPerRecord), from the scratch database's statistics around the measured run (scripts/bench/table-writes.ts).
 */
import pg from "pg";
import { resolveConfig } from "../../src/memory/config.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import type { Memory } from "../../src/memory/service.js";
import {
  type BenchContext,
  checkpoint,
  emit,
  envNumber,
  errorMessage,
  note,
  ratio,
  round,
  summarizeLatencies,
  withScratchMemory,
} from "./common.js";
import { runGrowthCase } from "./growth.js";
import { findPgbench, type PgbenchOutcome, runPgbench } from "./pgbench.js";
import { readTableWrites, writesPerRecord } from "./table-writes.js";

const BENCH = "ingest";
const PAYLOAD_BYTES = 300;
const FILLER =
  "The assistant read the failing test, traced the null dereference to the session cache being cleared " +
  "before the compactor finished, and proposed holding the generation lock until the summary is sealed. " +
  "It then ran the suite again: 412 passed, 0 failed, 3 skipped, in 38.2 seconds on the CI runner. ";

interface Settings {
  readonly seconds: number;
  readonly warmupSeconds: number;
  readonly clients: number;
  readonly batch: number;
  readonly pgbenchSeconds: number;
  readonly pgbenchScale: number;
  readonly prefill: number;
  /** Only these cases (undefined: all). */
  readonly cases: readonly string[] | undefined;
}

function readSettings(): Settings {
  return {
    seconds: envNumber("OPTCHAT_BENCH_SECONDS", 5, { min: 0.1 }),
    warmupSeconds: envNumber("OPTCHAT_BENCH_WARMUP_SECONDS", 0.5),
    clients: envNumber("OPTCHAT_BENCH_CLIENTS", 8, { min: 1, integer: true }),
    batch: envNumber("OPTCHAT_BENCH_BATCH", 100, { min: 1, integer: true }),
    pgbenchSeconds: envNumber("OPTCHAT_BENCH_PGBENCH_SECONDS", 10, { integer: true }),
    pgbenchScale: envNumber("OPTCHAT_BENCH_PGBENCH_SCALE", 10, { min: 1, integer: true }),
    prefill: envNumber("OPTCHAT_BENCH_PREFILL", 1000, { integer: true }),
    cases: process.env.OPTCHAT_BENCH_INGEST_CASES?.split(",").map((c) => c.trim()),
  };
}

interface CaseSpec {
  readonly name: string;
  readonly clients: number;
  /** true: every loop writes to one session; false: each loop has its own. */
  readonly oneSession: boolean;
  /** 1: `ingest(event)`; more: `ingestMany(events)`. */
  readonly batch: number;
  /** Records each session already holds before the measured run (sealed with ingestMany, not measured). */
  readonly prefill?: number;
}

function caseSpecs({ clients, batch, prefill, cases }: Settings): CaseSpec[] {
  const many = `${clients}clients`;
  const all: CaseSpec[] = [
    { name: "ingest-1client", clients: 1, oneSession: false, batch: 1 },
    { name: `ingest-${many}-own-sessions`, clients, oneSession: false, batch: 1 },
    ...(prefill > 0
      ? [{ name: `ingest-${many}-own-sessions-after-${prefill}`, clients, oneSession: false, batch: 1, prefill }]
      : []),
    { name: `ingest-${many}-one-session`, clients, oneSession: true, batch: 1 },
    { name: `ingestMany${batch}-1client`, clients: 1, oneSession: false, batch },
    { name: `ingestMany${batch}-${many}-own-sessions`, clients, oneSession: false, batch },
  ];
  return cases === undefined ? all : all.filter((spec) => cases.includes(spec.name));
}

/**
 * Counts statements sent by every pg client in this process (pool clients included): round trips per call are the
 * main cost of a small transaction, so the bench reports them. Bench-only instrumentation; restored at the end.
 */
let statementCount = 0;
function countStatements(): () => void {
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  proto.query = function (this: unknown, ...args: unknown[]) {
    statementCount += 1;
    return original.apply(this, args);
  };
  return () => {
    proto.query = original;
  };
}

interface BenchSession {
  readonly sessionId: string;
  readonly hostSessionId: string;
}

function makeEvent(session: BenchSession, messageId: string): IngestEvent {
  return {
    sessionId: session.sessionId,
    turnId: "t1",
    kind: "assistant",
    finalization: { hostSessionId: session.hostSessionId, messageId, partId: "p1" },
    occurredAt: new Date().toISOString(),
    // Unique content (the message ID leads), so every record stores a new blob as real traffic would.
    content: `[${messageId}] ${FILLER}`.slice(0, PAYLOAD_BYTES),
  };
}

interface DriveResult {
  readonly elapsedMs: number;
  readonly calls: number;
  readonly sealed: number;
  readonly notSealed: number;
  readonly errors: number;
  readonly firstError: string | undefined;
  readonly latencies: number[];
  readonly statements: number;
  readonly cpuMs: number;
}

const MAX_ERRORS_PER_LOOP = 20;

/** Runs `spec.clients` loops against `memory` until `seconds` have passed; each loop issues one call at a time. */
async function drive(
  memory: Memory,
  spec: CaseSpec,
  sessions: readonly BenchSession[],
  seconds: number,
  phase: string,
  signal: AbortSignal,
): Promise<DriveResult> {
  const latencies: number[] = [];
  let calls = 0;
  let sealed = 0;
  let notSealed = 0;
  let errors = 0;
  let firstError: string | undefined;
  const statementsBefore = statementCount;
  const cpuBefore = process.cpuUsage();
  const start = performance.now();
  const deadline = start + seconds * 1000;
  await Promise.all(
    Array.from({ length: spec.clients }, async (_, client) => {
      const session = sessions[spec.oneSession ? 0 : client] as BenchSession;
      let loopErrors = 0;
      for (let n = 0; performance.now() < deadline && !signal.aborted; ) {
        const events: IngestEvent[] = [];
        for (let i = 0; i < spec.batch; i++) events.push(makeEvent(session, `${phase}-c${client}-m${n++}`));
        const t0 = performance.now();
        try {
          const results =
            spec.batch === 1 ? [await memory.ingest(events[0] as IngestEvent)] : await memory.ingestMany(events);
          latencies.push(performance.now() - t0);
          calls += 1;
          for (const result of results) {
            if (result.status === "sealed") sealed += 1;
            else notSealed += 1;
          }
        } catch (error) {
          errors += 1;
          firstError ??= errorMessage(error);
          if (++loopErrors >= MAX_ERRORS_PER_LOOP) break;
        }
      }
    }),
  );
  const elapsedMs = performance.now() - start;
  const cpu = process.cpuUsage(cpuBefore);
  return {
    elapsedMs,
    calls,
    sealed,
    notSealed,
    errors,
    firstError,
    latencies,
    statements: statementCount - statementsBefore,
    cpuMs: (cpu.user + cpu.system) / 1000,
  };
}

/** Seals `count` records in every session, in batches (not measured). */
async function prefill(memory: Memory, sessions: readonly BenchSession[], count: number, phase: string): Promise<void> {
  const BATCH = 250;
  for (const session of sessions) {
    for (let n = 0; n < count; ) {
      const events: IngestEvent[] = [];
      for (let i = 0; i < BATCH && n < count; i++) events.push(makeEvent(session, `${phase}-m${n++}`));
      await memory.ingestMany(events);
    }
  }
}

/** Checks what the case wrote: one row per sealed result, and seqs 0..n-1 without gaps in every session. */
async function verify(memory: Memory, sessions: readonly BenchSession[], expectedRecords: number) {
  const result = await memory.pool.query<{ records: number; gaps: number }>(
    `SELECT coalesce(sum(n), 0)::int AS records, coalesce(sum(span - n), 0)::int AS gaps
       FROM (SELECT count(*) AS n, max(seq) + 1 AS span FROM optchat.records
              WHERE session_id = ANY($1::text[]) GROUP BY session_id, generation) per_generation`,
    [sessions.map((s) => s.sessionId)],
  );
  const row = result.rows[0] ?? { records: 0, gaps: 0 };
  return { dbRecords: row.records, seqGaps: row.gaps, verified: row.records === expectedRecords && row.gaps === 0 };
}

interface CaseOutcome {
  readonly name: string;
  readonly clients: number;
  readonly recordsPerSec: number;
}

async function runCase(
  memory: Memory,
  spec: CaseSpec,
  settings: Settings,
  references: ReadonlyMap<number, number>,
  signal: AbortSignal,
  poolSize: number,
): Promise<CaseOutcome | undefined> {
  const sessionCount = spec.oneSession ? 1 : spec.clients;
  const sessions: BenchSession[] = [];
  for (let i = 0; i < sessionCount; i++) {
    const hostSessionId = `bench-${spec.name}-s${i}`;
    const session = await memory.openSession({ host: "bench", hostSessionId, projectId: "bench-project" });
    sessions.push({ sessionId: session.sessionId, hostSessionId });
  }
  if (spec.prefill) await prefill(memory, sessions, spec.prefill, `${spec.name}-prefill`);
  note(`${spec.name}: ${spec.clients} client(s), ${sessionCount} session(s), ${spec.batch} record(s) per call`);
  const warm =
    settings.warmupSeconds > 0
      ? await drive(memory, spec, sessions, settings.warmupSeconds, `${spec.name}-warm`, signal)
      : undefined;
  if (signal.aborted) return undefined;
  // Table statistics around the measured run only (the warm-up's writes are flushed and counted before it).
  const writesBefore = await readTableWrites(memory.pool, poolSize);
  const run = await drive(memory, spec, sessions, settings.seconds, spec.name, signal);
  const writes = writesPerRecord(writesBefore, await readTableWrites(memory.pool, poolSize), run.sealed);
  // Interrupted while measuring: the figures cover a shorter run; report them, flagged, but leave them out of ratios.
  const interrupted = signal.aborted;
  const seconds = run.elapsedMs / 1000;
  const records = run.sealed;
  const recordsPerSec = round(records / seconds, 1);
  const check = await verify(memory, sessions, (spec.prefill ?? 0) * sessionCount + (warm?.sealed ?? 0) + run.sealed);
  emit(BENCH, spec.name, {
    clients: spec.clients,
    sessions: sessionCount,
    recordsPerCall: spec.batch,
    ...(spec.prefill ? { prefilledRecordsPerSession: spec.prefill } : {}),
    api: spec.batch === 1 ? "ingest" : "ingestMany",
    payloadBytes: PAYLOAD_BYTES,
    seconds: round(seconds, 2),
    count: records,
    calls: run.calls,
    recordsPerSec,
    callsPerSec: round(run.calls / seconds, 1),
    latencyPer: spec.batch === 1 ? "record" : `batch of ${spec.batch}`,
    ...summarizeLatencies(run.latencies),
    statementsPerCall: run.calls > 0 ? round(run.statements / run.calls, 2) : null,
    nodeCpuPct: round((run.cpuMs / run.elapsedMs) * 100, 1),
    vsPgbench: ratio(recordsPerSec, references.get(settings.clients)),
    vsPgbenchSameClients: ratio(recordsPerSec, references.get(spec.clients)),
    ...writes,
    notSealed: run.notSealed,
    errors: run.errors,
    ...(run.firstError ? { firstError: run.firstError } : {}),
    ...check,
    ...(interrupted ? { interrupted: true } : {}),
  });
  return interrupted ? undefined : { name: spec.name, clients: spec.clients, recordsPerSec };
}

async function pgbenchReference(context: BenchContext, settings: Settings): Promise<Map<number, number>> {
  const references = new Map<number, number>();
  const caseName = `pgbench-tpcb-${settings.clients}clients`;
  if (settings.pgbenchSeconds === 0) {
    emit(BENCH, caseName, { skipped: "disabled by OPTCHAT_BENCH_PGBENCH_SECONDS=0" });
    return references;
  }
  const bin = findPgbench();
  if (!bin) {
    emit(BENCH, caseName, { skipped: "pgbench not found" });
    return references;
  }
  const threads = Math.min(2, settings.clients);
  const runs = [{ clients: settings.clients, threads, seconds: settings.pgbenchSeconds }];
  // One client too, so the single-client cases have a like-for-like reference (commit latency dominates both).
  if (settings.clients !== 1) runs.push({ clients: 1, threads: 1, seconds: Math.max(1, Math.round(settings.seconds)) });
  let outcome: PgbenchOutcome;
  try {
    outcome = await runPgbench(context.serverUrl, bin, { scale: settings.pgbenchScale, runs }, context.signal);
  } catch (error) {
    emit(BENCH, caseName, context.signal.aborted ? { interrupted: true } : { error: errorMessage(error) });
    return references;
  }
  for (const result of outcome.results) {
    references.set(result.clients, result.tps);
    emit(BENCH, `pgbench-tpcb-${result.clients}client${result.clients === 1 ? "" : "s"}`, {
      pgbench: outcome.version,
      scale: settings.pgbenchScale,
      initSeconds: outcome.initSeconds,
      ...result,
      tps: round(result.tps, 1),
    });
  }
  return references;
}

export async function runIngestBench(context: BenchContext): Promise<void> {
  const settings = readSettings();
  emit(BENCH, "machine", { ...context.machine, settings });

  const references = await pgbenchReference(context, settings);
  if (context.signal.aborted) return;
  if (references.size > 0) await checkpoint(context.serverUrl);

  const poolSize = Math.max(16, settings.clients);
  const configFor = (databaseUrl: string) => resolveConfig({ overrides: { databaseUrl, poolSize } });
  const restore = countStatements();
  try {
    await withScratchMemory(context.serverUrl, "ingest", configFor, async (memory) => {
      const outcomes: CaseOutcome[] = [];
      for (const spec of caseSpecs(settings)) {
        if (context.signal.aborted) break;
        await checkpoint(context.serverUrl);
        const outcome = await runCase(memory, spec, settings, references, context.signal, poolSize);
        if (outcome) outcomes.push(outcome);
      }
      if (context.signal.aborted) return;
      emit(BENCH, "ratios", {
        note: "records/s of each case divided by pgbench TPC-B tps on the same server (vsPgbench: the multi-client run)",
        pgbenchTps: Object.fromEntries([...references].map(([clients, tps]) => [`${clients}c`, round(tps, 1)])),
        cases: Object.fromEntries(
          outcomes.map((o) => [
            o.name,
            {
              recordsPerSec: o.recordsPerSec,
              vsPgbench: ratio(o.recordsPerSec, references.get(settings.clients)),
              vsPgbenchSameClients: ratio(o.recordsPerSec, references.get(o.clients)),
            },
          ]),
        ),
      });
    });
  } finally {
    restore();
  }
  if (!context.signal.aborted && process.env.OPTCHAT_BENCH_GROWTH !== "0") await growth(context);
}

/** The growth case (scripts/bench/growth.ts) in a database of its own, so its counts are its records' alone. */
async function growth(context: BenchContext): Promise<void> {
  const configFor = (databaseUrl: string) => resolveConfig({ overrides: { databaseUrl } });
  await withScratchMemory(context.serverUrl, "growth", configFor, async (memory, config) => {
    note("growth: turns through a worker, then the retention floor");
    await runGrowthCase(BENCH, memory, config);
  });
}
