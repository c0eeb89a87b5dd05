import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningCompactor, startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import { LARGE_WINDOW, turnWriter, useTestMemory, waitForIdleQueues, waitForPublications } from "../helpers.js";

// The shared view has its own fold budget (OPTCHAT_SHARED_VIEW_BYTES, _LOWER_BYTES; docs/caching.md): it goes into
// every request of every session, so it is kept smaller than a session's view, whose thresholds stay as they are.

const SHARED_UPPER = 2048;
const SHARED_LOWER = 1536;
const db = useTestMemory({ sharedViewBytes: SHARED_UPPER, sharedViewLowerBytes: SHARED_LOWER });
const writeTurn = turnWriter(db, Date.UTC(2026, 11, 1, 9));
let a: Session;
let b: Session;
let worker: RunningCompactor | undefined;

const TURNS = 12;

beforeAll(async () => {
  worker = await startWorker(db.memory, db.config, () => {});
  a = await db.memory.openSession({ host: "test", hostSessionId: "A", projectId: "prj_shared_budget" });
  b = await db.memory.openSession({ host: "test", hostSessionId: "B", projectId: "prj_shared_budget" });
  for (let k = 0; k < TURNS; k++) {
    const session = k % 2 === 0 ? a : b;
    // About 300 bytes per shared line: twelve of them are well past the 2,048-byte budget.
    await writeTurn(session, `t${k}`, [
      `turn ${k}: the importer's queue keeps its retry limit at ${k + 3} and moves module-${k} to the broker; the nightly export of module-${k} waits for it`,
      `noted turn ${k}: retry limit ${k + 3}, module-${k} on the broker, its nightly export after it`,
    ]);
  }
  await waitForPublications(db.memory.pool, TURNS, 60_000, `${TURNS} publications`);
  await waitForIdleQueues(db.memory.pool);
}, 120_000);

afterAll(async () => {
  await worker?.stop();
});

async function latestRevision(kind: "shared" | "session", sessionId?: string) {
  const { rows } = await db.memory.pool.query(
    `SELECT v.bytes, v.upper_bytes, v.lower_bytes FROM optchat.view_revisions v
       JOIN optchat.trees t ON t.tree_id = v.tree_id
      WHERE t.kind = $1 AND ($2::text IS NULL OR t.session_id = $2::text)
      ORDER BY v.revision DESC LIMIT 1`,
    [kind, sessionId ?? null],
  );
  return rows[0] as { bytes: number; upper_bytes: number; lower_bytes: number };
}

describe("the shared view's own budget", () => {
  it("folds the shared tree under OPTCHAT_SHARED_VIEW_* and every session tree under OPTCHAT_VIEW_*", async () => {
    const shared = await latestRevision("shared");
    expect(shared.upper_bytes).toBe(SHARED_UPPER);
    expect(shared.lower_bytes).toBe(SHARED_LOWER);
    expect(shared.bytes).toBeLessThanOrEqual(SHARED_UPPER);
    const own = await latestRevision("session", a.sessionId);
    expect(own.upper_bytes).toBe(db.config.viewBytes);
    expect(own.lower_bytes).toBe(db.config.viewLowerBytes);
    // The audit refolds every revision with the thresholds it records.
    expect((await db.memory.audit()).violations).toEqual([]);
  });

  it("shows older turns as merged lines in a new turn's shared block, the newest one by one", async () => {
    const turn = await db.memory.admitTurn({ sessionId: a.sessionId, turnId: "reader", publishes: false });
    const context = await db.memory.assembleContext(turn, LARGE_WINDOW);
    const shared = context.blocks.find((block) => block.name === "shared_memory")?.text ?? "";
    const refs = [...shared.matchAll(/^pub:(\d+)\+(\d+)\|/gm)].map((m) => ({
      start: Number(m[1]),
      count: Number(m[2]),
    }));
    // Every publication is covered once, in order, and the oldest are merged.
    expect(refs.reduce((n, r) => n + r.count, 0)).toBe(TURNS);
    expect(refs[0]?.start).toBe(0);
    expect(refs[0]?.count).toBeGreaterThan(1);
    expect(refs.at(-1)).toEqual({ start: TURNS - 1, count: 1 });
    await db.memory.finishTurn(turn, "completed");
  });
});
