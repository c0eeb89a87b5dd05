import { describe, expect, it } from "vitest";
import { type CompactorEvent, startWorker } from "../../src/memory/worker.js";
import { eventually, useTestMemory } from "../helpers.js";

const db = useTestMemory();

describe("start-up sweep", () => {
  it("re-schedules ready nodes and publications whose jobs were lost, and nothing that still has a job", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "sweep", projectId: "prj_sweep" });
    const ctx = { sessionId: session.sessionId, turnId: "t1" };
    await db.memory.admitTurn(ctx);
    await db.memory.ingestMany(
      Array.from({ length: 6 }, (_, k) => ({
        sessionId: session.sessionId,
        turnId: "t1",
        kind: "assistant" as const,
        finalization: { hostSessionId: "sweep", messageId: `m${k}` },
        occurredAt: new Date(Date.UTC(2026, 10, 25, 9, k)).toISOString(),
        content: `step ${k}: ${"a long explanation of what was done and why it matters later. ".repeat(12)}`,
      })),
    );
    await db.memory.finishTurn(ctx, "completed");
    // The jobs disappear (an operator cleared the queue); scheduling is event-driven, so nothing would run them again.
    await db.memory.pool.query("DELETE FROM pgboss.job WHERE name IN ('optchat-node', 'optchat-publish')");

    const events: CompactorEvent[] = [];
    const worker = await startWorker(db.memory, db.config, (e) => events.push(e));
    try {
      expect(events.find((e) => e.type === "rescheduled")).toEqual({ type: "rescheduled", nodes: 1, publications: 1 });
      await db.memory.settle(session.sessionId, { timeoutMs: 30_000 });
      await eventually(
        async () =>
          (await db.memory.pool.query("SELECT count(*)::int AS n FROM optchat.publications")).rows[0].n === 1
            ? true
            : undefined,
        30_000,
        "the publication",
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
