/**
 * `bench delete`: the cost of forgetting one session of a large scope (issue 15: "a session of 10,000 records in a
 * scope of 100,000"), and of the shared tree's rebuild after it.
 *
 * Build (real path): SESSIONS sessions of one project scope; the session to delete holds SESSION_RECORDS records, the
 * others share the rest; turns of RECORDS_PER_TURN records are admitted, ingested (`ingestMany`) and finished round-robin
 * over the sessions, so the deleted session's publications are spread over the whole shared tree (the worst case for
 * the rebuild: most shared ancestors lie above one of them). The real compactor (fake extractive summarizer) drains.
 *
 * Cases (JSON lines):
 *   build    sizes and build time (for scale)
 *   plan     the dry run (`planForget`): what would go, and how long the count took
 *   forget   the deletion transaction (`forget`): wall time, per deleted record, what it removed, and its share of
 *            the build time per record (ratio measured in this run)
 *   rebuild  from the commit until every shared ancestor is built again and the queues are empty: time, nodes
 *            rebuilt, and the rebuilt share of the shared tree
 *   verify   the audit after the rebuild (every check, derivation and statistics included) and how long it took
 *   revisions-session, revisions-scope
 *            `optchat rebuild` (src/memory/rebuild.ts) to another compactor model (the fake under another identity,
 *            answering in capitals, so every model-written node is selected and what derives from it changes): first one surviving session (its nodes and the shared lines
 *            derived from them), then the rest of the scope; time computing the texts and committing them, new
 *            revisions, per revision and against building a record (ratio measured in this run), and the audit after
 *
 * Environment:
 *   OPTCHAT_BENCH_DELETE_RECORDS          records of the scope (default 10000; the issue's size is 100000)
 *   OPTCHAT_BENCH_DELETE_SESSION_RECORDS  records of the deleted session (default 1000; the issue's size is 10000)
 *   OPTCHAT_BENCH_DELETE_SESSIONS         sessions (default 10)
 *   OPTCHAT_BENCH_DELETE_RECORDS_PER_TURN records per turn (default 50)
 *   OPTCHAT_BENCH_DELETE_DRAIN_SECONDS    longest wait for the compactor (default 900)
 * The defaults are a tenth of the issue's sizes so that the default run takes a few minutes on 2 cores (building is the
 * long part: every node is a job, a scope's publications serialize on its row); `forget` itself reports per-record
 * costs, which is what scales.
 */
import { createFakeSummarizer } from "../../src/compactor/providers/fake.js";
import type { Summarizer } from "../../src/compactor/summarizer.js";
import { type Config, resolveConfig } from "../../src/memory/config.js";
import { migrateAll } from "../../src/memory/migrate.js";
import { type RebuildRequest, rebuild, rebuildDepsOf } from "../../src/memory/rebuild.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import { type Memory, openMemory } from "../../src/memory/service.js";
import { type RunningCompactor, startWorker } from "../../src/memory/worker.js";
import {
  type BenchContext,
  dropDatabase,
  emit,
  envNumber,
  note,
  round,
  scratchDatabaseName,
  withDatabase,
} from "./common.js";
import { treeCounts, waitForCompactor } from "./shared.js";

const BENCH = "delete";
const TARGET = { records: 100_000, sessionRecords: 10_000 } as const;

function readSettings() {
  return {
    records: envNumber("OPTCHAT_BENCH_DELETE_RECORDS", 10_000, { min: 2, integer: true }),
    sessionRecords: envNumber("OPTCHAT_BENCH_DELETE_SESSION_RECORDS", 1000, { min: 1, integer: true }),
    sessions: envNumber("OPTCHAT_BENCH_DELETE_SESSIONS", 10, { min: 2, integer: true }),
    recordsPerTurn: envNumber("OPTCHAT_BENCH_DELETE_RECORDS_PER_TURN", 50, { min: 2, integer: true }),
    drainSeconds: envNumber("OPTCHAT_BENCH_DELETE_DRAIN_SECONDS", 900, { min: 1 }),
  };
}

type Settings = ReturnType<typeof readSettings>;

/** Turns per session: the deleted session (0) gets sessionRecords, the others share the rest evenly. */
function turnPlan(settings: Settings): number[] {
  const perTurn = settings.recordsPerTurn;
  const others = settings.sessions - 1;
  const rest = Math.max(0, settings.records - settings.sessionRecords);
  return [
    Math.ceil(settings.sessionRecords / perTurn),
    ...Array.from({ length: others }, () => Math.ceil(rest / others / perTurn)),
  ];
}

