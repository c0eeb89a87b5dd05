import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningCompactor, startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import { ingestEvent, useTestMemory, waitForPublications } from "../helpers.js";

const db = useTestMemory();
let worker: RunningCompactor;
let writer: Session;
let reader: Session;
let stranger: Session;

const SENTENCES = [
  "部署脚本用 pnpm 而不是 npm，这是上周决定的。",
  "このデータベースは遅いので、インデックスを追加しました。",
  "우리는 어제 데이터베이스를 새 서버로 옮겼다.",
];

beforeAll(async () => {
  worker = await startWorker(db.memory, db.config, () => {});
  writer = await db.memory.openSession({ host: "test", hostSessionId: "writer", projectId: "prj_search" });
  reader = await db.memory.openSession({ host: "test", hostSessionId: "reader", projectId: "prj_search" });
  stranger = await db.memory.openSession({ host: "test", hostSessionId: "stranger", projectId: "prj_elsewhere" });
  for (const [k, text] of SENTENCES.entries()) {
    await db.memory.admitTurn({ sessionId: writer.sessionId, turnId: `w${k}` });
    await db.memory.ingest(
      ingestEvent({
        sessionId: writer.sessionId,
        turnId: `w${k}`,
        kind: "user",
        host: "writer",
        messageId: `m${k}`,
        occurredAt: new Date(Date.UTC(2026, 10, 22, 8, k)).toISOString(),
        content: text,
      }),
    );
    await db.memory.finishTurn({ sessionId: writer.sessionId, turnId: `w${k}` }, "completed");
  }
  await waitForPublications(db.memory.pool, 3, 30_000, "three publications");
  await db.memory.admitTurn({ sessionId: reader.sessionId, turnId: "r1" });
  await db.memory.admitTurn({ sessionId: stranger.sessionId, turnId: "s1" });
});
afterAll(async () => {
  await worker?.stop();
});

describe("search", () => {
  it.each([
    ["部署", 0],
    ["データベース", 1],
    ["데이터베이스", 2],
    ["pnpm", 0],
  ])("finds %s inside a longer sentence, with its source ref and an excerpt", async (query, k) => {
    const answer = await db.memory.search({ sessionId: reader.sessionId, turnId: "r1" }, { query });
    const message = answer.hits.find((hit) => hit.source === "message");
    expect(message).toMatchObject({ ref: `${writer.sessionId}:0:${k}+1`, sessionId: writer.sessionId, kind: "user" });
    expect(message?.excerpt).toContain(query);
    expect(answer.snapshot).toMatchObject({ scopeId: "project:prj_search", publicationHighWater: 3 });
  });

  it("does not find words that are not there, nor anything across a scope boundary", async () => {
    expect((await db.memory.search({ sessionId: reader.sessionId, turnId: "r1" }, { query: "数据库" })).hits).toEqual(
      [],
    );
    for (const query of ["部署", "データベース", "데이터베이스", "pnpm"]) {
      expect((await db.memory.search({ sessionId: stranger.sessionId, turnId: "s1" }, { query })).hits).toEqual([]);
    }
  });

  it("finds texts with any of the words by default, best match first, and still nothing across scopes", async () => {
    const ctx = { sessionId: reader.sessionId, turnId: "r1" };
    const question = "which tool does the deploy use instead of npm, pnpm?";
    expect((await db.memory.search(ctx, { query: question, match: "all" })).hits).toEqual([]);
    const any = await db.memory.search(ctx, { query: question, match: "any" });
    expect((await db.memory.search(ctx, { query: question })).hits).toEqual(any.hits);
    expect(any.hits[0]?.ref).toBe(`${writer.sessionId}:0:0+1`);
    expect(any.hits.every((hit) => hit.excerpt.includes("npm"))).toBe(true);
    const strangerCtx = { sessionId: stranger.sessionId, turnId: "s1" };
    expect((await db.memory.search(strangerCtx, { query: question, match: "any" })).hits).toEqual([]);
  });

  it("filters by session and time, pages with a cursor, and rejects a query without words", async () => {
    const ctx = { sessionId: reader.sessionId, turnId: "r1" };
    expect((await db.memory.search(ctx, { query: "部署", sessionId: reader.sessionId })).hits).toEqual([]);
    expect(
      (await db.memory.search(ctx, { query: "部署", before: "2026-11-22T08:00:00Z" })).hits.filter(
        (h) => h.source === "message",
      ),
    ).toEqual([]);
    // Two places (the Japanese and the Korean sentence): one per page.
    const query = "データベース 데이터베이스";
    const first = await db.memory.search(ctx, { query, limit: 1 });
    expect(first.hits).toHaveLength(1);
    expect(first.nextCursor).not.toBeNull();
    const second = await db.memory.search(ctx, { query, limit: 1, cursor: first.nextCursor as string });
    expect(second.hits).toHaveLength(1);
    expect(second.hits[0]?.ref).not.toBe(first.hits[0]?.ref);
    expect(second.nextCursor).toBeNull();
    await expect(db.memory.search(ctx, { query: "!!! ???" })).rejects.toMatchObject({
      code: "INPUT_INVALID",
      issues: [{ field: "query" }],
    });
  });
});
