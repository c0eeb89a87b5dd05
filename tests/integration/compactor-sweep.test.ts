import { describe, expect, it } from "vitest";
import type { IngestOptions } from "../../src/memory/ingest.js";
import { type CompactorEvent, startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import { ingestEvent, useTestMemory, waitForPublications } from "../helpers.js";

const db = useTestMemory();

/** A session of prj_sweep with one finished turn of assistant messages, a minute apart from `start`. */
async function finishedTurn(
  host: string,
  turnId: string,
  start: number,
  contents: readonly string[],
  options?: IngestOptions,
): Promise<Session> {
  const session = await db.memory.openSession({ host: "test", hostSessionId: host, projectId: "prj_sweep" });
  const ctx = { sessionId: session.sessionId, turnId };
  await db.memory.admitTurn(ctx);
  await db.memory.ingestMany(
    contents.map((content, k) =>
      ingestEvent({
        sessionId: session.sessionId,
        turnId,
        kind: "assistant" as const,
        host,
        messageId: `m${k}`,
        occurredAt: new Date(start + k * 60_000).toISOString(),
        content,
      }),
    ),
    options,
  );
  await db.memory.finishTurn(ctx, "completed");
  return session;
}

describe("start-up sweep", () => {
  it("re-schedules ready nodes and publications whose jobs were lost, and nothing that still has a job", async () => {
    const session = await finishedTurn(
      "sweep",
      "t1",
      Date.UTC(2026, 10, 25, 9),
      Array.from(
        { length: 6 },
        (_, k) => `step ${k}: ${"a long explanation of what was done and why it matters later. ".repeat(12)}`,
      ),
    );
    // t1's cover is not summarized yet, so its publication has no job to lose: the node commit that completes the
    // cover schedules it. A turn whose cover was complete when it finished (short messages, built at ingestion) got
    // its publication job at once; that one is lost below and must be found by the sweep.
    await finishedTurn("sweep2", "r1", Date.UTC(2026, 10, 25, 10), ["short step 0", "short step 1"], {
      buildFreeInline: true,
    });
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
      await waitForPublications(db.memory.pool, 2, 30_000, "both publications");
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
