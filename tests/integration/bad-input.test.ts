import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolvePluginConfig } from "../../plugin/base/config.js";
import { OpencodeAdapter } from "../../plugin/host/adapter.js";
import { importCommand } from "../../src/cli/commands/import.js";
import { InputInvalidError, OptchatError } from "../../src/core/errors.js";
import { checkJsonl, ImportLineError, importJsonl } from "../../src/memory/import.js";
import { openMemory } from "../../src/memory/service.js";
import { freshDatabaseName, retrying, useTestMemory } from "../helpers.js";

/**
 * Input PostgreSQL cannot store (U+0000 and unpaired surrogates in text and jsonb, numbers beyond a column's type)
 * reaches the service API from hosts, imports and tools. Each is either stored (a user's prompt) or refused with
 * INPUT_INVALID naming the field, never a raw 22021 / 22P05 / 22003 from a query (issue 9 item 7).
 */

const t = useTestMemory();
let scratch: string;

beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), "optchat-bad-input-"));
});
afterAll(() => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

/** The rejection of `promise`, for matching (fails the test if it resolves). */
async function refusal(promise: Promise<unknown>): Promise<Record<string, unknown>> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error, "expected a refusal").toBeDefined();
  return error as Record<string, unknown>;
}

const invalid = (field: string, problem: RegExp) => ({
  code: "INPUT_INVALID",
  issues: [{ field, problem: expect.stringMatching(problem) }],
});

describe("text the database cannot hold", () => {
  it("a user's prompt containing NUL still runs its turn through the plugin, and is stored byte-exact", async () => {
    const config = resolvePluginConfig({ databaseUrl: t.url, embeddedWorker: "off" }, {});
    const problems: string[] = [];
    // The adapter owns its memory service (close() closes it).
    const adapter = new OpencodeAdapter(
      await openMemory(config.core),
      config,
      { id: "project-bad-input", worktree: "/tmp/bad-input", directory: "/tmp/bad-input" },
      { parentOf: async () => undefined, modelLimits: async () => undefined, transcript: async () => undefined },
      (level, line) => {
        if (level !== "info") problems.push(line);
      },
    );
    try {
      const prompt = "grep for a\u0000b in the log, and this: \uD800";
      await adapter.admit(
        "ses_nul_prompt",
        { id: "msg_nul_1", sessionID: "ses_nul_prompt", role: "user", time: { created: Date.UTC(2026, 11, 1) } },
        [{ id: "prt_nul_1", messageID: "msg_nul_1", sessionID: "ses_nul_prompt", type: "text", text: prompt }],
      );
      // chat.message returns once the lease is held; the turn's row and its user record are the session's next jobs.
      await adapter.flush(10_000);
      const session = await t.memory.host.findSession("opencode", "ses_nul_prompt");
      expect(session, problems.join("\n")).toBeDefined();
      const turn = await t.memory.getTurn({ sessionId: session?.sessionId as string, turnId: "msg_nul_1" });
      expect(turn.state).toBe("active");
      // The turn's query is an inspection copy with NUL shown as U+2400; the prompt itself is its user record.
      expect(turn.query).toBe("grep for a\u2400b in the log, and this: \uFFFD");
      const records = await retrying(
        async () => {
          const found = await t.memory.listRecords(session?.sessionId as string);
          expect(found.map((r) => r.kind)).toEqual(["user"]);
          return found;
        },
        10_000,
        "the user record",
      );
      const page = await t.memory.readPayload(records[0] as { sessionId: string; generation: number; seq: number });
      expect(page.bytes.includes(0)).toBe(true);
      expect(page.text).toContain("a\u0000b");
      expect(problems.filter((line) => /admit|22021/.test(line))).toEqual([]);
    } finally {
      await adapter.close();
    }
  });

  it("refuses NUL in a session's title and host session ID, naming the field", async () => {
    const open = { host: "test", projectId: "bad" };
    expect(await refusal(t.memory.openSession({ ...open, hostSessionId: "s1", title: "a\u0000b" }))).toMatchObject(
      invalid("title", /^contains U\+0000 \(NUL\), which PostgreSQL text cannot store; remove it$/),
    );
    expect(await refusal(t.memory.openSession({ ...open, hostSessionId: "s\u00001" }))).toMatchObject(
      invalid("hostSessionId", /U\+0000/),
    );
    expect(await refusal(t.memory.openSession({ ...open, hostSessionId: "s\uDC001" }))).toMatchObject(
      invalid("hostSessionId", /unpaired UTF-16 surrogate/),
    );
  });

  it("refuses NUL and unpaired surrogates in an event's tool name, IDs and jsonb attributes, and stores nothing", async () => {
    const session = await t.memory.openSession({ host: "test", hostSessionId: "bad-ingest", projectId: "bad" });
    const event = (messageId: string, extra: Record<string, unknown>) => ({
      sessionId: session.sessionId,
      turnId: "t1",
      kind: "tool_call" as const,
      toolCallId: "call_1",
      finalization: { hostSessionId: "bad-ingest", messageId },
      occurredAt: new Date(),
      content: "{}",
      ...extra,
    });
    expect(await refusal(t.memory.ingest(event("m1", { toolName: "ba\u0000sh" })))).toMatchObject(
      invalid("toolName", /U\+0000/),
    );
    expect(await refusal(t.memory.ingest(event("m2", { attributes: { note: "x\u0000" } })))).toMatchObject(
      invalid("attributes.note", /U\+0000/),
    );
    expect(
      await refusal(t.memory.ingest(event("m3", { attributes: { "k\u0000": { deep: ["\uD800"] } } }))),
    ).toMatchObject({
      code: "INPUT_INVALID",
      issues: [{ field: 'attributes."k\\u0000"' }, { field: 'attributes."k\\u0000".deep[0]' }],
    });
    // An unpaired surrogate in a host ID was a raw URIError from the key encoding.
    expect(await refusal(t.memory.ingest(event("m\uD8004", {})))).toMatchObject(
      invalid("finalization.messageId", /unpaired UTF-16 surrogate/),
    );
    expect(await t.memory.listRecords(session.sessionId)).toEqual([]);
    // A payload keeps anything: NUL in content is stored.
    const stored = await t.memory.ingest(event("m5", { content: "a\u0000b", attributes: { fine: "😀" } }));
    expect(stored.status).toBe("sealed");
  });
});