async function build(memory: Memory, settings: Settings): Promise<{ seconds: number; turns: number; records: number }> {
  const started = performance.now();
  const sessions = [];
  for (let s = 0; s < settings.sessions; s++)
    sessions.push(await memory.openSession({ host: "bench", hostSessionId: `delete-${s}`, projectId: "prj_delete" }));
  const plan = turnPlan(settings);
  const done = plan.map(() => 0);
  let turns = 0;
  let records = 0;
  let message = 0;
  for (let round = 0; done.some((n, s) => n < (plan[s] as number)); round++) {
    for (const [s, session] of sessions.entries()) {
      if ((done[s] as number) >= (plan[s] as number)) continue;
      const turnId = `t${round}`;
      await memory.admitTurn({ sessionId: session.sessionId, turnId, publishes: true });
      const events: IngestEvent[] = [];
      for (let k = 0; k < settings.recordsPerTurn; k++) {
        message += 1;
        events.push({
          sessionId: session.sessionId,
          turnId,
          kind: k === 0 ? "user" : "assistant",
          finalization: { hostSessionId: session.hostSessionId, messageId: `m${message}` },
          occurredAt: new Date(Date.UTC(2026, 0, 1) + message * 1000).toISOString(),
          content: `${s === 0 ? "deletedsession" : `session${s}`} turn ${round} message ${k}: the ${["parser", "queue", "index", "router"][k % 4]} work item ${message}`,
        });
      }
      await memory.ingestMany(events);
      await memory.finishTurn({ sessionId: session.sessionId, turnId }, "completed");
      done[s] = (done[s] as number) + 1;
      turns += 1;
      records += events.length;
    }
  }
  return { seconds: (performance.now() - started) / 1000, turns, records };
}

export async function runDeleteBench(context: BenchContext): Promise<void> {
  const settings = readSettings();
  emit(BENCH, "machine", { ...context.machine, settings, targetSizes: TARGET });
  const name = scratchDatabaseName("delete");
  const databaseUrl = withDatabase(context.serverUrl, name);
  await dropDatabase(context.serverUrl, name);
  let memory: Memory | undefined;
  let worker: RunningCompactor | undefined;
  try {
    await migrateAll(databaseUrl);
    const config = resolveConfig({ overrides: { databaseUrl, poolSize: 16, summarizer: "fake" } });
    memory = await openMemory(config, { applicationName: "optchat-bench" });
    worker = await startWorker(memory, config, () => {});
    note(`delete: building ${settings.records} records, ${settings.sessionRecords} in the session to delete`);
    const buildStarted = performance.now();
    const built = await build(memory, settings);
    const drainDeadline = performance.now() + settings.drainSeconds * 1000;
    const drained = await waitForCompactor(memory, built.turns, drainDeadline, context.signal, "delete build");
    // Ingest and the compactor's drain: every record summarized, every turn published, the shared tree built.
    const buildSeconds = (drained.doneAt - buildStarted) / 1000;
    const before = await treeCounts(memory);
    emit(BENCH, "build", {
      records: built.records,
      turns: built.turns,
      sessions: settings.sessions,
      sharedNodes: before.sharedNodes,
      sessionNodes: before.sessionNodes,
      ingestSeconds: round(built.seconds, 1),
      buildSeconds: round(buildSeconds, 1),
      msPerRecord: round((buildSeconds * 1000) / built.records, 3),
    });
    const victim = await memory.host.findSession("bench", "delete-0");
    if (!victim) throw new Error("delete bench: the session to delete vanished");
    const request = { sessionIds: [victim.sessionId] };

    const planStarted = performance.now();
    const plan = await memory.planForget(request);
    emit(BENCH, "plan", {
      records: plan.records,
      publications: plan.publications,
      ms: round(performance.now() - planStarted, 1),
    });

    const forgetStarted = performance.now();
    const report = await memory.forget(request);
    const forgetMs = performance.now() - forgetStarted;
    const buildMsPerRecord = (buildSeconds * 1000) / built.records;
    emit(BENCH, "forget", {
      recordsDeleted: report.removed.records,
      scopeRecords: built.records,
      publicationsRetired: report.publications,
      sessionNodesDeleted: report.removed.nodes,
      sharedNodesDeleted: report.removed.sharedNodes,
      blobsDeleted: report.removed.blobs,
      rebuildsQueued: report.rebuildsQueued,
      ms: round(forgetMs, 1),
      msPerRecordDeleted: round(forgetMs / Math.max(1, report.removed.records), 4),
      // Measured in this run: deleting a record costs this fraction of building it (ingest + compaction + publication).
      ratioToBuildPerRecord: round(forgetMs / Math.max(1, report.removed.records) / buildMsPerRecord, 4),
    });

    const rebuildStarted = performance.now();
    const rebuilt = await waitForCompactor(
      memory,
      built.turns,
      performance.now() + settings.drainSeconds * 1000,
      context.signal,
      "delete rebuild",
    );
    const rebuildMs = rebuilt.doneAt - rebuildStarted;
    const after = await treeCounts(memory);
    emit(BENCH, "rebuild", {
      ms: round(rebuildMs, 1),
      sharedNodesBefore: before.sharedNodes,
      sharedNodesAfter: after.sharedNodes,
      sharedNodesDeleted: report.removed.sharedNodes,
      rebuiltShareOfSharedTree: round(report.removed.sharedNodes / Math.max(1, before.sharedNodes), 4),
      msPerRebuiltNode: round(rebuildMs / Math.max(1, report.removed.sharedNodes), 3),
    });

    const auditStarted = performance.now();
    const audit = await memory.audit();
    const { rows } = await memory.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM optchat.nodes WHERE text LIKE '%deletedsession%'",
    );
    emit(BENCH, "verify", {
      auditOk: audit.ok,
      violations: audit.violations.length,
      nodesWithDeletedText: rows[0]?.n ?? -1,
      auditMs: round(performance.now() - auditStarted, 1),
    });

    const kept = await memory.host.findSession("bench", "delete-1");
    if (!kept) throw new Error("delete bench: a surviving session vanished");
    const perRecord = { buildMsPerRecord, records: built.records };
    await benchRebuild(memory, config, "revisions-session", { sessionId: kept.sessionId }, perRecord);
    await benchRebuild(memory, config, "revisions-scope", { scopeId: victim.scopeId }, perRecord);
  } finally {
    await worker?.stop().catch(() => {});
    await memory?.close().catch(() => {});
    await dropDatabase(context.serverUrl, name).catch(() => {});
  }
}

