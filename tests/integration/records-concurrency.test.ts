import { afterAll, describe, expect, it } from "vitest";
import { resolveConfig } from "../../src/memory/config.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import { type Memory, openMemory } from "../../src/memory/service.js";
import { ingestEvent, useTestMemory, waitForLockWaiters } from "../helpers.js";

const db = useTestMemory();
const extra: Memory[] = [];
afterAll(async () => {
  await Promise.all(extra.map((m) => m.close()));
});

/** A separate service with its own single connection, as another process would have. */
async function connection(): Promise<Memory> {
  const memory = await openMemory(resolveConfig({ overrides: { databaseUrl: db.url, poolSize: 1 } }));
  extra.push(memory);
  return memory;
}

function event(sessionId: string, host: string, writer: number, n: number): IngestEvent {
  return ingestEvent({
    sessionId,
    turnId: `w${writer}`,
    kind: "assistant",
    host,
    messageId: `w${writer}-m${n}`,
    occurredAt: new Date(Date.UTC(2026, 10, 20, 10, 0, n)).toISOString(),
    content: `writer ${writer} message ${n}`,
  });
}

/** A beforeCommit hook that keeps its transaction open: `holding` resolves once it does, `release` lets it commit. */
function commitHold(): { beforeCommit: () => Promise<void>; holding: Promise<void>; release: () => void } {
  let release: () => void = () => {};
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let holding: () => void = () => {};
  const isHolding = new Promise<void>((resolve) => {
    holding = resolve;
  });
  return {
    beforeCommit: async () => {
      holding();
      await released;
    },
    holding: isHolding,
    release: () => release(),
  };
}

describe("seq allocation under concurrency", () => {
  it("gives 8 concurrent connections writing one session seqs 0..N-1 with no gap and no duplicate", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "hot", projectId: "prj_hot" });
    const writers = await Promise.all(Array.from({ length: 8 }, () => connection()));
    const perWriter = 40;
    await Promise.all(
      writers.map(async (memory, w) => {
        for (let n = 0; n < perWriter; n++) {
          await memory.ingest(event(session.sessionId, "hot", w, n));
          // Every writer also re-delivers a neighbour's event: duplicates must allocate nothing.
          if (n % 4 === 0) await memory.ingest(event(session.sessionId, "hot", (w + 1) % 8, n)).catch(() => {});
        }
      }),
    );
    const total = 8 * perWriter;
    const records = await db.memory.listRecords(session.sessionId, { limit: total + 10 });
    expect(records.map((r) => r.seq)).toEqual(Array.from({ length: total }, (_, i) => i));
    expect(new Set(records.map((r) => r.eventKey)).size).toBe(total);
    // Every event of every writer is there exactly once, whoever delivered it first.
    const expected = Array.from({ length: 8 }, (_, w) =>
      Array.from({ length: perWriter }, (_, n) => `${w}:${n}`),
    ).flat();
    expect(records.map((r) => `${r.turnId.slice(1)}:${/w\d+-m(\d+)/.exec(r.eventKey)?.[1]}`).sort()).toEqual(
      expected.sort(),
    );
    const { rows } = await db.memory.pool.query("SELECT next_seq FROM optchat.generations WHERE session_id = $1", [
      session.sessionId,
    ]);
    expect(rows[0].next_seq).toBe(total);
  });

  it("does not serialize different sessions on a global lock", async () => {
    const a = await db.memory.openSession({ host: "test", hostSessionId: "lock-a", projectId: "prj_lock" });
    const b = await db.memory.openSession({ host: "test", hostSessionId: "lock-b", projectId: "prj_lock" });
    const [writerA, writerB] = await Promise.all([connection(), connection()]);

    // A writer that has ingested a record of session A and has not committed yet holds A's generation row.
    const holder = await connection();
    const hold = commitHold();
    const held = holder.ingestMany([{ ...event(a.sessionId, "lock-a", 9, 0), turnId: "held" }], {
      beforeCommit: hold.beforeCommit,
    });
    await hold.holding;
    const holdMs = 3000;
    const heldAt = performance.now();

    const intoA = writerA.ingest(event(a.sessionId, "lock-a", 0, 0)).then(() => performance.now() - heldAt);
    const startB = performance.now();
    for (let n = 0; n < 20; n++) await writerB.ingest(event(b.sessionId, "lock-b", 0, n));
    const sessionBMs = performance.now() - startB;

    await new Promise((resolve) => setTimeout(resolve, Math.max(0, holdMs - (performance.now() - heldAt))));
    hold.release();
    await held;
    const sessionAMs = await intoA;

    // Session B finished 20 transactions while A was held; A's writer waited for the holder.
    expect(sessionBMs / holdMs).toBeLessThan(0.5);
    expect(sessionAMs / holdMs).toBeGreaterThanOrEqual(0.95);
    const seqsA = (await db.memory.listRecords(a.sessionId)).map((r) => [r.turnId, r.seq]);
    expect(seqsA).toEqual([
      ["held", 0],
      ["w0", 1],
    ]);
    console.info(
      `no-global-lock: 20 ingests into B took ${(sessionBMs / holdMs).toFixed(3)}x of A's lock hold; A's ingest waited ${(sessionAMs / holdMs).toFixed(3)}x`,
    );
  });

  it("reports a twin sealed while the writer waited for the session's lock as a duplicate, not a second record", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "twin", projectId: "prj_lock" });
    const [first, second] = await Promise.all([connection(), connection()]);
    const twin = event(session.sessionId, "twin", 1, 0);
    const hold = commitHold();
    const sealed = first.ingestMany([twin], { beforeCommit: hold.beforeCommit });
    await hold.holding;
    // The second delivery's lookup runs before the first commits; it waits on the generation row, then must not
    // seal the same finalization again.
    const redelivered = second.ingest(twin);
    await waitForLockWaiters(db.memory.pool);
    hold.release();
    const [[outcome], again] = await Promise.all([sealed, redelivered]);
    expect(outcome).toMatchObject({ status: "sealed", seq: 0 });
    expect(again).toMatchObject({ status: "duplicate", seq: 0 });
    expect((await db.memory.listRecords(session.sessionId)).map((r) => r.seq)).toEqual([0]);
    const { rows } = await db.memory.pool.query(
      "SELECT next_seq FROM optchat.generations WHERE session_id = $1::text",
      [session.sessionId],
    );
    expect(Number(rows[0].next_seq)).toBe(1);
  });

  it("runs a twin insert again: one finalization sealed into two sessions at once is sealed once, the loser told so", async () => {
    // Different sessions take different locks, so the second writer's insert meets the first's uncommitted record on
    // the event_key constraint (records_event_key_unique) and fails with unique_violation once it commits.
    const a = await db.memory.openSession({ host: "test", hostSessionId: "twin-a", projectId: "prj_twin" });
    const b = await db.memory.openSession({ host: "test", hostSessionId: "twin-b", projectId: "prj_twin" });
    const [first, second] = await Promise.all([connection(), connection()]);
    const hold = commitHold();
    const sealed = first.ingestMany([event(a.sessionId, "twin-shared", 1, 0)], { beforeCommit: hold.beforeCommit });
    await hold.holding;
    const racing = second.ingestMany([event(b.sessionId, "twin-shared", 1, 0)]);
    await waitForLockWaiters(db.memory.pool);
    hold.release();
    const [[outcome], [again]] = await Promise.all([sealed, racing]);
    expect(outcome).toMatchObject({ status: "sealed", sessionId: a.sessionId, seq: 0 });
    expect(again?.status).not.toBe("sealed");
    expect(again).toMatchObject({ sessionId: a.sessionId, seq: 0 });
    expect(await db.memory.listRecords(b.sessionId)).toEqual([]);
  });
});

