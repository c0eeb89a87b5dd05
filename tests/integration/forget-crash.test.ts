import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunningCompactor } from "../../src/memory/worker.js";
import { startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import {
  collect,
  databaseDigest,
  itLeavesThePreviousStateWhenKilled,
  startScript,
  turnWriter,
  useTestMemory,
  waitForIdleQueues,
  waitForPublications,
} from "../helpers.js";

// Issue 15 "Also": a crash in the middle of a deletion leaves either the previous state or the complete new one. The
// deletion is one transaction (src/memory/forget.ts); a process doing it is SIGKILLed at each step boundary of that
// transaction and before its COMMIT, and the database is byte-for-byte what it was (every optchat table's digest);
// a deletion run to its end then leaves the complete new state (audit clean, nothing of the session left).

const db = useTestMemory();
const FIXTURE = "tests/fixtures/forget-then-stop.ts";
let worker: RunningCompactor | undefined;
let a: Session;
const turn = turnWriter(db, Date.UTC(2026, 10, 21, 9));

/** The optchat schema's digest (pg-boss's own bookkeeping may move on its own timers). */
async function digest(): Promise<Record<string, string>> {
  return Object.fromEntries(
    Object.entries(await databaseDigest(db.memory.pool)).filter(([k]) => k.startsWith("optchat.")),
  );
}

beforeAll(async () => {
  worker = await startWorker(db.memory, db.config, () => {});
  a = await db.memory.openSession({ host: "test", hostSessionId: "A", projectId: "prj_crash_forget" });
  const b = await db.memory.openSession({ host: "test", hostSessionId: "B", projectId: "prj_crash_forget" });
  for (let k = 0; k < 4; k++) {
    await turn(a, `a${k}`, [`a asks about the quokka ${k}`, `the quokka ${k} answer`]);
    await turn(b, `b${k}`, [`b asks about the parser ${k}`, `b parser answer ${k}`]);
  }
  await waitForPublications(db.memory.pool, 8, 30_000, "8 publications");
  await waitForIdleQueues(db.memory.pool);
  await worker.stop();
  worker = undefined;
}, 120_000);

afterAll(async () => {
  await worker?.stop();
});

describe("a process killed while forgetting a session", () => {
  itLeavesThePreviousStateWhenKilled(
    db,
    ["progress:1", "progress:2", "progress:3", "commit"],
    (step) => startScript(FIXTURE, [db.url, a.sessionId, step]),
    digest,
  );

  it("leaves the complete new state when it commits", async () => {
    const child = startScript(FIXTURE, [db.url, a.sessionId, "none"]);
    const finished = await collect(child);
    expect(finished.stdout).toContain("FORGOTTEN");
    const { rows } = await db.memory.pool.query(
      `SELECT (SELECT count(*) FROM optchat.records WHERE session_id = $1)::int AS records,
              (SELECT count(*) FROM optchat.publications WHERE session_id = $1 AND retired_at IS NULL)::int AS live,
              (SELECT count(*) FROM optchat.nodes WHERE text LIKE '%quokka%')::int AS nodes`,
      [a.sessionId],
    );
    expect(rows[0]).toEqual({ records: 0, live: 0, nodes: 0 });
    worker = await startWorker(db.memory, db.config, () => {});
    await waitForIdleQueues(db.memory.pool);
    expect((await db.memory.audit()).violations).toEqual([]);
  }, 60_000);
});