describe("numbers beyond their column's type", () => {
  it("are INPUT_INVALID naming the field, not a raw 22003", async () => {
    const session = await t.memory.openSession({ host: "test", hostSessionId: "bad-numbers", projectId: "bad" });
    const ref = { sessionId: session.sessionId, generation: 2 ** 31, seq: 0 };
    expect(await refusal(t.memory.readPayload(ref))).toMatchObject(
      invalid("ref.generation", /above 2147483647 \(the largest value of a PostgreSQL integer column\)/),
    );
    expect(await refusal(t.memory.readPayload({ ...ref, generation: 0, seq: 2 ** 63 }))).toMatchObject(
      invalid("ref.seq", /above 9007199254740991/),
    );
    expect(await refusal(t.memory.listRecords(session.sessionId, { generation: 2 ** 31 }))).toMatchObject(
      invalid("generation", /above 2147483647/),
    );
    expect(await refusal(t.memory.view(session.sessionId, { revision: 2 ** 31 }))).toMatchObject(
      invalid("revision", /above 2147483647/),
    );
    const turn = { sessionId: session.sessionId, turnId: "t1" };
    await t.memory.admitTurn(turn);
    expect(
      await refusal(
        t.memory.sessions(turn, { cursor: Buffer.from("2026-01-01T00:00:00Z|ses\u0000").toString("base64url") }),
      ),
    ).toMatchObject(invalid("cursor", /not a cursor/));
  });
});

