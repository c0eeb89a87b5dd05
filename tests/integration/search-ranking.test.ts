import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningCompactor, startWorker } from "../../src/memory/worker.js";
import { eventually, useTestMemory } from "../helpers.js";

const db = useTestMemory();
let worker: RunningCompactor;

// Alice is in most texts; the LGBTQ conference in one. ts_rank scored "alice" + "go" like the evidence (issue 10).
const TEXTS = [
  ...Array.from({ length: 10 }, (_, i) => `Alice: I want to go for a walk with Bob, day ${i}, and go home early.`),
  "Bob: The LGBTQ conference last week moved me a lot.",
  "Alice: Let's go, the weather is fine.",
];

async function writeTurns(projectId: string, hostSessionId: string, texts: readonly string[]) {
  const session = await db.memory.openSession({ host: "test", hostSessionId, projectId });
  for (const [k, content] of texts.entries()) {
    await db.memory.admitTurn({ sessionId: session.sessionId, turnId: `t${k}` });
    await db.memory.ingest({
      sessionId: session.sessionId,
      turnId: `t${k}`,
      kind: "user",
      finalization: { hostSessionId, messageId: `m${k}` },
      occurredAt: new Date(Date.UTC(2026, 10, 22, 8, k)).toISOString(),
      content,
    });
    await db.memory.finishTurn({ sessionId: session.sessionId, turnId: `t${k}` }, "completed");
  }
  return session;
}

async function published(scopeId: string, count: number) {
  await eventually(
    async () =>
      (await db.memory.pool.query("SELECT count(*)::int AS n FROM optchat.publications WHERE scope_id = $1", [scopeId]))
        .rows[0].n === count
        ? true
        : undefined,
    60_000,
    `${count} publications in ${scopeId}`,
  );
}

let writerId: string;
let readerCtx: { sessionId: string; turnId: string };

beforeAll(async () => {
  worker = await startWorker(db.memory, db.config, () => {});
  writerId = (await writeTurns("prj_rank", "writer", TEXTS)).sessionId;
  await published("project:prj_rank", TEXTS.length);
  const reader = await db.memory.openSession({ host: "test", hostSessionId: "reader", projectId: "prj_rank" });
  readerCtx = { sessionId: reader.sessionId, turnId: "r1" };
  await db.memory.admitTurn({ ...readerCtx, query: "questions" });
}, 90_000);
afterAll(async () => {
  await worker?.stop();
});

const QUESTION = "When did Alice go to the LGBTQ conference?";

describe("ranked search", () => {
  it("weights words by rarity: the one text with the rare words comes first, as a message", async () => {
    const answer = await db.memory.search(readerCtx, { query: QUESTION });
    expect(answer.hits[0]).toMatchObject({ ref: `${writerId}:0:10+1`, source: "message", kind: "user" });
    expect(answer.hits[0]?.excerpt).toContain("LGBTQ conference");
  });

  it("returns distinct places: no summary next to a message it covers, no message twice", async () => {
    const answer = await db.memory.search(readerCtx, { query: "Alice Bob walk", limit: 20 });
    const refs = answer.hits.map((hit) => hit.ref);
    expect(new Set(refs).size).toBe(refs.length);
    const range = (ref: string) => {
      const match = /:(\d+)\+(\d+)$/.exec(ref) as RegExpExecArray;
      return [Number(match[1]), Number(match[1]) + Number(match[2])] as const;
    };
    const messages = answer.hits.filter((hit) => hit.source === "message").map((hit) => range(hit.ref)[0]);
    expect(messages.length).toBeGreaterThan(1);
    for (const hit of answer.hits.filter((h) => h.source === "summary")) {
      const [start, end] = range(hit.ref);
      expect(messages.some((seq) => seq >= start && seq < end)).toBe(false);
    }
  });

  it("keeps the statistics equal to a recount of the published records and the stored nodes", async () => {
    const published = `SELECT p.scope_id, r.search FROM optchat.publications p
      JOIN optchat.records r ON r.session_id = p.session_id AND r.generation = p.generation AND r.turn_id = p.turn_id
       AND r.seq >= p.start_seq AND r.seq < p.end_seq_exclusive`;
    const terms = await db.memory.pool.query(
      `WITH recount AS (
         SELECT pr.scope_id, u.lexeme AS term, count(*)::bigint AS documents
           FROM (${published}) pr CROSS JOIN LATERAL unnest(pr.search) AS u(lexeme, positions, weights)
          GROUP BY 1, 2)
       SELECT (SELECT count(*)::int FROM recount) AS recounted,
              (SELECT count(*)::int FROM optchat.search_term_counts) AS stored,
              (SELECT count(*)::int FROM (SELECT * FROM recount
                 EXCEPT SELECT scope_id, term, documents FROM optchat.search_term_counts) d) AS different`,
    );
    expect(terms.rows[0].different).toBe(0);
    expect(terms.rows[0].stored).toBe(terms.rows[0].recounted);
    expect(terms.rows[0].stored).toBeGreaterThan(10);
    const lengths = await db.memory.pool.query(
      `SELECT st.documents::int AS documents, st.total_length::int AS total,
              (SELECT count(*)::int FROM (${published}) pr WHERE pr.scope_id = st.scope_id) AS counted,
              (SELECT sum(length(pr.search))::int FROM (${published}) pr WHERE pr.scope_id = st.scope_id) AS summed
         FROM optchat.search_scope_stats st WHERE st.scope_id = 'project:prj_rank'`,
    );
    expect(lengths.rows[0]).toMatchObject({ documents: TEXTS.length, counted: TEXTS.length });
    expect(lengths.rows[0].total).toBe(lengths.rows[0].summed);
    const nodes = await db.memory.pool.query(
      `SELECT coalesce(sum(documents), 0)::int AS documents,
              (SELECT count(*)::int FROM optchat.nodes n JOIN optchat.trees t ON t.tree_id = n.tree_id
                 LEFT JOIN optchat.sessions s ON s.session_id = t.session_id
                WHERE coalesce(t.scope_id, s.scope_id) = 'project:prj_rank') AS counted
         FROM optchat.search_tree_stats WHERE scope_id = 'project:prj_rank'`,
    );
    expect(nodes.rows[0].documents).toBe(nodes.rows[0].counted);
    expect(nodes.rows[0].documents).toBeGreaterThan(0);
  });

  it("is not moved by another scope's texts: its statistics are the caller's scope only", async () => {
    const before = await db.memory.search(readerCtx, { query: QUESTION });
    // Elsewhere "lgbtq" and "conference" become common and "alice" rare: leaked statistics would reorder the hits.
    await writeTurns("prj_other", "other", [
      ...Array.from({ length: 15 }, (_, i) => `LGBTQ conference number ${i}: a conference about LGBTQ rights.`),
    ]);
    await published("project:prj_other", 15);
    expect((await db.memory.search(readerCtx, { query: QUESTION })).hits).toEqual(before.hits);
  }, 90_000);
});
