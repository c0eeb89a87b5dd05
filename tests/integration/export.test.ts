import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkJsonl } from "../../src/memory/import.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import type { Memory } from "../../src/memory/service.js";
import { collect, ROOT, runCli, useTestMemory } from "../helpers.js";

/**
 * `optchat export --jsonl` → `optchat import` into an empty database gives back every record byte for byte (issue 12
 * item 5): kinds, times, tool fields, host truncation, payload bytes (CJK, emoji, NUL, invalid UTF-8, 5 MiB), in each
 * session's order, with the turns' outcomes, subagent links and scopes.
 */

const source = useTestMemory();
const target = useTestMemory();
const scratch = mkdtempSync(join(tmpdir(), "optchat-export-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const BIG = `${"大きなログ行 with latin text and numbers 12345\n".repeat(110_000)}end`; // > 5 MiB of UTF-8
const INVALID_UTF8 = Buffer.from([0x61, 0xff, 0xfe, 0x00, 0xc3, 0x28, 0x62]);

interface TurnSpec {
  id: string;
  outcome: "completed" | "interrupted" | "failed" | "active";
  records: Omit<IngestEvent, "sessionId" | "turnId" | "finalization" | "occurredAt">[];
}

let clock = Date.UTC(2026, 10, 20, 9, 0, 0);

async function seed(
  memory: Memory,
  session: { host: string; hostSessionId: string; projectId: string; parentSessionId?: string; scopeId?: string },
  turns: TurnSpec[],
  keyOf: (turn: string, n: number) => { messageId: string; partId?: string },
): Promise<string> {
  const { sessionId } = await memory.openSession({ ...session, title: `title of ${session.hostSessionId} — 標題` });
  for (const turn of turns) {
    await memory.admitTurn({ sessionId, turnId: turn.id });
    const results = await memory.ingestMany(
      turn.records.map((record, n) => {
        clock += 1_000;
        return {
          ...record,
          sessionId,
          turnId: turn.id,
          finalization: { hostSessionId: session.hostSessionId, ...keyOf(turn.id, n) },
          occurredAt: new Date(clock).toISOString(),
        };
      }),
    );
    expect(results.every((r) => r.status === "sealed")).toBe(true);
    if (turn.outcome !== "active") await memory.finishTurn({ sessionId, turnId: turn.id }, turn.outcome);
  }
  return sessionId;
}

const pluginKeys = (turn: string, n: number) => ({ messageId: `msg_${turn}_${n >> 1}`, partId: `prt_${turn}_${n}` });
const importKeys = (turn: string, n: number) => ({ messageId: `${turn}-m${n}` });

beforeAll(async () => {
  const parent = await seed(
    source.memory,
    { host: "opencode", hostSessionId: "ses_2319975570014Lzkby7p0TSd", projectId: "prj_export" },
    [
      {
        id: "msg_a1",
        outcome: "completed",
        records: [
          { kind: "user", content: 'ドキュメントを日本語に翻訳してください。🙂 and "quotes" \\ backslash' },
          {
            kind: "tool_call",
            content: JSON.stringify({ tool: "bash", input: { command: "grep -rn broker src/" } }),
            toolCallId: "call_1",
            toolName: "bash",
          },
          {
            kind: "tool_result",
            content: "src/broker.ts:12: export class DurableBroker\n",
            toolCallId: "call_1",
            toolName: "bash",
            hostTruncated: { originalBytes: 90_000 },
          },
          { kind: "tool_call", content: "{}", toolCallId: "call_2", toolName: "read" },
          { kind: "tool_result", content: "", toolCallId: "call_2", toolName: "read", hostTruncated: {} },
          { kind: "assistant", content: "翻訳しました。Decision: use the broker's durable queue." },
        ],
      },
      {
        id: "msg_a2",
        outcome: "failed",
        records: [
          { kind: "user", content: "show me the log" },
          { kind: "tool_result", content: BIG, toolCallId: "call_3", toolName: "bash" },
          { kind: "note", content: "The model request failed: APIError: scripted bad request" },
        ],
      },
      {
        id: "msg_a3",
        outcome: "interrupted",
        records: [
          { kind: "user", content: "bytes: " },
          { kind: "assistant", content: INVALID_UTF8 },
          { kind: "assistant", content: "NUL \u0000 inside, and a lone surrogate \ud800 repaired" },
        ],
      },
      { id: "msg_a4", outcome: "active", records: [{ kind: "user", content: "still running" }] },
    ],
    pluginKeys,
  );
  await seed(
    source.memory,
    {
      host: "opencode",
      hostSessionId: "ses_child00000001Lzkby7p0TSd",
      projectId: "prj_export",
      parentSessionId: parent,
    },
    [
      {
        id: "msg_c1",
        outcome: "completed",
        records: [
          { kind: "user", content: "CHILD say hi" },
          { kind: "report", content: "hi" },
        ],
      },
    ],
    pluginKeys,
  );
  await seed(
    source.memory,
    { host: "import", hostSessionId: "alpha", projectId: "prj_export" },
    [{ id: "t1", outcome: "completed", records: [{ kind: "user", content: "imported before" }] }],
    importKeys,
  );
  await seed(
    source.memory,
    { host: "import", hostSessionId: "profiled", projectId: "prj_other", scopeId: "profile:team" },
    [{ id: "t1", outcome: "completed", records: [{ kind: "assistant", content: "in a profile scope" }] }],
    importKeys,
  );
}, 120_000);

/** Everything a record is, per session (by host session id) in seq order, payload hashed. */
async function snapshot(memory: Memory) {
  const { rows } = await memory.pool.query(
    `SELECT s.host_session_id, s.title, sc.kind AS scope_kind, s.scope_id, s.project_id,
            parent.host_session_id AS parent, r.seq, r.turn_id, r.kind, r.occurred_at, r.tool_call_id, r.tool_name,
            r.host_truncated, r.host_original_bytes, r.payload_bytes, encode(r.payload_hash, 'hex') AS hash,
            b.valid_utf8, encode(sha256(b.content), 'hex') AS content_sha, r.event_key, s.host
       FROM optchat.records r
       JOIN optchat.sessions s ON s.session_id = r.session_id
       JOIN optchat.scopes sc ON sc.scope_id = s.scope_id
       JOIN optchat.blobs b ON b.hash = r.payload_hash
       LEFT JOIN optchat.sessions parent ON parent.session_id = s.parent_session_id
      ORDER BY s.host_session_id, r.seq`,
  );
  return rows;
}

async function turns(memory: Memory) {
  const { rows } = await memory.pool.query(
    `SELECT s.host_session_id, t.turn_id, t.state, t.publishes FROM optchat.turns t
       JOIN optchat.sessions s ON s.session_id = t.session_id ORDER BY 1, t.admission_seq`,
  );
  return rows;
}

describe("export --jsonl, then import into an empty database", () => {
  it("gives back every record byte for byte, with its turn's outcome", async () => {
    const file = join(scratch, "all.jsonl");
    const exported = await runCli(["export", "--jsonl", "--out", file, "--json"], { DATABASE_URL: source.url });
    expect(exported.code, exported.stderr).toBe(0);
    expect(JSON.parse(exported.stdout)).toMatchObject({
      ok: true,
      sessions: 4,
      turns: 6,
      records: 16,
      skipped: { activeTurns: 1, emptyTurns: 0 },
    });

    const imported = await runCli(["import", file, "--json"], { DATABASE_URL: target.url });
    expect(imported.code, imported.stderr).toBe(0);
    expect(JSON.parse(imported.stdout)).toMatchObject({ ok: true, records: { sealed: 16, conflicts: 0 } });

    const before = (await snapshot(source.memory)).filter((r) => r.turn_id !== "msg_a4");
    const after = await snapshot(target.memory);
    expect(after).toHaveLength(16);
    const comparable = ({ host: _h, event_key: _k, ...rest }: Record<string, unknown>) => rest;
    expect(after.map(comparable)).toEqual(before.map(comparable));
    // The payloads really are the originals, not merely equal hashes of something else.
    const big = after.find((r) => r.payload_bytes > 5 * 1024 * 1024);
    expect(big?.content_sha).toBe(before.find((r) => r.payload_bytes > 5 * 1024 * 1024)?.content_sha);
    expect(after.find((r) => r.valid_utf8 === false)?.payload_bytes).toBe(INVALID_UTF8.length);
    // A session that came from an import keeps its finalization keys.
    const keys = (rows: typeof after) => rows.filter((r) => r.host_session_id === "alpha").map((r) => r.event_key);
    expect(keys(after)).toEqual(keys(before));

    const turnsBefore = (await turns(source.memory)).filter((t) => t.state !== "active");
    expect(await turns(target.memory)).toEqual(turnsBefore);
  }, 120_000);

  it("writes the same file again from the imported copy", async () => {
    const again = join(scratch, "again.jsonl");
    const result = await runCli(["export", "--jsonl", "--out", again], { DATABASE_URL: target.url });
    expect(result.code, result.stderr).toBe(0);
    const [first, second] = [readFileSync(join(scratch, "all.jsonl")), readFileSync(again)];
    expect(second.length).toBe(first.length);
    expect(second.equals(first)).toBe(true); // toEqual would diff 6 MB byte by byte
  }, 60_000);

  it("selects one session (by OpenCode's id, with its parent declared) or one scope, on stdout", async () => {
    const one = await runCli(["export", "--jsonl", "--session", "ses_child00000001Lzkby7p0TSd"], {
      DATABASE_URL: source.url,
    });
    expect(one.code, one.stderr).toBe(0);
    const lines = one.stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line));
    expect(lines.map((l) => [l.type, l.id])).toEqual([
      ["session", "ses_2319975570014Lzkby7p0TSd"],
      ["session", "ses_child00000001Lzkby7p0TSd"],
      ["turn", "msg_c1"],
    ]);
    expect(lines[1].parent).toBe("ses_2319975570014Lzkby7p0TSd");
    expect(one.stderr).toMatch(/^exported 2 session\(s\), 1 turn\(s\), 2 record\(s\)/);

    const scope = await runCli(["export", "--jsonl", "--scope", "profile:team"], { DATABASE_URL: source.url });
    const scoped = scope.stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line));
    expect(scoped[0]).toMatchObject({ type: "session", id: "profiled", scope: "profile:team", project: "prj_other" });
    expect(scoped).toHaveLength(2);
  }, 60_000);

  it("stops quietly when the reader of stdout goes away (export | head -1)", async () => {
    const result = await collect(
      spawn("sh", ["-c", `node ${ROOT}/bin/optchat.mjs export --jsonl | head -1`], {
        cwd: ROOT,
        env: { ...process.env, DATABASE_URL: source.url },
        stdio: ["ignore", "pipe", "pipe"],
      }),
    );
    expect(JSON.parse(result.stdout).type).toBe("session");
    expect(result.stderr).not.toMatch(/EPIPE|\n\s+at /);
  }, 60_000);

  it("reads the format's additions back exactly, and refuses text and bytes together", async () => {
    const line = (record: object) =>
      JSON.stringify({ type: "turn", session: "s", id: "t", outcome: "completed", records: [record] });
    const session = JSON.stringify({ type: "session", id: "s", project: "p" });
    const base = { id: "m", kind: "tool_result", toolCallId: "c", at: "2026-11-20T10:00:00Z" };
    const both = await checkJsonl([session, line({ ...base, text: "a", bytes: "YQ==" })]);
    expect(both.errors[0]?.message).toMatch(/records\[0\]\.bytes: give either text or bytes, not both/);
    const neither = await checkJsonl([session, line(base)]);
    expect(neither.errors[0]?.message).toMatch(/records\[0\]\.text: is required \(or bytes, in base64\)/);
    const size = await checkJsonl([session, line({ ...base, text: "a", hostOriginalBytes: 5 })]);
    expect(size.errors[0]?.message).toMatch(/hostOriginalBytes: is only for a record with hostTruncated: true/);
    const notBase64 = await checkJsonl([session, line({ ...base, bytes: "not base64!" })]);
    expect(notBase64.errors[0]?.message).toMatch(/records\[0\]\.bytes: must be base64/);
  });

  it("refuses to overwrite a file and says how to choose a format", async () => {
    const exists = await runCli(["export", "--jsonl", "--out", join(scratch, "all.jsonl")], {
      DATABASE_URL: source.url,
    });
    expect(exists.code).toBe(1);
    expect(exists.stderr).toMatch(/INPUT_INVALID: --out .* already exists/);
    const noFormat = await runCli(["export"], { DATABASE_URL: source.url });
    expect(noFormat.stderr).toMatch(/choose a format: --jsonl/);
  });
});