describe("optchat import of text the database cannot hold", () => {
  it("refuses a file whose later line has a NUL title in the check pass: nothing is imported, the line is named", async () => {
    const file = join(scratch, "nul-title.jsonl");
    writeFileSync(
      file,
      [
        '{"type":"session","id":"imp-ok","project":"prj_bad"}',
        '{"type":"turn","session":"imp-ok","id":"t1","outcome":"completed","records":[{"id":"m1","kind":"user","at":"2026-11-20T10:00:00Z","text":"hello"}]}',
        '{"type":"session","id":"imp-nul","project":"prj_bad","title":"bad\\u0000title"}',
        '{"type":"turn","session":"imp-ok","id":"t2","outcome":"completed","records":[{"id":"m\\ud8002","kind":"user","at":"2026-11-20T10:00:00Z","text":"x"}]}',
      ].join("\n"),
    );
    const before = await t.memory.pool.query("SELECT count(*)::int AS n FROM optchat.turns");
    const err: string[] = [];
    const code = await importCommand([file], t.config, { json: false, out: () => {}, err: (l) => err.push(l) });
    expect(code).toBe(1);
    expect(err.join("\n")).toContain(
      "import line 3: invalid input (title: contains U+0000 (NUL), which PostgreSQL text cannot store; remove it)",
    );
    expect(err.join("\n")).toContain(
      "import line 4: invalid input (records[0].id: contains an unpaired UTF-16 surrogate",
    );
    expect(err.join("\n")).toContain("2 invalid line(s); nothing was imported");
    const after = await t.memory.pool.query("SELECT count(*)::int AS n FROM optchat.turns");
    expect(after.rows[0].n).toBe(before.rows[0].n);
    expect(await t.memory.host.findSession("import", "imp-ok")).toBeUndefined();
  });

  it("imports a message containing NUL and unpaired surrogates: the text is a payload, the turn's query a repaired copy", async () => {
    const lines = [
      '{"type":"session","id":"imp-payload","project":"prj_bad"}',
      '{"type":"turn","session":"imp-payload","id":"t1","outcome":"completed","records":[{"id":"m1","kind":"user","at":"2026-11-20T10:00:00Z","text":"find a\\u0000b \\udc00"},{"id":"m2","kind":"assistant","at":"2026-11-20T10:00:01Z","text":"done\\u0000"}]}',
    ];
    expect((await checkJsonl(lines)).errors).toEqual([]);
    const file = join(scratch, "nul-text.jsonl");
    writeFileSync(file, lines.join("\n"));
    const out: string[] = [];
    const code = await importCommand([file, "--json"], t.config, {
      json: true,
      out: (l) => out.push(l),
      err: () => {},
    });
    expect(code, out.join("\n")).toBe(0);
    expect(JSON.parse(out[0] as string)).toMatchObject({ ok: true, records: { sealed: 2 } });
    const session = await t.memory.host.findSession("import", "imp-payload");
    const turn = await t.memory.getTurn({ sessionId: session?.sessionId as string, turnId: "t1" });
    expect(turn.query).toBe("find a\u2400b \uFFFD");
    const [user] = await t.memory.listRecords(session?.sessionId as string);
    const page = await t.memory.readPayload(user as { sessionId: string; generation: number; seq: number });
    expect(page.bytes.equals(Buffer.from("find a\u0000b \uFFFD", "utf8"))).toBe(true);
  });
});

describe("a refusal the import's check did not foresee", () => {
  it("still names its line, as does an unexpected error; DATABASE_UNAVAILABLE passes unchanged", async () => {
    const lines = [
      '{"type":"session","id":"imp-net","project":"prj_bad"}',
      '{"type":"turn","session":"imp-net","id":"t1","outcome":"completed","records":[{"id":"m1","kind":"user","at":"2026-11-20T10:00:00Z","text":"hi"}]}',
    ];
    const failingAdmission = (error: Error) => ({ ...t.memory, admitTurn: async () => Promise.reject(error) });
    const refused = await refusal(
      importJsonl(failingAdmission(new InputInvalidError("admitTurn", [{ field: "query", problem: "is odd" }])), lines),
    );
    expect(refused).toBeInstanceOf(ImportLineError);
    expect(refused).toMatchObject({ line: 2, issues: [{ field: "query", problem: "is odd (refused by admitTurn)" }] });
    const unexpected = await refusal(importJsonl(failingAdmission(new TypeError("x is undefined")), lines));
    expect((unexpected as unknown as Error).message).toBe("import line 2: x is undefined");
    const outage = new OptchatError("DATABASE_UNAVAILABLE", "Cannot reach PostgreSQL");
    expect(await refusal(importJsonl(failingAdmission(outage), lines))).toBe(outage);
  });
});

describe("a database that does not exist", () => {
  it("is DATABASE_UNAVAILABLE saying to run optchat migrate, not to start a server that is running", async () => {
    const missing = freshDatabaseName();
    const error = await refusal(openMemory({ ...t.config, databaseUrl: missing.url }));
    expect(error).toMatchObject({ code: "DATABASE_UNAVAILABLE", details: { sqlState: "3D000" } });
    expect(error.message).toMatch(
      /^No database "optchat_t_\w+" on the PostgreSQL server at [\w./-]+:\d+: run `optchat migrate`/,
    );
    expect(error.message).not.toMatch(/docker compose/);
  });
});
