import { describe, expect, it } from "vitest";
import { collect, ingestEvent, startScript, useTestMemory, waitForLine } from "../helpers.js";

const db = useTestMemory();
const WRITER = "tests/fixtures/writer-holds-transaction.ts";

async function storedState(sessionId: string) {
  const { rows } = await db.memory.pool.query(
    `SELECT (SELECT count(*) FROM optchat.records WHERE session_id = $1)::int AS records,
            (SELECT count(*) FROM optchat.blobs)::int AS blobs,
            (SELECT next_seq FROM optchat.generations WHERE session_id = $1)::int AS next_seq`,
    [sessionId],
  );
  return rows[0];
}

async function expectNextSeqZero(sessionId: string): Promise<void> {
  const result = await db.memory.ingest(
    ingestEvent({
      sessionId,
      turnId: "t2",
      kind: "user",
      host: `after-${sessionId}`,
      messageId: "after",
      occurredAt: "2026-11-20T10:00:00Z",
      content: "written after the crash",
    }),
  );
  expect(result).toMatchObject({ status: "sealed", seq: 0 });
}

describe("a writer killed in the middle of a transaction", () => {
  it("leaves no partial record when SIGKILLed after sealing and before COMMIT", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "crash-1", projectId: "prj_crash" });
    const before = await storedState(session.sessionId);
    const writer = startScript(WRITER, [db.url, session.sessionId, "5", String(1024 * 1024)]);
    const finished = collect(writer);
    await waitForLine(writer, /^SEALED_NOT_COMMITTED$/);
    writer.kill("SIGKILL");
    expect((await finished).signal).toBe("SIGKILL");

    expect(await storedState(session.sessionId)).toEqual(before);
    await expectNextSeqZero(session.sessionId);
  });

  it("leaves no partial record when SIGKILLed while a 10 MB batch is being written", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "crash-2", projectId: "prj_crash" });
    const before = await storedState(session.sessionId);
    const writer = startScript(WRITER, [db.url, session.sessionId, "10", String(1024 * 1024)]);
    const finished = collect(writer);
    await waitForLine(writer, /^BEGUN$/);
    await new Promise((resolve) => setTimeout(resolve, 30));
    writer.kill("SIGKILL");
    expect((await finished).signal).toBe("SIGKILL");

    // The server notices the dead connection and rolls back; give it a moment, then nothing of the batch is there.
    for (let i = 0; i < 50; i++) {
      const { rows } = await db.memory.pool.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
      );
      if (rows[0].n === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(await storedState(session.sessionId)).toEqual(before);
    await expectNextSeqZero(session.sessionId);
  });
});
