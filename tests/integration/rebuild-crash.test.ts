import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Config } from "../../src/memory/config.js";
import type { RunningCompactor } from "../../src/memory/worker.js";
import { startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import {
  collect,
  databaseDigest,
  eventually,
  ingestEvent,
  startScript,
  useTestMemory,
  waitForIdleQueues,
  waitForLine,
} from "../helpers.js";

// Issue 15 "Also": a crash in the middle of a rebuild leaves either the previous state or the complete new one. The
// rebuild computes its texts outside any transaction and commits them in one (src/memory/rebuild.ts); a process doing
// it is SIGKILLed while it computes, at each step of the commit and before its COMMIT, and every optchat table is
// what it was, except the cost ledger, which keeps the model calls that were made (they were paid for); a rebuild run
// to its end then leaves the complete new state (no fallback left, audit clean).

const db = useTestMemory();
const FIXTURE = "tests/fixtures/rebuild-then-stop.ts";
let a: Session;
let message = 0;

async function turn(session: Session, turnId: string, words: string): Promise<void> {
  await db.memory.admitTurn({ sessionId: session.sessionId, turnId, query: words, publishes: true });
  for (let k = 0; k < 2; k++) {
    message += 1;
    await db.memory.ingest(
      ingestEvent({
        sessionId: session.sessionId,
        turnId,
        kind: k === 0 ? "user" : "assistant",
        host: session.hostSessionId,
        messageId: `m${message}`,
        occurredAt: new Date(Date.UTC(2026, 10, 23, 9, 0, message)).toISOString(),
        content: `${words} ${"the importer moves to the durable broker queue; ".repeat(12)}`,
      }),
    );
  }
  await db.memory.finishTurn({ sessionId: session.sessionId, turnId }, "completed");
}

/** The optchat schema's digest without the cost ledger (pg-boss's own bookkeeping moves on its own timers). */
async function digest(): Promise<Record<string, string>> {
  return Object.fromEntries(
    Object.entries(await databaseDigest(db.memory.pool)).filter(
      ([k]) => k.startsWith("optchat.") && k !== "optchat.compactor_calls",
    ),
  );
}

async function noOpenTransaction(): Promise<void> {
  await eventually(
    async () => {
      const { rows } = await db.memory.pool.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
      );
      return rows[0].n === 0 ? true : undefined;
    },
    10_000,
    "the killed transaction to be rolled back",
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
  for (const step of ["compute:3", "step:1", "step:2", "step:3", "step:4", "commit"]) {
    it(`leaves the previous state when killed at ${step}`, async () => {
      const before = await digest();
      const child = startScript(FIXTURE, [db.url, a.scopeId, step]);
      const finished = collect(child);
      await waitForLine(child, /^STOPPED /);
      child.kill("SIGKILL");
      expect((await finished).signal).toBe("SIGKILL");
      await noOpenTransaction();
      expect(await digest()).toEqual(before);
    }, 60_000);
  }

  it("leaves the complete new state when it commits", async () => {
    const child = startScript(FIXTURE, [db.url, a.scopeId, "none"]);
    const finished = await collect(child);
    expect(finished.stdout).toMatch(/REBUILT [1-9]/);
    expect(await fallbacks()).toBe(0);
    expect((await db.memory.audit()).violations).toEqual([]);
  }, 60_000);
});
