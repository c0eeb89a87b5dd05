import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { importCommand } from "../../src/cli/commands/import.js";
import { checkJsonl, ImportLineError, importJsonl } from "../../src/memory/import.js";
import type { RunningCompactor } from "../../src/memory/worker.js";
import { startWorker } from "../../src/memory/worker.js";
import { eventually, useTestMemory, waitForIdleQueues } from "../helpers.js";

const FIXTURE = new URL("../fixtures/import-small.jsonl", import.meta.url);
const fixtureLines = () => readFileSync(FIXTURE, "utf8").split("\n").slice(0, -1);

const db = useTestMemory();
let worker: RunningCompactor;
let scratch: string;

beforeAll(async () => {
  worker = await startWorker(db.memory, db.config, () => {});
  scratch = mkdtempSync(join(tmpdir(), "optchat-import-"));
});
afterAll(async () => {
  await worker?.stop();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

/** Row counts of everything an import creates, and the publication jobs ever scheduled. */
async function counts(): Promise<Record<string, number>> {
  const { rows } = await db.memory.pool.query(`
    SELECT (SELECT count(*)::int FROM optchat.sessions WHERE host = 'import') AS sessions,
           (SELECT count(*)::int FROM optchat.scopes) AS scopes,
           (SELECT count(*)::int FROM optchat.records) AS records,
           (SELECT count(*)::int FROM optchat.turns) AS turns,
           (SELECT count(*)::int FROM optchat.publications) AS publications,
           (SELECT count(*)::int FROM optchat.ingest_conflicts) AS conflicts,
           (SELECT count(*)::int FROM pgboss.job WHERE name = 'optchat-publish') AS "publishJobs"`);
  return rows[0];
}

const silent = () => {};

describe("optchat import (JSONL)", () => {
  it("imports sessions and turns like live traffic and publishes one publication per turn", async () => {
    const seen: number[] = [];
    const summary = await importJsonl(db.memory, fixtureLines(), { onProgress: (p) => seen.push(p.lines) });
    expect(summary).toMatchObject({
      lines: 7,
      sessions: 2,
      turns: { total: 4, finished: 4, alreadyFinished: 0, publicationsScheduled: 4 },
      records: { total: 13, sealed: 13, duplicates: 0, conflicts: 0 },
      errors: 0,
      problems: [],
    });
    expect(seen).toEqual([1, 2, 3, 4, 5, 6, 7]);

    const { rows: sessions } = await db.memory.pool.query(
      "SELECT session_id, host_session_id, scope_id, title FROM optchat.sessions WHERE host = 'import' ORDER BY host_session_id",
    );
    expect(sessions).toMatchObject([
      { host_session_id: "imp-alpha", scope_id: "project:prj_import", title: "Queue for the importer" },
      { host_session_id: "imp-beta", scope_id: "project:prj_import", title: "日本語のドキュメント" },
    ]);
    const [alpha, beta] = sessions.map((row) => row.session_id as string) as [string, string];

    // Records in file order, kinds and timestamps as given, CJK text byte-exact.
    const alphaRecords = await db.memory.listRecords(alpha);
    expect(alphaRecords.map((r) => [r.seq, r.kind, r.turnId])).toEqual([
      [0, "user", "turn-a1"],
      [1, "tool_call", "turn-a1"],
      [2, "tool_result", "turn-a1"],
      [3, "assistant", "turn-a1"],
      [4, "user", "turn-a2"],
      [5, "tool_call", "turn-a2"],
      [6, "tool_result", "turn-a2"],
      [7, "report", "turn-a2"],
    ]);
    expect(alphaRecords[2]).toMatchObject({ toolName: "bash", toolCallId: "call-1" });
    const betaRecords = await db.memory.listRecords(beta);
    expect(betaRecords.map((r) => r.kind)).toEqual(["user", "assistant", "note", "user", "assistant"]);
    expect(betaRecords[0]?.occurredAt.toISOString()).toBe("2026-11-20T01:01:00.000Z");
    const page = await db.memory.readPayload({ sessionId: beta, generation: 0, seq: 1 });
    expect(page.text).toBe(
      "翻訳しました：docs/ja/README.md を追加し、用語集（glossary）に「永続キュー」を登録しました。",
    );

    const { rows: turns } = await db.memory.pool.query(
      "SELECT turn_id, state, query, publishes FROM optchat.turns ORDER BY turn_id",
    );
    expect(turns).toEqual([
      { turn_id: "turn-a1", state: "completed", query: expect.stringContaining("persistent queue"), publishes: true },
      { turn_id: "turn-a2", state: "failed", query: "Deploy the importer to staging.", publishes: true },
      { turn_id: "turn-b1", state: "completed", query: expect.stringContaining("日本語"), publishes: true },
      { turn_id: "turn-b2", state: "interrupted", query: expect.stringContaining("简体中文"), publishes: true },
    ]);

    await eventually(async () => ((await counts()).publications === 4 ? true : undefined), 30_000, "4 publications");
    const { rows: publications } = await db.memory.pool.query(
      "SELECT turn_id, outcome, start_seq, end_seq_exclusive FROM optchat.publications ORDER BY turn_id",
    );
    expect(publications).toEqual([
      { turn_id: "turn-a1", outcome: "completed", start_seq: 0, end_seq_exclusive: 4 },
      { turn_id: "turn-a2", outcome: "failed", start_seq: 4, end_seq_exclusive: 8 },
      { turn_id: "turn-b1", outcome: "completed", start_seq: 0, end_seq_exclusive: 3 },
      { turn_id: "turn-b2", outcome: "interrupted", start_seq: 3, end_seq_exclusive: 5 },
    ]);

    // The imported turns are shared memory: a later turn of the project sees them (CJK search included).
    await db.memory.admitTurn({ sessionId: beta, turnId: "probe" });
    const hits = await db.memory.search({ sessionId: beta, turnId: "probe" }, { query: "Redis" });
    expect(hits.hits.length).toBeGreaterThan(0);
    const cjk = await db.memory.search({ sessionId: beta, turnId: "probe" }, { query: "用語集" });
    expect(cjk.hits.length).toBeGreaterThan(0);
    await db.memory.finishTurn({ sessionId: beta, turnId: "probe" }, "completed");
  });

  it("changes nothing when the same file is imported again", async () => {
    const before = await counts();
    const summary = await importJsonl(db.memory, fixtureLines(), { batchSize: 2 });
    expect(summary).toMatchObject({
      sessions: 2,
      turns: { total: 4, finished: 0, alreadyFinished: 4, publicationsScheduled: 0 },
      records: { total: 13, sealed: 0, duplicates: 13, conflicts: 0 },
      errors: 0,
    });
    await waitForIdleQueues(db.memory.pool); // a stray job (node or publication) has run by now
    expect(await counts()).toEqual(before);
  });

  it("reports edited records and outcomes as problems and keeps what is stored", async () => {
    const before = await counts();
    const edited = fixtureLines().map((line) =>
      line
        .replace('"outcome":"failed"', '"outcome":"completed"')
        .replace("Deploy the importer to staging.", "Deploy the importer to production."),
    );
    const summary = await importJsonl(db.memory, edited);
    expect(summary.records).toEqual({ total: 13, sealed: 0, duplicates: 12, conflicts: 1 });
    expect(summary.errors).toBe(2);
    expect(summary.problems).toEqual([
      { line: 6, field: "records[0].id", problem: expect.stringContaining("already stored with different content") },
      { line: 6, field: "outcome", problem: expect.stringContaining("already stored as failed") },
    ]);
    expect(await counts()).toEqual({ ...before, conflicts: (before.conflicts ?? 0) + 1 });
  });

  it("stops at a malformed line with INPUT_INVALID naming the line number and field", async () => {
    const lines = fixtureLines();
    const bad = lines.map((line, index) => (index === 3 ? line.replace('"kind":"note"', '"kind":"memo"') : line));
    const error = await importJsonl(db.memory, bad).catch((e) => e);
    expect(error).toBeInstanceOf(ImportLineError);
    expect(error).toMatchObject({
      code: "INPUT_INVALID",
      line: 4,
      issues: [{ field: "records[2].kind", problem: expect.stringContaining("must be one of user, assistant") }],
    });
    expect(error.message).toMatch(/^import line 4: invalid input \(records\[2\]\.kind: must be one of/);
    expect(error.toJSON().details).toMatchObject({ line: 4, issues: [{ field: "records[2].kind" }] });

    // The lines before the bad one are imported (fixing the file and importing it again completes the import).
    const partial = await importJsonl(db.memory, [
      '{"type":"session","id":"imp-partial","project":"prj_import"}',
      '{"type":"turn","session":"imp-partial","id":"t1","outcome":"completed","records":[]}',
    ]).catch((e) => e);
    expect(partial).toMatchObject({
      line: 2,
      issues: [{ field: "records", problem: "must hold at least one record" }],
    });
    const { rows } = await db.memory.pool.query("SELECT 1 FROM optchat.sessions WHERE host_session_id = 'imp-partial'");
    expect(rows).toHaveLength(1);

    const cases: [lines: string[], line: number, field: string, problem: RegExp][] = [
      [["{not json"], 1, "(line)", /is not JSON/],
      [["[1,2]"], 1, "(line)", /must be a JSON object/],
      [['{"type":"record","id":"x"}'], 1, "type", /inside their turn/],
      [['{"type":"session","id":"s"}'], 1, "project", /Required/],
      [['{"type":"session","id":"s","project":"p","colour":"red"}'], 1, "(input)", /unknown field\(s\) colour/],
      [['{"type":"session","id":"s","project":"p","parent":"nobody"}'], 1, "parent", /not declared on an earlier line/],
      [[lines[2] as string], 1, "session", /not declared on an earlier line/],
      [[lines[0] as string, lines[0] as string], 2, "id", /already declared on line 1/],
      [[lines[0] as string, lines[2] as string, lines[2] as string], 3, "id", /already on line 2/],
      [
        [lines[0] as string, lines[2] as string, (lines[5] as string).replace('"msg-a2-call"', '"msg-a1-reply"')],
        3,
        "records[1].id",
        /already used in session imp-alpha \(line 2\)/,
      ],
      [
        [lines[0] as string, (lines[2] as string).replace('"at":"2026-11-20T10:00:05Z"', '"at":"yesterday"')],
        2,
        "records[1].at",
        /ISO 8601/,
      ],
      [
        [lines[0] as string, (lines[2] as string).replace(',"toolCallId":"call-1"', "")],
        2,
        "records[1].toolCallId",
        /required/,
      ],
      [
        [lines[0] as string, (lines[2] as string).replace('"kind":"user"', '"kind":"reasoning"')],
        2,
        "records[0].kind",
        /never stored/,
      ],
    ];
    for (const [input, line, field, problem] of cases) {
      const check = await checkJsonl(input);
      expect(check.errors[0], JSON.stringify(input)).toMatchObject({
        line,
        issues: [{ field, problem: expect.stringMatching(problem) }],
      });
    }
  });

  it("runs as `optchat import` from a file: refuses an invalid file whole, imports a valid one, prints a summary", async () => {
    const lines = fixtureLines();
    const invalid = join(scratch, "invalid.jsonl");
    writeFileSync(
      invalid,
      [
        '{"type":"session","id":"cli-s","project":"prj_cli"}',
        '{"type":"turn","session":"cli-s","id":"t1","outcome":"completed","records":[{"id":"m1","kind":"user","at":"2026-11-20T10:00:00Z","text":"hello"}]}',
        '{"type":"turn","session":"cli-s","id":"t2","outcome":"done","records":[{"id":"m2","kind":"user","at":"2026-11-20T10:00:00Z","text":"x"}]}',
      ].join("\r\n"),
    );
    const before = await counts();
    const human = collector(false);
    expect(await importCommand([invalid], db.config, human.output)).toBe(1);
    expect(human.errLines.join("\n")).toContain(
      "optchat: INPUT_INVALID: import line 3: invalid input (outcome: must be completed, interrupted or failed)",
    );
    expect(human.errLines.join("\n")).toContain("1 invalid line(s); nothing was imported");
    expect(await counts()).toEqual(before);

    const json = collector(true);
    expect(await importCommand([invalid, "--json"], db.config, json.output)).toBe(1);
    expect(JSON.parse(json.outLines[0] as string)).toMatchObject({
      ok: false,
      error: { code: "INPUT_INVALID", details: { line: 3, issues: [{ field: "outcome" }] } },
      invalidLines: 1,
    });

    const valid = join(scratch, "valid.jsonl");
    writeFileSync(valid, `${lines.join("\n")}\n${readFileSync(invalid, "utf8").split("\r\n").slice(0, 2).join("\n")}`);
    const writes: string[] = [];
    const ok = collector(true);
    expect(
      await importCommand(["--json", valid], db.config, ok.output, { isTTY: true, write: (s) => writes.push(s) }),
    ).toBe(0);
    expect(JSON.parse(ok.outLines[0] as string)).toMatchObject({
      ok: true,
      file: valid,
      lines: 9,
      sessions: 3,
      turns: { total: 5, finished: 1, alreadyFinished: 4, publicationsScheduled: 1 },
      records: { total: 14, sealed: 1, duplicates: 13, conflicts: 0 },
      errors: 0,
    });
    expect(writes.at(-2)).toBe("\r\u001b[Kimported 9/9 lines, 3 sessions, 5 turns, 14 records");
    expect(writes.at(-1)).toBe("\r\u001b[K");

    const text = collector(false);
    expect(await importCommand([valid], db.config, text.output, { isTTY: false, write: silent })).toBe(0);
    expect(text.outLines).toEqual([
      expect.stringMatching(
        /^imported .*valid\.jsonl: 9 lines, 3 sessions, 5 turns \(0 finished now, 5 already finished\), 14 records \(0 new, 14 already stored, 0 conflicts\) in \d+\.\d s$/,
      ),
    ]);

    const missing = await importCommand([join(scratch, "nope.jsonl")], db.config, collector(false).output).catch(
      (e) => e,
    );
    expect(missing).toMatchObject({ code: "INPUT_INVALID", message: expect.stringContaining("cannot read") });
    await expect(importCommand([], db.config, collector(false).output)).rejects.toMatchObject({
      code: "INPUT_INVALID",
    });
  });
});

/** A fake CLI output that keeps what was printed. */
function collector(json: boolean) {
  const outLines: string[] = [];
  const errLines: string[] = [];
  return {
    output: { json, out: (line: string) => outLines.push(line), err: (line: string) => errLines.push(line) },
    outLines,
    errLines,
  };
}
