import { describe, expect, it } from "vitest";
import { collect, startScript, useTestMemory } from "../helpers.js";

/**
 * A connection the server drops in the middle of a transaction (PostgreSQL restarting, an administrator's
 * pg_terminate_backend) fails that write and nothing else: the process (OpenCode's, for the plugin) keeps running.
 * node-postgres emits 'error' on a checked-out client whose connection ends; without a listener that is an uncaught
 * exception. Seen when an adapter test refused a database's connections under load.
 */

const t = useTestMemory();

describe("database connection lost inside a transaction", () => {
  it("fails the write, keeps the process alive, and stores the same events on the next attempt", async () => {
    const session = await t.memory.openSession({ host: "test", hostSessionId: "connection-lost", projectId: "loss" });
    const run = await collect(startScript("tests/fixtures/ingest-connection-lost.ts", [t.url, session.sessionId]));
    expect(run.stderr).not.toMatch(/Connection terminated unexpectedly/);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^INGEST_FAILED /m);
    expect(run.stdout).toMatch(/^STORED sealed,sealed$/m);
    const { rows } = await t.memory.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM optchat.records WHERE session_id = $1::text",
      [session.sessionId],
    );
    expect(rows[0]?.n).toBe(2);
  });
});
