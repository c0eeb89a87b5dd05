import { describe, expect, it } from "vitest";
import { runCli, sessionWithOneMessage, useTestMemory } from "../helpers.js";

/** Each test runs the CLI as several processes (~1.5 s each idle, 10 s and more at load average ~20): a hang bound. */
const CLI_TEST_TIMEOUT_MS = 180_000;

// `optchat forget`, `archive`, `unarchive`, `isolate` as a user runs them: a dry run first (exit 2, nothing changes),
// then --yes with progress on stderr; OpenCode's session id accepted.
const db = useTestMemory();

async function session(hostSessionId: string, text: string) {
  return await sessionWithOneMessage(db.memory, {
    host: "opencode",
    hostSessionId,
    projectId: "prj_cli_forget",
    kind: "user",
    content: text,
    messageId: "m1",
  });
}

async function records(sessionId: string): Promise<number> {
  const { rows } = await db.memory.pool.query("SELECT count(*)::int AS n FROM optchat.records WHERE session_id = $1", [
    sessionId,
  ]);
  return rows[0].n;
}

async function archived(sessionId: string): Promise<boolean> {
  const { rows } = await db.memory.pool.query(
    "SELECT archived_at IS NOT NULL AS archived FROM optchat.sessions WHERE session_id = $1",
    [sessionId],
  );
  return rows[0].archived;
}

describe("optchat forget", { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it(
    "explains itself, dry-runs without --yes, and deletes with it",
    async () => {
      const env = { DATABASE_URL: db.url };
      const help = await runCli(["forget", "--help"], env);
      expect(help.code).toBe(0);
      expect(help.stdout).toContain("--before DATE");
      expect(help.stdout).toContain("Not recalled");
      const a = await session("ses_cli_forget_a", "forget me please");
      const dry = await runCli(["forget", "--session", "ses_cli_forget_a"], env);
      expect(dry.code).toBe(2);
      expect(dry.stdout).toContain("would forget 1 session(s), 1 record(s)");
      expect(dry.stdout).toContain("dry run");
      expect(await records(a.sessionId)).toBe(1);
      const done = await runCli(["forget", "--session", "ses_cli_forget_a", "--yes"], env);
      expect(done.code).toBe(0);
      expect(done.stdout).toContain("forgot 1 session(s): 1 record(s)");
      expect(done.stderr).toContain("forgetting 1 session(s)");
      expect(await records(a.sessionId)).toBe(0);
      const none = await runCli(["forget", "--before", "2000-01-01", "--yes", "--json"], env);
      expect(JSON.parse(none.stdout)).toMatchObject({ ok: true, sessions: [] });
      const both = await runCli(["forget", "--session", "x", "--scope", "y"], env);
      expect(both.code).not.toBe(0);
      expect(both.stderr).toContain("exactly one of --session, --scope, --before");
    },
    CLI_TEST_TIMEOUT_MS,
  );

  it(
    "archives and unarchives, and isolates, by OpenCode's session id",
    async () => {
      const env = { DATABASE_URL: db.url };
      const b = await session("ses_cli_forget_b", "keep me");
      expect((await runCli(["archive", "--session", "ses_cli_forget_b"], env)).stdout).toContain(
        `archived ${b.sessionId}`,
      );
      // Listings hide it (tests/integration/forget.test.ts "archiving B ..." checks that through the service).
      expect(await archived(b.sessionId)).toBe(true);
      expect((await runCli(["unarchive", "--session", "ses_cli_forget_b"], env)).code).toBe(0);
      expect(await archived(b.sessionId)).toBe(false);
      const isolated = await runCli(["isolate", "--session", "ses_cli_forget_b"], env);
      expect(isolated.stdout).toContain(`now in isolated:${b.sessionId}`);
      expect(await records(b.sessionId)).toBe(1);
    },
    CLI_TEST_TIMEOUT_MS,
  );
});
