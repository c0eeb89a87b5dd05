import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Config } from "../../src/memory/config.js";
import type { RunningCompactor } from "../../src/memory/worker.js";
import { startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import {
  collect,
  databaseDigest,
  eventually,
  itLeavesThePreviousStateWhenKilled,
  startScript,
  turnWriter,
  useTestMemory,
  waitForIdleQueues,
} from "../helpers.js";

// Issue 15 "Also": a crash in the middle of a rebuild leaves either the previous state or the complete new one. The
// rebuild computes its texts outside any transaction and commits them in one (src/memory/rebuild.ts); a process doing
// it is SIGKILLed while it computes, at each step of the commit and before its COMMIT, and every optchat table is
// what it was, except the cost ledger, which keeps the model calls that were made (they were paid for); a rebuild run
// to its end then leaves the complete new state (no fallback left, audit clean).

const db = useTestMemory();
const FIXTURE = "tests/fixtures/rebuild-then-stop.ts";
let a: Session;
const writeTurn = turnWriter(db, Date.UTC(2026, 10, 23, 9));
const turn = (session: Session, turnId: string, words: string) =>
  writeTurn(
    session,
    turnId,
    [0, 1].map(() => `${words} ${"the importer moves to the durable broker queue; ".repeat(12)}`),
  );

/** The optchat schema's digest without the cost ledger (pg-boss's own bookkeeping moves on its own timers). */
async function digest(): Promise<Record<string, string>> {
  return Object.fromEntries(
    Object.entries(await databaseDigest(db.memory.pool)).filter(
      ([k]) => k.startsWith("optchat.") && k !== "optchat.compactor_calls",
    ),
  );
}

const fallbacks = async () =>
  Number(
    (
      await db.memory.pool.query(
        "SELECT count(*) AS n FROM optchat.nodes WHERE summarizer = 'fallback' AND NOT superseded",
      )
    ).rows[0].n,
  );

beforeAll(async () => {
  // Fallbacks to replace: a one-token budget lets one model call through.
  const capped: Config = Object.freeze({ ...db.config, budgetDailyTokens: 1, budgetDailyUsd: 0 });
  let worker: RunningCompactor | undefined = await startWorker(db.memory, capped, () => {});
  try {
    a = await db.memory.openSession({ host: "test", hostSessionId: "A", projectId: "prj_crash_rebuild" });
    const b = await db.memory.openSession({ host: "test", hostSessionId: "B", projectId: "prj_crash_rebuild" });
    for (let k = 0; k < 3; k++) {
      await turn(a, `a${k}`, `alpha ${k}`);
      await turn(b, `b${k}`, `beta ${k}`);
    }
    await eventually(
      async () => {
        const { rows } = await db.memory.pool.query("SELECT count(*)::int AS n FROM optchat.publications");
        return rows[0].n === 6 ? true : undefined;
      },
      30_000,
      "6 publications",
    );
    await waitForIdleQueues(db.memory.pool);
    await worker.stop();
    worker = undefined;
  } finally {
    await worker?.stop();
  }
  expect(await fallbacks()).toBeGreaterThan(4);
}, 120_000);

afterAll(async () => {
  await db.memory.pool.query("SELECT 1");
});

describe("a process killed while rebuilding a scope", () => {
  // Steps of the commit: the first line (planned), then one per tree written (two sessions, the shared tree).
  itLeavesThePreviousStateWhenKilled(
    db,
    ["compute:3", "step:1", "step:2", "step:3", "step:4", "commit"],
    (step) => startScript(FIXTURE, [db.url, a.scopeId, step]),
    digest,
  );

  it("leaves the complete new state when it commits", async () => {
    const child = startScript(FIXTURE, [db.url, a.scopeId, "none"]);
    const finished = await collect(child);
    expect(finished.stdout).toMatch(/REBUILT [1-9]/);
    expect(await fallbacks()).toBe(0);
    expect((await db.memory.audit()).violations).toEqual([]);
  }, 60_000);
});
