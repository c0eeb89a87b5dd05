import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isOptchatError } from "../../src/core/errors.js";
import type { RunningCompactor } from "../../src/memory/worker.js";
import { startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import type { Turn } from "../../src/store/turns.js";
import { eventually, ingestEvent, LARGE_WINDOW, messageWriter, useTestMemory, waitForIdleQueues } from "../helpers.js";

// Issue 15 item 4 at the service level: forgetting session A removes its text from every read path of the other
// sessions (search, zoom with A's old refs, the shared block, session listings), keeps a blob another record shares,
// keeps the BM25 statistics equal to a recount, keeps publication numbers gap-free with removed markers, re-pins a
// snapshot pinned before the deletion, and leaves the audit clean.

const db = useTestMemory();
const MARKER = "zebracornium";
const SHARED_PAYLOAD = "identical words both sessions sent: please run the linter on src";
let worker: RunningCompactor;
let a: Session;
let b: Session;
let c: Session;

const WINDOW = LARGE_WINDOW;
const writeMessage = messageWriter(db, Date.UTC(2026, 10, 20, 10));

async function count(sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await db.memory.pool.query(sql, params);
  return Number(rows[0]?.n ?? 0);
}

async function turn(session: Session, turnId: string, texts: string[]): Promise<void> {
  const before = await count("SELECT count(*) AS n FROM optchat.publications");
  await db.memory.admitTurn({ sessionId: session.sessionId, turnId, query: texts[0], publishes: true });
  for (const [k, text] of texts.entries()) await writeMessage(session, turnId, k === 0 ? "user" : "assistant", text);
  await db.memory.finishTurn({ sessionId: session.sessionId, turnId }, "completed");
  await eventually(
    async () => ((await count("SELECT count(*) AS n FROM optchat.publications")) > before ? true : undefined),
    30_000,
    `publication of ${turnId}`,
  );
}

/** The scope's BM25 statistics recounted from the stored vectors (migration 007's backfill), as sorted text. */
async function recountedStatistics(scopeId: string): Promise<{ stored: string; recount: string }> {
  const stored = await db.memory.pool.query(
    `SELECT 'term ' || term || ' ' || documents AS line FROM optchat.search_term_counts WHERE scope_id = $1
     UNION ALL SELECT 'records ' || documents || ' ' || total_length FROM optchat.search_scope_stats WHERE scope_id = $1 AND documents > 0
     UNION ALL SELECT 'tree ' || tree_id || ' ' || documents || ' ' || total_length FROM optchat.search_tree_stats WHERE scope_id = $1 AND documents > 0
     ORDER BY 1`,
    [scopeId],
  );
  const recount = await db.memory.pool.query(
    `WITH published AS (
       SELECT r.search FROM optchat.publications p
         JOIN optchat.records r ON r.session_id = p.session_id AND r.generation = p.generation AND r.turn_id = p.turn_id
          AND r.seq >= p.start_seq AND r.seq < p.end_seq_exclusive
        WHERE p.scope_id = $1 AND p.retired_at IS NULL AND r.search IS NOT NULL)
     SELECT 'term ' || u.lexeme || ' ' || count(*) AS line FROM published CROSS JOIN LATERAL unnest(search) AS u(lexeme, positions, weights) GROUP BY u.lexeme
     UNION ALL SELECT 'records ' || count(*) || ' ' || coalesce(sum(length(search)), 0) FROM published HAVING count(*) > 0
     UNION ALL SELECT 'tree ' || n.tree_id || ' ' || count(*) || ' ' || coalesce(sum(length(n.search)), 0)
       FROM optchat.nodes n JOIN optchat.trees t ON t.tree_id = n.tree_id LEFT JOIN optchat.sessions s ON s.session_id = t.session_id
      WHERE coalesce(t.scope_id, s.scope_id) = $1 AND n.search IS NOT NULL GROUP BY n.tree_id
     ORDER BY 1`,
    [scopeId],
  );
  const text = (rows: { line: string }[]) => rows.map((r) => r.line).join("\n");
  return { stored: text(stored.rows), recount: text(recount.rows) };
}

function refusal(promise: Promise<unknown>): Promise<string> {
  return promise.then(
    () => "resolved",
    (error: unknown) => (isOptchatError(error) ? error.code : String(error)),
  );
}

let pinnedBefore: Turn;
let finishedBefore: Turn;
const oldRefs: string[] = [];

beforeAll(async () => {
  worker = await startWorker(db.memory, db.config, () => {});
  a = await db.memory.openSession({ host: "test", hostSessionId: "A", projectId: "prj_forget", title: "A title" });
  b = await db.memory.openSession({ host: "test", hostSessionId: "B", projectId: "prj_forget", title: "B" });
  c = await db.memory.openSession({ host: "test", hostSessionId: "C", projectId: "prj_forget", title: "C" });
  for (let k = 0; k < 6; k++) {
    await turn(a, `a${k}`, [`please look at the ${MARKER} module number ${k}`, `the ${MARKER} module ${k} is fine`]);
    await turn(b, `b${k}`, [`b asks about the parser ${k}`, k === 2 ? SHARED_PAYLOAD : `b parser answer ${k}`]);
  }
  await turn(a, "a-shared", [SHARED_PAYLOAD, `done with ${MARKER}`]);
  await turn(c, "c0", ["c talks about the kettle", "the kettle boils"]);
  await waitForIdleQueues(db.memory.pool);
  finishedBefore = await db.memory.admitTurn({ sessionId: b.sessionId, turnId: "b-finished", publishes: false });
  await db.memory.finishTurn({ sessionId: b.sessionId, turnId: "b-finished" }, "completed");
  pinnedBefore = await db.memory.admitTurn({ sessionId: b.sessionId, turnId: "b-pinned", publishes: true });
  // A's refs as another session collected them: its search hits and the shared lines over its publications.
  const hits = await db.memory.search(pinnedBefore, { query: MARKER });
  for (const hit of hits.hits) oldRefs.push(hit.ref);
  expect(oldRefs.length).toBeGreaterThan(2);
  const before = await db.memory.assembleContext(pinnedBefore, WINDOW);
  expect(before.blocks.find((x) => x.name === "shared_memory")?.text).toContain(MARKER);
}, 120_000);

afterAll(async () => {
  await worker?.stop();
});

describe("forget --session", () => {
  it("dry run counts what goes, then forgets it in one transaction", async () => {
    const plan = await db.memory.planForget({ sessionIds: [a.sessionId] });
    expect(plan.sessions.map((s) => s.sessionId)).toEqual([a.sessionId]);
    expect(plan.records).toBe(14);
    expect(plan.publications).toBe(7);
    expect(await count("SELECT count(*) AS n FROM optchat.nodes WHERE text LIKE $1", [`%${MARKER}%`])).toBeGreaterThan(
      10,
    );
    const progress: string[] = [];
    const report = await db.memory.forget({ sessionIds: [a.sessionId] }, { onProgress: (m) => progress.push(m) });
    expect(report.removed.records).toBe(14);
    expect(report.publications).toBe(7);
    expect(progress.length).toBeGreaterThan(1);
    await waitForIdleQueues(db.memory.pool);
  });

  it("leaves no text of A in any node, record, blob or search row", async () => {
    expect(await count("SELECT count(*) AS n FROM optchat.nodes WHERE text LIKE $1", [`%${MARKER}%`])).toBe(0);
    expect(await count("SELECT count(*) AS n FROM optchat.records WHERE session_id = $1", [a.sessionId])).toBe(0);
    expect(
      await count("SELECT count(*) AS n FROM optchat.blobs WHERE position(convert_to($1, 'UTF8') in content) > 0", [
        MARKER,
      ]),
    ).toBe(0);
    expect(
      await count("SELECT count(*) AS n FROM optchat.nodes WHERE search @@ to_tsquery('simple', $1)", [MARKER]),
    ).toBe(0);
    expect(await count("SELECT count(*) AS n FROM optchat.search_term_counts WHERE term = $1", [MARKER])).toBe(0);
    expect(await count("SELECT count(*) AS n FROM optchat.turns WHERE query LIKE $1", [`%${MARKER}%`])).toBe(0);
    expect(await count("SELECT count(*) AS n FROM optchat.sessions WHERE title = 'A title'")).toBe(0);
  });

  it("keeps a blob that a surviving record shares, and drops A's own", async () => {
    expect(
      await count(
        "SELECT count(*) AS n FROM optchat.blobs b JOIN optchat.records r ON r.payload_hash = b.hash WHERE r.session_id = $1 AND convert_from(b.content, 'UTF8') = $2",
        [b.sessionId, SHARED_PAYLOAD],
      ),
    ).toBe(1);
    expect(
      await count(
        "SELECT count(*) AS n FROM optchat.blobs b WHERE NOT EXISTS (SELECT 1 FROM optchat.records r WHERE r.payload_hash = b.hash)",
      ),
    ).toBe(0);
  });

  it("keeps the BM25 statistics equal to a recount", async () => {
    const { stored, recount } = await recountedStatistics(b.scopeId);
    expect(stored).toBe(recount);
  });

  it("keeps publication numbers gap-free, A's shown as removed markers", async () => {
    const { rows } = await db.memory.pool.query(
      `SELECT p.publication_seq, p.retired_reason, n.text FROM optchat.publications p
         JOIN optchat.trees t ON t.kind = 'shared' AND t.scope_id = p.scope_id
         JOIN optchat.nodes n ON n.tree_id = t.tree_id AND n.level = 0 AND n.idx = p.publication_seq
        WHERE p.scope_id = $1 ORDER BY p.publication_seq`,
      [b.scopeId],
    );
    expect(rows.map((r) => Number(r.publication_seq))).toEqual(rows.map((_, k) => k));
    const retired = rows.filter((r) => r.retired_reason === "deleted");
    expect(retired).toHaveLength(7);
    for (const row of retired) expect(row.text).toMatch(/^\[removed: /);
  });

  it("serves none of A to another session's next turn: search, zoom with old refs, shared block", async () => {
    const next = await db.memory.admitTurn({ sessionId: b.sessionId, turnId: "b-after", publishes: true });
    expect((await db.memory.search(next, { query: MARKER })).hits).toEqual([]);
    for (const ref of oldRefs) {
      const answer = await db.memory.zoom(next, ref).catch((error: unknown) => error);
      expect(JSON.stringify(answer)).not.toContain(MARKER);
    }
    const context = await db.memory.assembleContext(next, WINDOW);
    const shared = context.blocks.find((x) => x.name === "shared_memory")?.text ?? "";
    expect(shared).not.toContain(MARKER);
    expect(shared).toContain("[removed: ");
    expect(shared).toContain("kettle");
  });

  it("re-pins an active turn pinned before the deletion, refuses a finished one", async () => {
    const context = await db.memory.assembleContext(pinnedBefore, WINDOW);
    expect(JSON.stringify(context)).not.toContain(MARKER);
    const repinned = await db.memory.getTurn(pinnedBefore);
    expect(repinned.snapshot.retentionEpoch).toBeGreaterThan(pinnedBefore.snapshot.retentionEpoch);
    expect((await db.memory.search(pinnedBefore, { query: MARKER })).hits).toEqual([]);
    expect(await refusal(db.memory.search(finishedBefore, { query: MARKER }))).toBe("SNAPSHOT_RETIRED");
  });

  it("hides A from session listings and refuses A's own reads and a late re-registration", async () => {
    const reader = await db.memory.readScope(b.scopeId);
    const listed = await db.memory.sessions(reader);
    expect(listed.sessions.map((s) => s.sessionId)).not.toContain(a.sessionId);
    expect(await refusal(db.memory.assembleContext({ sessionId: a.sessionId, turnId: "a0" }, WINDOW))).toBe(
      "SESSION_DELETED",
    );
    expect(await refusal(db.memory.openSession({ host: "test", hostSessionId: "A", projectId: "prj_forget" }))).toBe(
      "SESSION_DELETED",
    );
    // A late host event (a partial or a final message) stores nothing of it.
    for (const final of [false, true])
      expect(
        await refusal(
          db.memory.ingest(
            ingestEvent({
              sessionId: a.sessionId,
              turnId: "a-late",
              kind: "assistant",
              host: "A",
              messageId: `late-${final}`,
              occurredAt: "2026-11-20T11:00:00Z",
              content: `late ${MARKER}`,
              final,
            }),
          ),
        ),
      ).toBe("SESSION_NOT_FOUND");
  });

  it("passes every audit, and forgetting again is a no-op", async () => {
    const audit = await db.memory.audit();
    expect(audit.violations).toEqual([]);
    const again = await db.memory.forget({ sessionIds: [a.sessionId] });
    expect(again.sessions).toEqual([]);
  });
});

describe("forget --scope and --before", () => {
  it("forgets every session of a scope, leaving only removed markers in its shared tree", async () => {
    const e = await db.memory.openSession({ host: "test", hostSessionId: "E", projectId: "prj_scope_forget" });
    const f = await db.memory.openSession({ host: "test", hostSessionId: "F", projectId: "prj_scope_forget" });
    await turn(e, "e0", ["e talks about the heron", "heron noted"]);
    await turn(f, "f0", ["f talks about the egret", "egret noted"]);
    await waitForIdleQueues(db.memory.pool);
    const report = await db.memory.forget({ scopeId: e.scopeId });
    expect(report.sessions.map((s) => s.sessionId).sort()).toEqual([e.sessionId, f.sessionId].sort());
    await waitForIdleQueues(db.memory.pool);
    expect(await count("SELECT count(*) AS n FROM optchat.nodes WHERE text ~ '(heron|egret)'")).toBe(0);
    const reader = await db.memory.readScope(e.scopeId);
    expect((await db.memory.sessions(reader)).sessions).toEqual([]);
    expect((await db.memory.audit()).violations).toEqual([]);
  });

  it("forgets the sessions last active before a date, and only those", async () => {
    const old = await db.memory.openSession({ host: "test", hostSessionId: "OLD", projectId: "prj_forget" });
    await db.memory.ingest(
      ingestEvent({
        sessionId: old.sessionId,
        turnId: "o0",
        kind: "user",
        host: "OLD",
        messageId: "old-1",
        occurredAt: "2020-05-01T10:00:00Z",
        content: "an old note about the dodo",
      }),
    );
    const plan = await db.memory.planForget({ before: new Date("2021-01-01T00:00:00Z") });
    expect(plan.sessions.map((s) => s.sessionId)).toEqual([old.sessionId]);
    const report = await db.memory.forget({ before: new Date("2021-01-01T00:00:00Z") });
    expect(report.removed.records).toBe(1);
    expect(
      await count("SELECT count(*) AS n FROM optchat.records WHERE session_id = $1", [b.sessionId]),
    ).toBeGreaterThan(0);
  });
});

describe("the process-wide node cache", () => {
  it("never serves a forgotten leaf's text cached before the deletion (same tree event, new revision)", async () => {
    const x = await db.memory.openSession({ host: "test", hostSessionId: "X", projectId: "prj_cache" });
    const y = await db.memory.openSession({ host: "test", hostSessionId: "Y", projectId: "prj_cache" });
    await turn(x, "x0", ["the ocelot password is kept here", "ocelot noted"]);
    const pinned = await db.memory.admitTurn({ sessionId: y.sessionId, turnId: "y0", publishes: true });
    const before = await db.memory.assembleContext(pinned, WINDOW);
    expect(JSON.stringify(before.blocks)).toContain("ocelot");
    await db.memory.forget({ sessionIds: [x.sessionId] });
    const after = await db.memory.assembleContext(pinned, WINDOW);
    expect(JSON.stringify(after.blocks)).not.toContain("ocelot");
    expect(JSON.stringify(after.blocks)).toContain("[removed: ");
  });
});

describe("revoke (isolate) and archive", () => {
  it("isolating C retires its publications but keeps its own memory", async () => {
    const report = await db.memory.isolateSession(c.sessionId);
    expect(report.publicationsRetired).toBe(1);
    expect(report.toScope).toBe(`isolated:${c.sessionId}`);
    await waitForIdleQueues(db.memory.pool);
    const next = await db.memory.admitTurn({ sessionId: b.sessionId, turnId: "b-after-revoke", publishes: true });
    expect((await db.memory.search(next, { query: "kettle" })).hits).toEqual([]);
    const shared = (await db.memory.assembleContext(next, WINDOW)).blocks.find((x) => x.name === "shared_memory");
    expect(shared?.text ?? "").not.toContain("kettle");
    const own = await db.memory.admitTurn({ sessionId: c.sessionId, turnId: "c1", publishes: true });
    expect(own.publishes).toBe(false);
    const mine = await db.memory.assembleContext(own, WINDOW);
    // Its own history: the session block and the previous exchange (which holds what it shows word for word).
    const ownHistory = mine.blocks.filter((x) => x.name === "session_memory" || x.name === "previous_exchange");
    expect(ownHistory.map((x) => x.text).join("\n")).toContain("kettle");
    const { stored, recount } = await recountedStatistics(b.scopeId);
    expect(stored).toBe(recount);
    expect((await db.memory.audit()).violations).toEqual([]);
  });

  it("archiving B hides it from listings without forgetting anything", async () => {
    const reader = await db.memory.readScope(b.scopeId);
    const listed = async () => (await db.memory.sessions(reader)).sessions.map((s) => s.sessionId);
    const hits = (await db.memory.search(reader, { query: "parser" })).hits.length;
    expect(await listed()).toContain(b.sessionId);
    await db.memory.archiveSession(b.sessionId, true);
    expect(await listed()).not.toContain(b.sessionId);
    expect((await db.memory.search(reader, { query: "parser" })).hits.length).toBe(hits);
    await db.memory.archiveSession(b.sessionId, false);
    expect(await listed()).toContain(b.sessionId);
  });
});