/**
 * Another compactor model: the fake summarizer under another identity, answering in capitals (same sizes, other
 * texts), so every model node is selected and everything derived from it (parents, shared lines) changes too.
 */
function otherModel(): Summarizer {
  const fake = createFakeSummarizer();
  return {
    ...fake,
    identity: "fake-extractive/2-bench",
    model: "fake-extractive/2-bench",
    async complete(prompt, options) {
      const answer = await fake.complete(prompt, options);
      return { ...answer, text: answer.text.toUpperCase() };
    },
  };
}

/** One `rebuild` (no worker running meanwhile is needed; the bench's worker is idle), then the audit. */
async function benchRebuild(
  memory: Memory,
  config: Config,
  name: string,
  request: RebuildRequest,
  perRecord: { buildMsPerRecord: number; records: number },
): Promise<void> {
  const started = performance.now();
  let committing: number | undefined;
  const report = await rebuild(rebuildDepsOf(memory.pool, config, otherModel()), request, {
    onStep: () => {
      committing ??= performance.now();
    },
  });
  const ended = performance.now();
  const ms = ended - started;
  const auditStarted = performance.now();
  const audit = await memory.audit();
  emit(BENCH, name, {
    revisions: report.revisions,
    trees: report.trees.length,
    sharedRevisions: report.trees.filter((t) => t.kind === "shared").reduce((n, t) => n + t.revisions, 0),
    modelCalls: report.calls,
    rounds: report.rounds,
    ms: round(ms, 1),
    computeMs: round((committing ?? ended) - started, 1),
    commitMs: round(ended - (committing ?? ended), 1),
    msPerRevision: round(ms / Math.max(1, report.revisions), 3),
    // Measured in this run: rebuilding one node costs this fraction of building one record of the scope.
    ratioToBuildPerRecord: round(ms / Math.max(1, report.revisions) / perRecord.buildMsPerRecord, 4),
    auditOk: audit.ok,
    violations: audit.violations.length,
    auditMs: round(performance.now() - auditStarted, 1),
  });
}
