import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { searchFor } from "../../src/memory/shared.js";
import { type RunningCompactor, startWorker } from "../../src/memory/worker.js";
import { readSearchStatistics } from "../../src/store/search.js";
import { eventually, useTestMemory } from "../helpers.js";

// How search finds its candidates at scale (src/memory/search.ts, src/store/search.ts): a prefix unit through the
// scope's own terms, the caller's unpublished records one by one, and a common-word query's best records first.
const db = useTestMemory();
let worker: RunningCompactor | undefined;

const FORMS = [
  "She painted the fence on Monday.",
  "Painting classes start in May.",
  "He paints every weekend.",
  "A painter came by yesterday.",
  "That was a pain in the neck.",
  "Nothing about colours here.",
];
// Seven texts with "alpha", seven with "beta", the only one with both written after the others: the first rows in
// index order are not it, so only reading the best-scoring candidates first finds it under a small candidate cap.
const COMMON = [
  ...Array.from({ length: 6 }, (_, i) => `alpha report ${i} from the north station, long and detailed`),
  ...Array.from({ length: 6 }, (_, i) => `beta report ${i} from the south station, long and detailed`),
  "alpha beta",
];
const TEXTS = [...COMMON, ...FORMS];

let writerId: string;
let readerId: string;

async function turn(sessionId: string, host: string, k: number, content: string) {
  await db.memory.admitTurn({ sessionId, turnId: `t${k}` });
  await db.memory.ingest({
    sessionId,
    turnId: `t${k}`,
    kind: "user",
    finalization: { hostSessionId: host, messageId: `m${k}` },
    occurredAt: new Date(Date.UTC(2026, 10, 22, 8, k)).toISOString(),
    content,
  });
  await db.memory.finishTurn({ sessionId, turnId: `t${k}` }, "completed");
}

beforeAll(async () => {
  worker = await startWorker(db.memory, db.config, () => {});
  const writer = await db.memory.openSession({ host: "test", hostSessionId: "writer", projectId: "prj_cand" });
  writerId = writer.sessionId;
  for (const [k, content] of TEXTS.entries()) await turn(writerId, "writer", k, content);
  await eventually(
    async () =>
      (await db.memory.pool.query("SELECT count(*)::int AS n FROM optchat.publications")).rows[0].n === TEXTS.length
        ? true
        : undefined,
    60_000,
    `${TEXTS.length} publications`,
  );
  // No worker from here on: the reader's own turn stays unpublished, so its words are in no statistics.
  await worker.stop();
  worker = undefined;
  const reader = await db.memory.openSession({ host: "test", hostSessionId: "reader", projectId: "prj_cand" });
  readerId = reader.sessionId;
  await turn(readerId, "reader", 0, "I bought new paintbrushes for the kitchen.");
  await db.memory.admitTurn({ sessionId: readerId, turnId: "r1" });
}, 90_000);
afterAll(async () => {
  await worker?.stop();
});

const readerCtx = () => ({ sessionId: readerId, turnId: "r1" });

describe("search candidates", () => {
  it("finds through a prefix's expansion exactly the records the prefix matches, the own unpublished one included", async () => {
    const state = await db.memory.pool.query(
      "SELECT publication_state FROM optchat.turns WHERE session_id = $1 AND turn_id = 't0'",
      [readerId],
    );
    expect(state.rows[0].publication_state).toBe("pending");
    const expected = await db.memory.pool.query<{ ref: string }>(
      `SELECT CASE WHEN session_id = $1 THEN seq || '+1' ELSE session_id || ':0:' || seq || '+1' END AS ref
         FROM optchat.records WHERE scope_id = 'project:prj_cand' AND search @@ 'paint:*'::tsquery`,
      [readerId],
    );
    expect(expected.rows.length).toBe(5);
    const answer = await db.memory.search(readerCtx(), { query: "painted", limit: 20 });
    const messages = answer.hits.filter((hit) => hit.source === "message" || hit.within !== null);
    expect(new Set(messages.map((hit) => hit.ref))).toEqual(new Set(expected.rows.map((row) => row.ref)));
    expect(answer.hits.map((hit) => hit.ref)).toContain("0+1");
    expect(answer.hits.map((hit) => hit.excerpt).join(" ")).not.toContain("pain in the neck");
  });

  it("expands a prefix into its scope's most frequent counted terms only, never another scope's", async () => {
    const own = await readSearchStatistics(db.memory.pool, "project:prj_cand", [], ["paint", "repo"], 2);
    // One published record each: ties go to term order. "report" is in 12 records.
    expect(own.expansions.get("paint")).toEqual(["painted", "painter"]);
    expect(own.expansions.get("repo")).toEqual(["report"]);
    expect(own.documentFrequency.get("paint:*")).toBe(4);
    await db.memory.openSession({ host: "test", hostSessionId: "empty", projectId: "prj_cand_other" });
    const other = await readSearchStatistics(db.memory.pool, "project:prj_cand_other", [], ["paint"], 16);
    expect(other.expansions.get("paint")).toEqual([]);
  });

  it("reads a common-word query's best records first: the best-ranked record survives a small candidate cap", async () => {
    const best = `${writerId}:0:${COMMON.length - 1}+1`;
    const uncapped = await db.memory.search(readerCtx(), { query: "alpha beta" });
    expect(uncapped.hits[0]?.ref).toBe(best);
    const capped = await searchFor({ pool: db.memory.pool }, readerCtx(), { query: "alpha beta" }, { candidateCap: 2 });
    expect(capped.hits[0]?.ref).toBe(best);
  });

  it("reads the rarest word's records first when the candidates are more than the cap", async () => {
    // "paint…" is in 4 published records written after the 12 with "report", and in the reader's own record: under a
    // cap of 5 every record holding the rarer unit is still scored.
    const answer = await searchFor(
      { pool: db.memory.pool },
      readerCtx(),
      { query: "painted report", limit: 20 },
      { candidateCap: 5 },
    );
    const refs = answer.hits.filter((hit) => hit.source === "message").map((hit) => hit.ref);
    for (const k of [0, 1, 2, 3]) expect(refs).toContain(`${writerId}:0:${COMMON.length + k}+1`);
    expect(refs).toContain("0+1");
  });
});
