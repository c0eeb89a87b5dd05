/** One compactor phase of `bench tree` (live or backlog) and its fields. */
import { createFakeSummarizer } from "../../../src/compactor/providers/fake.js";
import { NODE_QUEUE } from "../../../src/compactor/queue.js";
import type { Summarizer } from "../../../src/compactor/summarizer.js";
import { type RunningCompactor, startCompactor } from "../../../src/compactor/worker.js";
import { COMPACT_SYSTEM_PROMPT } from "../../../src/core/summary.js";
import type { Memory } from "../../../src/memory/service.js";
import { compactorRecorder, note, ratio, round } from "../common.js";
import { foldParams } from "./fold.js";
import type { Settings } from "./settings.js";
import {
  type BenchSession,
  countingSummarizer,
  countNodes,
  fullTreeNodes,
  ingestAll,
  type NodeCounts,
  openSessions,
  type SummarizerStats,
  waitDrained,
} from "./workload.js";

export interface PhaseResult {
  readonly phase: string;
  readonly sessions: readonly BenchSession[];
  readonly messages: number;
  readonly sealed: number;
  readonly messageBytes: number;
  readonly ingestSeconds: number;
  /** live: first ingest → drained; backlog: worker start → drained. */
  readonly buildSeconds: number;
  readonly wallSeconds: number;
  readonly stats: SummarizerStats;
  readonly counts: NodeCounts;
  readonly events: Record<string, number>;
  readonly firstProblem: string | undefined;
  readonly nodeCpuPct: number;
  readonly jobs: JobTimings;
  readonly storage?: Record<string, number>;
}

export interface JobTimings {
  readonly jobs: number;
  /** Created (or startAfter, or the phase's start if later) → fetched by a worker, ms: p50, p90, p99. */
  readonly waitMs: readonly number[] | null;
  /** Fetched → completed (pg-boss's completed_on is the commit transaction's start), ms: p50, p90, p99. */
  readonly runMs: readonly number[] | null;
}

/** Queue wait and run time of the phase's node jobs, from pg-boss's own timestamps. */
export async function jobTimings(memory: Memory, sessions: readonly BenchSession[], since: Date): Promise<JobTimings> {
  const result = await memory.pool.query<{ jobs: number; wait: number[] | null; run: number[] | null }>(
    `WITH t AS (SELECT tree_id FROM optchat.trees WHERE session_id = ANY($1::text[])),
     j AS (SELECT extract(epoch FROM started_on - greatest(created_on, start_after, $3::timestamptz)) * 1000 AS wait_ms,
                  extract(epoch FROM completed_on - started_on) * 1000 AS run_ms
             FROM pgboss.job
            WHERE name = $2 AND state = 'completed' AND (data->>'treeId')::bigint IN (SELECT tree_id FROM t))
     SELECT count(*)::int AS jobs,
            percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY wait_ms) AS wait,
            percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY run_ms) AS run
       FROM j`,
    [sessions.map((session) => session.sessionId), NODE_QUEUE, since],
  );
  const row = result.rows[0];
  const ms = (values: number[] | null | undefined) => (values ? values.map((v) => round(Number(v), 1)) : null);
  return { jobs: row?.jobs ?? 0, waitMs: ms(row?.wait), runMs: ms(row?.run) };
}

/** What a phase timed: the ingest, the build (to a drained queue), and the CPU and time the build started at. */
interface PhaseTimes {
  readonly sealed: number;
  readonly ingestSeconds: number;
  readonly buildSeconds: number;
  readonly cpuBefore: NodeJS.CpuUsage;
  readonly buildStartedAt: Date;
}

/**
 * Times a phase: `live` starts the worker, then ingests while it runs (the build counted from the first ingest);
 * `backlog` ingests first, then starts the worker (the build counted from its start).
 */
async function timePhase(
  phase: "live" | "backlog",
  steps: { start(): Promise<void>; ingest(): Promise<number>; drain(from: number): Promise<void> },
): Promise<PhaseTimes> {
  if (phase === "live") {
    await steps.start();
    const cpuBefore = process.cpuUsage();
    const buildStartedAt = new Date();
    const start = performance.now();
    const sealed = await steps.ingest();
    const ingestSeconds = (performance.now() - start) / 1000;
    await steps.drain(start);
    return { sealed, ingestSeconds, buildSeconds: (performance.now() - start) / 1000, cpuBefore, buildStartedAt };
  }
  const start = performance.now();
  const sealed = await steps.ingest();
  const ingestSeconds = (performance.now() - start) / 1000;
  const cpuBefore = process.cpuUsage();
  const buildStartedAt = new Date();
  const buildStart = performance.now();
  await steps.start();
  await steps.drain(buildStart);
  return { sealed, ingestSeconds, buildSeconds: (performance.now() - buildStart) / 1000, cpuBefore, buildStartedAt };
}

/**
 * One compactor phase: `live` (worker running while messages arrive) or `backlog` (messages first). `inner` is the
 * summarizer (default the fake); `label` names the phase's sessions, so several live phases can share a database.
 */
