import { describe, expect, it } from "vitest";
import { collect, startScript, useTestMemory } from "../helpers.js";

/**
 * A connection the server drops in the middle of a transaction (PostgreSQL restarting, an administrator's
 * pg_terminate_backend) fails that write and nothing else: the process (OpenCode's, for the plugin) keeps running.
 * node-postgres emits 'error' on a checked-out client whose connection ends; without a listener that is an uncaught
 * exception. Seen when an adapter test refused a database's connections under load.
 */

const t = useTestMemory();

async function storedRecords(sessionId: string): Promise<number> {
  const { rows } = await t.memory.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM optchat.records WHERE session_id = $1::text",
    [sessionId],
  );
  return rows[0]?.n ?? -1;
}

describe("database connection lost inside a transaction", () => {
  it("fails the write with DATABASE_UNAVAILABLE when retries are off, keeps the process alive, and stores the same events on the next attempt", async () => {
    const session = await t.memory.openSession({ host: "test", hostSessionId: "connection-lost", projectId: "loss" });
    const run = await collect(startScript("tests/fixtures/ingest-connection-lost.ts", [t.url, session.sessionId, "0"]));
    expect(run.stderr).not.toMatch(/Connection terminated unexpectedly/);
    expect(run.code, run.stderr).toBe(0);
    // Before issue 9 item 7 this was the driver's raw error, with no code and no fix.
    expect(run.stdout).toMatch(
      /^INGEST_FAILED DATABASE_UNAVAILABLE Cannot reach PostgreSQL at .*OPTCHAT_DATABASE_RETRY_MS/m,
    );
    expect(run.stdout).toMatch(/^STORED sealed,sealed$/m);
    expect(await storedRecords(session.sessionId)).toBe(2);
  });

  it("runs the ingestion again itself within OPTCHAT_DATABASE_RETRY_MS, storing each record once", async () => {
    const session = await t.memory.openSession({ host: "test", hostSessionId: "connection-lost-2", projectId: "loss" });
    const run = await collect(
      startScript("tests/fixtures/ingest-connection-lost.ts", [t.url, session.sessionId, "10000"]),
    );
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^STORED_FIRST sealed,sealed after 2 attempts$/m);
    expect(run.stdout).toMatch(/^STORED duplicate,duplicate$/m);
    expect(await storedRecords(session.sessionId)).toBe(2);
  });
});
