import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { startWorker } from "../../src/memory/index.js";
import { openMemory } from "../../src/memory/service.js";
import { freshDatabaseName, ingestEvent, LARGE_WINDOW, useTestMemory } from "../helpers.js";

// What one `opencode run` pays in round trips (issue 9 item 2): every statement of the open, the admission and the
// turn's finish is waited for by OpenCode (or competes with it on its one JavaScript thread), so their number is
// pinned here. The statements are counted at node-postgres's Client.query, which every pool query goes through.
const db = useTestMemory();

let counting: string[] | undefined;
const original = pg.Client.prototype.query;
pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
  const config = args[0] as string | { text?: string };
  counting?.push((typeof config === "string" ? config : (config?.text ?? "")).replace(/\s+/g, " ").slice(0, 80));
  return (original as (...a: unknown[]) => unknown).apply(this, args);
} as typeof original;

async function statementsOf<T>(work: () => Promise<T>): Promise<{ result: T; statements: string[] }> {
  counting = [];
  try {
    const result = await work();
    return { result, statements: counting };
  } finally {
    counting = undefined;
  }
}

afterEach(() => {
  counting = undefined;
});

describe("the statements of one run", () => {
  it("opening memory checks the schema in one statement", async () => {
    const { result: memory, statements } = await statementsOf(() => openMemory(db.config));
    await memory.close();
    expect(statements).toHaveLength(1);
  });

  it("opening memory still refuses a database never migrated, and one without the job queue", async () => {
    const empty = freshDatabaseName();
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE ${empty.name}`);
      await expect(openMemory({ ...db.config, databaseUrl: empty.url })).rejects.toMatchObject({
        code: "SCHEMA_OUT_OF_DATE",
        details: { version: 0 },
      });
      const noQueue = new pg.Client({ connectionString: empty.url });
      await noQueue.connect();
      await noQueue.query(
        "CREATE SCHEMA optchat; CREATE TABLE optchat.migrations (id int); INSERT INTO optchat.migrations VALUES (999)",
      );
      await noQueue.end();
      await expect(openMemory({ ...db.config, databaseUrl: empty.url })).rejects.toThrow(
        "The job queue (pg-boss schema) is not installed: run `optchat migrate`",
      );
    } finally {
      await admin.end();
      await empty.drop();
    }
  });

  it("admitting a turn is one statement; a subagent's turn still does not publish; an unknown session is refused", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "h-admit", projectId: "p-run" });
    const { result: turn, statements } = await statementsOf(() =>
      db.memory.admitTurn({ sessionId: session.sessionId, turnId: "t1", query: "q" }),
    );
    expect(statements).toHaveLength(1);
    expect(turn).toMatchObject({ turnId: "t1", publishes: true, state: "active" });
    // Re-admitting returns the same turn.
    expect((await db.memory.admitTurn({ sessionId: session.sessionId, turnId: "t1" })).admittedAt).toEqual(
      turn.admittedAt,
    );

    const child = await db.memory.openSession({
      host: "test",
      hostSessionId: "h-child",
      projectId: "p-run",
      parentSessionId: session.sessionId,
    });
    expect((await db.memory.admitTurn({ sessionId: child.sessionId, turnId: "c1" })).publishes).toBe(false);
    await expect(db.memory.admitTurn({ sessionId: "mem_nosuchsession", turnId: "x" })).rejects.toMatchObject({
      code: "SESSION_NOT_FOUND",
    });
  });

  it("finishing a turn schedules its publication in seven statements, BEGIN and COMMIT included", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "h-finish", projectId: "p-run" });
    const ctx = { sessionId: session.sessionId, turnId: "t1" };
    await db.memory.admitTurn(ctx);
    await db.memory.ingest(
      ingestEvent({
        ...ctx,
        kind: "user",
        host: "h-finish",
        messageId: "m1",
        occurredAt: "2026-12-01T10:00:00Z",
        content: "hi",
      }),
    );
    // The turn's leaf summarized first: finishing the turn is then what makes its publication ready.
    const worker = await startWorker(db.memory, db.config, () => {});
    try {
      await db.memory.settle(session.sessionId, { timeoutMs: 60_000 });
    } finally {
      await worker.stop();
    }
    const { result, statements } = await statementsOf(() => db.memory.finishTurn(ctx, "completed"));
    expect(result).toMatchObject({ finished: true, turn: { state: "completed" } });
    const jobs = await db.memory.pool.query(
      "SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'optchat-publish' AND singleton_key = $1",
      [`${session.sessionId}:0:t1`],
    );
    expect(jobs.rows[0].n).toBe(1);
    // BEGIN, the tree's lock, the outcome, the next turn to publish, the open-job check, the job, COMMIT.
    expect(statements, statements.join("\n")).toHaveLength(7);

    // Finishing again changes nothing and schedules nothing more; a turn never admitted is refused.
    expect((await db.memory.finishTurn(ctx, "failed")).finished).toBe(false);
    await expect(db.memory.finishTurn({ ...ctx, turnId: "never" }, "completed")).rejects.toMatchObject({
      code: "INPUT_INVALID",
    });
  });

  it("a request's assembly from the turn's preparation reads one statement: the snapshot's standing", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "h-assemble", projectId: "p-run" });
    const first = { sessionId: session.sessionId, turnId: "t1" };
    await db.memory.admitTurn(first);
    await db.memory.ingest(
      ingestEvent({
        ...first,
        kind: "user",
        host: "h-assemble",
        messageId: "m1",
        occurredAt: "2026-12-01T10:00:00Z",
        content: "remember the kestrel",
      }),
    );
    await db.memory.finishTurn(first, "completed");
    const ctx = { sessionId: session.sessionId, turnId: "t2" };
    await db.memory.admitTurn(ctx);
    const options = { previousExchange: true, readiness: "partial", waitMs: 0 } as const;
    const prepared = await db.memory.prepareContext(ctx, options);
    const { result, statements } = await statementsOf(() =>
      db.memory.assembleContext(ctx, { ...LARGE_WINDOW, ...options }, { prepared }),
    );
    expect(statements, statements.join("\n")).toHaveLength(1);
    // The same memory as an assembly that reads everything itself.
    expect(result).toEqual(await db.memory.assembleContext(ctx, { ...LARGE_WINDOW, ...options }));
  });
});
