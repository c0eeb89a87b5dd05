import { describe, expect, it } from "vitest";
import { type CompactorEvent, startWorker } from "../../src/memory/worker.js";
import { eventually, ingestEvent, useTestMemory } from "../helpers.js";

const db = useTestMemory();

describe("start-up sweep", () => {
  it("re-schedules ready nodes and publications whose jobs were lost, and nothing that still has a job", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "sweep", projectId: "prj_sweep" });
    const ctx = { sessionId: session.sessionId, turnId: "t1" };
    await db.memory.admitTurn(ctx);
    await db.memory.ingestMany(
      Array.from({ length: 6 }, (_, k) =>
        ingestEvent({
          sessionId: session.sessionId,
          turnId: "t1",
          kind: "assistant" as const,
          host: "sweep",
          messageId: `m${k}`,
          occurredAt: new Date(Date.UTC(2026, 10, 25, 9, k)).toISOString(),
          content: `step ${k}: ${"a long explanation of what was done and why it matters later. ".repeat(12)}`,
        }),
      ),
    );
    await db.memory.finishTurn(ctx, "completed");
    // t1's cover is not summarized yet, so its publication has no job to lose: the node commit that completes the
    // cover schedules it. A turn whose cover was complete when it finished (short messages, built at ingestion) got
    // its publication job at once; that one is lost below and must be found by the sweep.
    const ready = await db.memory.openSession({ host: "test", hostSessionId: "sweep2", projectId: "prj_sweep" });
    const readyCtx = { sessionId: ready.sessionId, turnId: "r1" };
    await db.memory.admitTurn(readyCtx);
    await db.memory.ingestMany(
      Array.from({ length: 2 }, (_, k) =>
        ingestEvent({
          sessionId: ready.sessionId,
          turnId: "r1",
          kind: "assistant" as const,
          host: "sweep2",
          messageId: `m${k}`,
          occurredAt: new Date(Date.UTC(2026, 10, 25, 10, k)).toISOString(),
          content: `short step ${k}`,
        }),
      ),
      { buildFreeInline: true },
    );
    await db.memory.finishTurn(readyCtx, "completed");
    const { rows: jobs } = await db.memory.pool.query(
      "SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'optchat-publish'",
    );
    expect(jobs[0].n).toBe(1);
    // The jobs disappear (an operator cleared the queue); scheduling is event-driven, so nothing would run them again.
    await db.memory.pool.query("DELETE FROM pgboss.job WHERE name IN ('optchat-node', 'optchat-publish')");

    const events: CompactorEvent[] = [];
    const worker = await startWorker(db.memory, db.config, (e) => events.push(e));
    try {
      expect(events.find((e) => e.type === "rescheduled")).toEqual({ type: "rescheduled", nodes: 1, publications: 1 });
      await db.memory.settle(session.sessionId, { timeoutMs: 30_000 });
      await eventually(
        async () =>
          (await db.memory.pool.query("SELECT count(*)::int AS n FROM optchat.publications")).rows[0].n === 2
            ? true
            : undefined,
        30_000,
        "both publications",
      );
      // A second worker starting now finds nothing lost.
      const second: CompactorEvent[] = [];
      const other = await startWorker(db.memory, db.config, (e) => second.push(e));
      await other.stop();
      expect(second.filter((e) => e.type === "rescheduled")).toEqual([]);
      expect(await db.memory.audit()).toMatchObject({ ok: true });
    } finally {
      await worker.stop();
    }
  });
});