export async function runPhase(
  memory: Memory,
  phase: "live" | "backlog",
  settings: Settings,
  messages: number,
  filler: string,
  databaseUrl: string,
  signal: AbortSignal,
  inner: Summarizer = createFakeSummarizer(),
  label: string = phase,
): Promise<PhaseResult | undefined> {
  const sessions = await openSessions(memory, phase, settings.sessions, messages, settings.seed, filler, label);
  const messageBytes = sessions.reduce(
    (sum, s) => sum + s.messages.reduce((total, m) => total + Buffer.byteLength(m.content, "utf8"), 0),
    0,
  );
  const { summarizer, stats } = countingSummarizer(inner);
  const recorder = compactorRecorder();
  const compactorSettings = {
    databaseUrl,
    concurrency: settings.concurrency,
    fold: foldParams(settings),
    failureRetrySeconds: 10,
  };
  const running: { compactor?: RunningCompactor } = {};
  const start = async () => {
    running.compactor = await startCompactor(memory.pool, compactorSettings, summarizer, recorder.report);
  };
  try {
    const wallStart = performance.now();
    note(
      phase === "live"
        ? `tree: live phase: ${messages} messages in ${sessions.length} sessions, worker running`
        : `tree: backlog phase: ${messages} messages in ${sessions.length} sessions, then the worker`,
    );
    const { sealed, ingestSeconds, buildSeconds, cpuBefore, buildStartedAt } = await timePhase(phase, {
      start,
      ingest: () => ingestAll(memory, sessions, signal),
      drain: (from) => waitDrained(memory, sessions, from + settings.drainSeconds * 1000, signal),
    });
    const wallSeconds = (performance.now() - wallStart) / 1000;
    const cpu = process.cpuUsage(cpuBefore);
    const cpuPct = round(((cpu.user + cpu.system) / 1000 / (buildSeconds * 1000)) * 100, 1);
    if (signal.aborted) return undefined;
    await running.compactor?.stop(10_000);
    running.compactor = undefined;
    const counts = await countNodes(memory, sessions);
    return {
      phase: label,
      sessions,
      messages,
      sealed,
      messageBytes,
      ingestSeconds,
      buildSeconds,
      wallSeconds,
      stats,
      counts,
      events: recorder.events,
      firstProblem: recorder.first(),
      nodeCpuPct: cpuPct,
      jobs: await jobTimings(memory, sessions, buildStartedAt),
    };
  } finally {
    await running.compactor?.stop(5000).catch(() => {});
  }
}

export async function relationSizes(memory: Memory): Promise<Record<string, number>> {
  const result = await memory.pool.query<Record<string, number>>(
    `SELECT pg_total_relation_size('optchat.view_revisions')::bigint AS view_revisions,
            pg_total_relation_size('optchat.view_parts')::bigint AS view_parts,
            pg_total_relation_size('optchat.nodes')::bigint AS nodes`,
  );
  return result.rows[0] ?? {};
}

export function phaseFields(result: PhaseResult): Record<string, unknown> {
  const { counts, stats, messages } = result;
  const perSession = result.sessions.map((s) => s.messages.length);
  const expectedNodes = perSession.reduce((sum, leaves) => sum + fullTreeNodes(leaves), 0);
  return {
    phase: result.phase,
    messages,
    sessions: result.sessions.length,
    sealed: result.sealed,
    meanMessageBytes: round(result.messageBytes / Math.max(1, messages), 0),
    nodes: counts.nodes,
    expectedNodes,
    complete: counts.nodes === expectedNodes && counts.distinct_nodes === expectedNodes,
    leaves: counts.leaves,
    parents: counts.nodes - counts.leaves,
    modelCalls: stats.calls,
    modelCallsFromNodes: counts.attempts,
    callsPerMessage: ratio(stats.calls, messages),
    callsPerStoredRecord: ratio(stats.calls, messages),
    callsPerNode: ratio(stats.calls, counts.nodes),
    retryCalls: stats.retryCalls,
    freeNodeShare: ratio(counts.free_nodes, counts.nodes),
    freeLeafShare: ratio(counts.free_leaves, counts.leaves),
    freeParentShare: ratio(counts.free_parents, counts.nodes - counts.leaves),
    overshootNodes: counts.overshoot_nodes,
    requestBytes: stats.requestBytes,
    requestBytesPerMessage: round(stats.requestBytes / Math.max(1, messages), 0),
    requestBytesPerCall: stats.calls > 0 ? round(stats.requestBytes / stats.calls, 0) : null,
    contextBytesPerCall: stats.calls > 0 ? round(stats.contextBytes / stats.calls, 0) : null,
    systemPromptBytes: Buffer.byteLength(COMPACT_SYSTEM_PROMPT, "utf8"),
    summarizerBusyMs: round(stats.busyMs, 0),
    viewRevisionsPerMessage: ratio(counts.view_revisions, messages),
    // Fold events are derived from the nodes (migration 005); a revision's parts are rows valid over revisions.
    viewPartRowsPerMessage: ratio(counts.view_parts, messages),
    finalViewLines: counts.final_view_lines,
    finalViewBytes: counts.final_view_bytes,
    events: result.events,
    ...(result.firstProblem ? { firstProblem: result.firstProblem } : {}),
  };
}
