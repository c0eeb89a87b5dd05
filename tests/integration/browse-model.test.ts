import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBrowseModel } from "../../src/memory/browse.js";
import { budgetSettingsOf } from "../../src/memory/config.js";
import { type Memory, openMemory } from "../../src/memory/service.js";
import type { Session } from "../../src/store/sessions.js";
import { databaseDigest, HOSTILE_TEXT, ingestEvent, seedBrowseMemory, useTestMemory } from "../helpers.js";

const db = useTestMemory();
let a: Session;
let b: Session;
let texts: Map<string, string>;
let readOnly: Memory;

const WINDOW = {
  windowTokens: 50_000,
  instructionsTokens: 1000,
  activeTokens: 0,
  outputTokens: 4096,
  reserveTokens: 2048,
};

beforeAll(async () => {
  ({ a, b, texts } = await seedBrowseMemory(db.memory, db.config));
  readOnly = await openMemory(db.config, { applicationName: "optchat-browse-test", readOnly: true });
});
afterAll(async () => {
  await readOnly?.close();
});

describe("the browser's read-only service", () => {
  it("refuses every write at the server (default_transaction_read_only), whatever the code path", async () => {
    await expect(
      readOnly.pool.query("INSERT INTO optchat.scopes (scope_id, kind) VALUES ('project:x', 'project')"),
    ).rejects.toMatchObject({ code: "25006" });
    await expect(
      readOnly.ingest(
        ingestEvent({
          sessionId: a.sessionId,
          turnId: "a9",
          kind: "user",
          host: a.hostSessionId,
          messageId: "late",
          occurredAt: new Date().toISOString(),
          content: "a write through the service",
        }),
      ),
    ).rejects.toThrow(/read-only/);
  });

  it("previews exactly the blocks the session's next turn gets, writing nothing", async () => {
    const before = await databaseDigest(db.memory.pool);
    const preview = await readOnly.previewContext(b.sessionId, WINDOW);
    expect(await databaseDigest(db.memory.pool)).toEqual(before);
    expect(preview.blocks.map((block) => block.name)).toEqual(["shared_memory", "session_memory", "previous_exchange"]);
    // The same blocks, byte for byte, as a turn admitted now assembles (strict readiness: everything is summarized).
    await db.memory.admitTurn({ sessionId: b.sessionId, turnId: "b2", query: "and now?" });
    const real = await db.memory.assembleContext({ sessionId: b.sessionId, turnId: "b2" }, WINDOW);
    expect(preview.blocks.map((block) => block.text)).toEqual(real.blocks.map((block) => block.text));
    expect(preview.tokens).toEqual(real.tokens);
    expect(preview.blocks[0]?.text).toContain("&lt;/shared_memory&gt;");
  });

  it("builds every page's model without writing a row", async () => {
    const model = createBrowseModel(readOnly);
    const before = await databaseDigest(db.memory.pool);
    const scopes = await model.scopes();
    expect(scopes).toMatchObject([{ scopeId: "project:prj_browse", kind: "project", sessions: 2, publications: 3 }]);
    const scope = await model.scope("project:prj_browse", 0);
    expect(scope.sessions.map((s) => [s.sessionId, s.records, s.turns, s.publications])).toEqual([
      [a.sessionId, 6, 2, 2],
      [b.sessionId, 2, 2, 1], // b2, admitted above, has no records yet
    ]);
    const shared = await model.shared("project:prj_browse");
    expect(shared.leafCount).toBe(3);
    expect(shared.block).toMatch(/^<shared_memory scope="project:prj_browse">\n/);
    const publications = await model.publications("project:prj_browse", 0);
    expect(publications.publications.map((p) => [p.seq, p.outcome, p.turnId, p.records])).toEqual([
      [0, "completed", "a1", "0..3"],
      [1, "completed", "a2", "4..5"],
      [2, "completed", "b1", "0..1"],
    ]);
    const session = await model.session(a.sessionId);
    expect(session.view.leafCount).toBe(6);
    expect(session.spend).toBeUndefined();
    // With the caps: today's spend of the session and of every session against the cap (issue 39).
    const priced = await createBrowseModel(readOnly, budgetSettingsOf(db.config)).session(a.sessionId);
    expect(priced.spend?.session).toMatch(/^\$\d+\.\d{4} \(/);
    expect(priced.spend?.all).toMatch(/ of \$5 a day \(OPTCHAT_BUDGET_DAILY_USD\)$/);
    expect(session.health.verdict).toBe("up to date");
    // Levels and their spans: level 0 holds the six messages, each spanning its own record's time.
    const leaves = await model.level({ kind: "session", sessionId: a.sessionId }, 0, 0);
    expect(leaves.lines.map((line) => line.ref)).toEqual(["0+1", "1+1", "2+1", "3+1", "4+1", "5+1"]);
    expect(leaves.lines[5]?.span?.first.toISOString()).toBe("2026-11-20T09:00:06.000Z");
    const level1 = await model.level({ kind: "session", sessionId: a.sessionId }, 1, 0);
    expect(level1.lines[0]?.span).toEqual({
      first: new Date("2026-11-20T09:00:01.000Z"),
      last: new Date("2026-11-20T09:00:02.000Z"),
    });
    const zoomed = await model.zoom({ kind: "session", sessionId: a.sessionId }, "4+2");
    expect(zoomed).toMatchObject({ kind: "lines", children: [{ ref: "4+1" }, { ref: "5+1" }] });
    expect(await model.zoom({ kind: "session", sessionId: a.sessionId }, "5+1")).toEqual({
      kind: "message",
      sessionId: a.sessionId,
      seq: 5,
    });
    const publication = await model.zoom({ kind: "shared", scopeId: "project:prj_browse" }, "pub:1+1");
    expect(publication).toMatchObject({ kind: "publication", publication: { turnId: "a2", outcome: "completed" } });
    const records = await model.records(a.sessionId, 0);
    expect(records.records.map((r) => r.page.text)).toEqual(
      [0, 1, 2, 3, 4, 5].map((seq) => texts.get(`${a.sessionId}:${seq}`)),
    );
    expect((await model.message(a.sessionId, 5)).page.text).toBe(HOSTILE_TEXT);
    expect((await model.injections(b.sessionId)).injections).toMatchObject([{ status: "injected", turnId: "b1" }]);
    const hits = await model.search("project:prj_browse", "数据");
    expect(hits.hits.length).toBeGreaterThan(0);
    expect(hits.hits[0]?.segments.filter((s) => s.match).map((s) => s.text)).toContain("数据");
    expect(await databaseDigest(db.memory.pool)).toEqual(before);
  });
});
