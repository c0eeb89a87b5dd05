/**
 * The `growth` case of `bench ingest` (issue 9 item 8): what a record leaves behind in every optchat table and in
 * pgboss.job once the compactor has done everything (leaves, parents, publications), before and after retention,
 * next to the documented bound per record (docs/development.md "Growth and retention").
 *
 * Sessions run turns of user/assistant records through the real path (admitTurn, ingest, settle, finishTurn) with a
 * worker (fake summarizer) running; then the retention floor is applied: finished jobs kept 1 s
 * (OPTCHAT_JOB_RETENTION_SECONDS=1, swept every second) and superseded unpinned revisions deleted at age 0 (the
 * setting's minimum is 60 s; the bench calls the same deletion with 0 to show the floor without waiting).
 *
 * Environment: OPTCHAT_BENCH_GROWTH_SESSIONS (default 4), OPTCHAT_BENCH_GROWTH_TURNS (turns per session, default 6),
 * OPTCHAT_BENCH_GROWTH_RECORDS (records per turn, default 8).
 */
import type { Config } from "../../src/memory/config.js";
import type { Memory } from "../../src/memory/service.js";
import { startWorker } from "../../src/memory/worker.js";
import { deleteSupersededRevisions } from "../../src/store/retention.js";
import { emit, envNumber, errorMessage, round } from "./common.js";
import { readTableWrites, writesPerRecord } from "./table-writes.js";

const TABLES = [
  "records",
  "blobs",
  "staged_items",
  "nodes",
  "view_parts",
  "view_revisions",
  "view_projections",
  "turns",
  "publications",
] as const;

interface Counts extends Record<string, number> {
  records: number;
  turns: number;
  trees: number;
  publications: number;
  open_jobs: number;
  "pgboss.job": number;
}

async function rowCounts(memory: Memory): Promise<Counts> {
  const selects = TABLES.map((t) => `(SELECT count(*) FROM optchat.${t})::int AS ${t}`);
  const result = await memory.pool.query<Counts>(
    `SELECT ${selects.join(", ")},
            (SELECT count(*) FROM pgboss.job WHERE name LIKE 'optchat-%')::int AS "pgboss.job",
            (SELECT count(*) FROM pgboss.job WHERE name LIKE 'optchat-%' AND state < 'completed')::int AS open_jobs,
            (SELECT count(*) FROM optchat.trees)::int AS trees`,
  );
  return result.rows[0] as Counts;
}

function perRecord(counts: Record<string, number>, records: number): Record<string, number> {
  return Object.fromEntries(
    Object.entries(counts)
      .filter(([name]) => name !== "open_jobs" && name !== "trees")
      .map(([name, n]) => [name, round(n / records, 3)]),
  );
}

async function waitFor(check: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return false;
}

export async function runGrowthCase(bench: string, memory: Memory, config: Config): Promise<void> {
  const sessionCount = envNumber("OPTCHAT_BENCH_GROWTH_SESSIONS", 4, { min: 1, integer: true });
  const turnsPerSession = envNumber("OPTCHAT_BENCH_GROWTH_TURNS", 6, { min: 1, integer: true });
  const recordsPerTurn = envNumber("OPTCHAT_BENCH_GROWTH_RECORDS", 8, { min: 1, integer: true });
  const workerConfig: Config = Object.freeze({
    ...config,
    summarizer: "fake",
    jobRetentionSeconds: 1,
    retentionSweepSeconds: 1,
  });
  const before = await rowCounts(memory);
  const writesBefore = await readTableWrites(memory.pool, config.poolSize);
  const worker = await startWorker(memory, workerConfig, () => {});
  try {
    await Promise.all(
      Array.from({ length: sessionCount }, async (_, s) => {
        const host = `growth-s${s}`;
        const session = await memory.openSession({ host: "bench", hostSessionId: host, projectId: "bench-growth" });
        for (let t = 0; t < turnsPerSession; t++) {
          const turnId = `t${t}`;
          await memory.admitTurn({ sessionId: session.sessionId, turnId, query: `question ${t}` });
          for (let r = 0; r < recordsPerTurn; r++) {
            await memory.ingest({
              sessionId: session.sessionId,
              turnId,
              kind: r === 0 ? "user" : "assistant",
              finalization: { hostSessionId: host, messageId: `t${t}-m${r}` },
              occurredAt: new Date().toISOString(),
              content: `turn ${t} record ${r}: ${"the build passed after the cache fix; ".repeat(1 + (r % 4))}`,
            });
          }
          await memory.settle(session.sessionId, { timeoutMs: 120_000 });
          await memory.finishTurn({ sessionId: session.sessionId, turnId }, "completed");
        }
      }),
    );
    const turns = sessionCount * turnsPerSession;
    const published = await waitFor(async () => {
      const counts = await rowCounts(memory);
      return counts.publications === turns && counts.open_jobs === 0;
    }, 180_000);
    const afterRun = await rowCounts(memory);
    const records = afterRun.records - before.records;
    // Rows written (inserted, updated, deleted) per record while the compactor worked, pgboss.job included.
    const written = writesPerRecord(writesBefore, await readTableWrites(memory.pool, config.poolSize), records);
    // The retention floor: revisions superseded at any age and pinned by no turn; finished jobs past 1 s.
    const revisionsDeleted = await deleteSupersededRevisions(memory.pool, { olderThanSeconds: 0 });
    const jobsSwept = await waitFor(async () => (await rowCounts(memory))["pgboss.job"] === 0, 30_000);
    const afterRetention = await rowCounts(memory);
    // The documented bound (docs/development.md "Growth and retention"), for this run's records, turns and trees.
    const publications = afterRetention.publications;
    const bound: Record<string, number> = {
      records: 1,
      blobs: 1,
      staged_items: 0,
      nodes: round((2 * records + 2 * publications) / records, 3),
      view_parts: round((2 * records + 2 * publications) / records, 3),
      view_revisions: round((2 * afterRetention.turns + afterRetention.trees) / records, 3),
      turns: round(turns / records, 3),
      publications: round(turns / records, 3),
      "pgboss.job": round(afterRetention.open_jobs / records, 3),
    };
    const retained = perRecord(afterRetention, records);
    const withinBound = Object.entries(bound).every(([name, limit]) => (retained[name] ?? 0) <= limit + 1e-9);
    emit(bench, "growth", {
      sessions: sessionCount,
      turns,
      records,
      published,
      note: "rows per record in each table after the compactor finished, then after the retention floor; bound: the documented maximum after retention",
      rowsWrittenPerRecord: written.rowsWrittenPerRecord,
      rowOpsPerRecord: written.rowOpsPerRecord,
      rowsPerRecordAfterRun: perRecord(afterRun, records),
      rowsPerRecordAfterRetention: retained,
      boundPerRecord: bound,
      withinBound,
      revisionsDeleted,
      jobsSwept,
    });
  } catch (error) {
    emit(bench, "growth", { error: errorMessage(error) });
  } finally {
    await worker.stop(5000).catch(() => {});
  }
}