describe("opening one host session from several processes at once", () => {
  it("registers it once, with one generation and one session tree, and leaks no isolated scope", async () => {
    const processes = await Promise.all(Array.from({ length: 6 }, () => connection()));
    for (const sharing of ["project", "isolated"] as const) {
      const host = `race-${sharing}`;
      const opened = await Promise.all(
        processes.map((memory) =>
          memory.openSession({
            host: "test",
            hostSessionId: host,
            projectId: "prj_race",
            ...(sharing === "isolated" ? { sharing } : {}),
          }),
        ),
      );
      expect(new Set(opened.map((s) => s.sessionId)).size).toBe(1);
      const sessionId = opened[0]?.sessionId as string;
      const counts = await db.memory.pool.query<{ generations: number; trees: number }>(
        `SELECT (SELECT count(*)::int FROM optchat.generations WHERE session_id = $1::text) AS generations,
                (SELECT count(*)::int FROM optchat.trees WHERE kind = 'session' AND session_id = $1::text) AS trees`,
        [sessionId],
      );
      expect(counts.rows[0]).toEqual({ generations: 1, trees: 1 });
      // Opened again (the session is known): no scope is created for it.
      const before = await db.memory.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM optchat.scopes");
      await processes[0]?.openSession({
        host: "test",
        hostSessionId: host,
        projectId: "prj_race",
        sharing: "isolated",
      });
      const after = await db.memory.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM optchat.scopes");
      expect(after.rows[0]?.n).toBe(before.rows[0]?.n);
    }
    const shared = await db.memory.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM optchat.trees WHERE kind = 'shared' AND scope_id = 'project:prj_race'",
    );
    expect(shared.rows[0]?.n).toBe(1);
  });
});
