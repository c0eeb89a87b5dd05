import { readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { main } from "../../src/cli/main.js";
import { ingestEvent, TEST_SUMMARIZER_ENV, useScratchDirs, useTestMemory } from "../helpers.js";

// Issue 40 item 6: `export --jsonl` then `import` must not store OpenCode's conversations a second time beside what
// the plugin (or `import --opencode`) recorded under OpenCode's own ids.

/** Temporary directories, removed after the file's tests. */
const scratch = useScratchDirs();

const TIMEOUT_MS = 120_000;
const db = useTestMemory();
const OPENCODE_ID = "ses_roundtrip0001AbCdEfGhIj";

async function cli(args: string[]) {
  const out: string[] = [];
  const stdout = vi.spyOn(process.stdout, "write").mockImplementation((chunk) => {
    out.push(String(chunk));
    return true;
  });
  const stderr = vi.spyOn(process.stderr, "write").mockImplementation(() => true);
  try {
    const code = await main(args, { PATH: process.env.PATH ?? "", ...TEST_SUMMARIZER_ENV, DATABASE_URL: db.url });
    return { code, stdout: out.join("") };
  } finally {
    stdout.mockRestore();
    stderr.mockRestore();
  }
}

beforeAll(async () => {
  // As the plugin records a turn: OpenCode's session id, message and part ids in the finalization keys.
  const session = await db.memory.openSession({ host: "opencode", hostSessionId: OPENCODE_ID, projectId: "prj_rt" });
  await db.memory.admitTurn({ sessionId: session.sessionId, turnId: "msg_u1", query: "round trip" });
  await db.memory.ingestMany(
    [
      { kind: "user" as const, messageId: "msg_u1", partId: "prt_u1", content: "keep the round trip single" },
      { kind: "assistant" as const, messageId: "msg_a1", partId: "prt_a1", content: "one copy only" },
    ].map((r, n) =>
      ingestEvent({
        sessionId: session.sessionId,
        turnId: "msg_u1",
        kind: r.kind,
        host: OPENCODE_ID,
        messageId: r.messageId,
        partId: r.partId,
        occurredAt: new Date(Date.UTC(2026, 10, 2, 9, 0, n)).toISOString(),
        content: r.content,
      }),
    ),
  );
  await db.memory.finishTurn({ sessionId: session.sessionId, turnId: "msg_u1" }, "completed");
});

describe("scopes", { timeout: TIMEOUT_MS }, () => {
  it("dates a scope by its last message's own time, not by when its turns were recorded here (an import's)", async () => {
    const scopes = JSON.parse((await cli(["scopes", "--json"])).stdout);
    expect(scopes.scopes).toEqual([
      expect.objectContaining({ scopeId: "project:prj_rt", lastTurnAt: "2026-11-02T09:00:01.000Z" }),
    ]);
  });
});

describe("export --jsonl, then import", { timeout: TIMEOUT_MS }, () => {
  it("recognises OpenCode's sessions and records instead of storing them again", async () => {
    const file = join(scratch("optchat-round-trip-"), "memory.jsonl");
    expect((await cli(["export", "--jsonl", "--out", file])).code).toBe(0);
    const sessionLine = JSON.parse(readFileSync(file, "utf8").split("\n")[0] as string);
    expect(sessionLine).toMatchObject({ type: "session", id: OPENCODE_ID, host: "opencode" });

    const imported = await cli(["import", file, "--json"]);
    expect(imported.code).toBe(0);
    const summary = JSON.parse(imported.stdout);
    expect(summary.records).toMatchObject({ sealed: 0, duplicates: 2, conflicts: 0 });
    const sessions = await db.memory.pool.query<{ host: string; n: number }>(
      "SELECT host, count(*)::int AS n FROM optchat.sessions GROUP BY host ORDER BY host",
    );
    expect(sessions.rows).toEqual([{ host: "opencode", n: 1 }]);
    const records = await db.memory.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM optchat.records");
    expect(records.rows[0]?.n).toBe(2);
  });
});
