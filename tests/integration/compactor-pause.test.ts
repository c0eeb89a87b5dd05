import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningCompactor, startWorker } from "../../src/memory/worker.js";
import { eventually, finishTurnNeedingSummary, useTestMemory } from "../helpers.js";

/**
 * A compactor worker paused and resumed (src/compactor/worker.ts `pause`/`resume`; the local server pauses the worker
 * it runs while served processes run, plugin/transport/local-server/workers.ts): paused, it takes no job and runs no supervision pass
 * (src/compactor/supervision.ts); resumed, it does both again. Real Postgres and pg-boss, the deterministic summarizer.
 */

const db = useTestMemory();
let worker: RunningCompactor;

beforeAll(async () => {
  worker = await startWorker(db.memory, db.config, () => {});
});
afterAll(async () => {
  await worker?.stop(1_000, { graceful: false });
});

async function publications(sessionId: string): Promise<number> {
  const { rows } = await db.memory.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM optchat.publications WHERE session_id = $1::text",
    [sessionId],
  );
  return rows[0]?.n ?? 0;
}

/** When a supervision pass last claimed the queues' monitoring (pg-boss stamps it in every pass, at most once a second). */
async function lastSupervised(): Promise<string> {
  const { rows } = await db.memory.pool.query<{ at: string }>(
    "SELECT max(monitor_claim_on)::text AS at FROM pgboss.queue WHERE name LIKE 'optchat%'",
  );
  return rows[0]?.at ?? "";
}

describe("a paused compactor worker", () => {
  it("takes no job while paused, and takes them again once resumed", async () => {
    const first = await finishTurnNeedingSummary(db.memory, {
      hostSessionId: "pause-before",
      projectId: "prj_pause",
      theme: "working",
      day: 1,
    });
    await eventually(async () => ((await publications(first.sessionId)) === 1 ? true : undefined), 30_000, "first");

    await eventually(async () => ((await lastSupervised()) !== "" ? true : undefined), 10_000, "supervised");
    await worker.pause();
    await worker.pause(); // idempotent
    // A pass under way when it paused may still stamp: what counts is that none follows.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const supervisedWhenPaused = await lastSupervised();
    const held = await finishTurnNeedingSummary(db.memory, {
      hostSessionId: "pause-held",
      projectId: "prj_pause",
      theme: "paused",
      day: 2,
    });
    // Polling every second and woken by new jobs when working: three seconds is ample to see it take nothing.
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    expect(await publications(held.sessionId)).toBe(0);
    const { rows } = await db.memory.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pgboss.job WHERE state = 'created'",
    );
    expect(rows[0]?.n).toBeGreaterThan(0);
    // Working, the worker supervises every second: paused, it ran no pass in four seconds.
    expect(await lastSupervised()).toBe(supervisedWhenPaused);

    await worker.resume();
    await worker.resume();
    await eventually(async () => ((await publications(held.sessionId)) === 1 ? true : undefined), 30_000, "resumed");
    await eventually(
      async () => ((await lastSupervised()) !== supervisedWhenPaused ? true : undefined),
      10_000,
      "supervised again",
    );
  });
});

describe("a compactor worker paused and resumed at once", () => {
  it("takes jobs again when the resume comes before its pollers have stopped (the local server's quick runs)", async () => {
    await worker.pause();
    await worker.resume();
    await worker.pause();
    await worker.resume();
    const quick = await finishTurnNeedingSummary(db.memory, {
      hostSessionId: "pause-quick",
      projectId: "prj_pause",
      theme: "quick",
      day: 3,
    });
    await eventually(async () => ((await publications(quick.sessionId)) === 1 ? true : undefined), 15_000, "quick");
  });
});
