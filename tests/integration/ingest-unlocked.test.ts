/**
 * The ingest's unlocked way (src/memory/ingest.ts, store/ingest-commit.ts, store/ingest-write.ts): a plain append is
 * looked up without locks and written by one guarded statement that writes nothing when the generation or tree changed
 * since the lookup; everything else runs the locked way.
 */
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { auditAll } from "../../src/memory/audit.js";
import { resolveConfig } from "../../src/memory/config.js";
import { prepareEvents } from "../../src/memory/ingest-prep.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import { type Memory, openMemory } from "../../src/memory/service.js";
import { planSeal, writeSeal } from "../../src/store/ingest-commit.js";
import { EVENT_KEY_CONSTRAINT } from "../../src/store/records.js";
import { collect, ingestEvent, startScript, useTestMemory, waitForLine } from "../helpers.js";

const db = useTestMemory();
const extra: Memory[] = [];
afterAll(async () => {
  await Promise.all(extra.map((m) => m.close()));
});

function event(sessionId: string, host: string, n: number, content = `message ${n} of ${host}`): IngestEvent {
  return ingestEvent({
    sessionId,
    turnId: "t1",
    kind: "assistant",
    host,
    messageId: `m${n}`,
    occurredAt: new Date(Date.UTC(2026, 10, 20, 10, 0, n)).toISOString(),
    content,
  });
}

/** The SQL statements `run` sends through every pg client of this process, in order (first 40 characters or name). */
async function statementsOf(run: () => Promise<unknown>): Promise<string[]> {
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  const seen: string[] = [];
  proto.query = function (this: unknown, ...args: unknown[]) {
    const q = args[0] as string | { name?: string; text: string };
    seen.push(typeof q === "string" ? q.slice(0, 40) : (q.name ?? q.text.slice(0, 40)));
    return original.apply(this, args);
  };
  try {
    await run();
  } finally {
    proto.query = original;
  }
  return seen;
}

/** The session's records, its generation counter and its tree's counters. */
async function stored(sessionId: string) {
  const { rows } = await db.memory.pool.query(
    `SELECT (SELECT count(*) FROM optchat.records WHERE session_id = $1)::int AS records,
            (SELECT coalesce(max(seq) + 1, 0) FROM optchat.records WHERE session_id = $1)::int AS span,
            (SELECT next_seq FROM optchat.generations WHERE session_id = $1)::int AS next_seq,
            t.leaf_count::int, t.event_count::int, t.view_revision,
            (SELECT count(*) FROM optchat.view_parts p WHERE p.tree_id = t.tree_id)::int AS parts
       FROM optchat.trees t WHERE t.kind = 'session' AND t.session_id = $1`,
    [sessionId],
  );
  return rows[0];
}

describe("the unlocked way", () => {
  it("seals a plain append in two statements, with no BEGIN and no COMMIT", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "two", projectId: "prj_unlocked" });
    await db.memory.ingest(event(session.sessionId, "two", 0)); // the first leaf's job: a transaction
    const seen = await statementsOf(() => db.memory.ingest(event(session.sessionId, "two", 1)));
    expect(seen).toEqual(["optchat.ingest.read_one_target", "optchat.ingest.seal_one"]);
    expect(await stored(session.sessionId)).toMatchObject({ records: 2, next_seq: 2, leaf_count: 2, event_count: 2 });
  });

  it("writes a batch of plain appends with the batch statement, in two statements too", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "pair", projectId: "prj_unlocked" });
    await db.memory.ingest(event(session.sessionId, "pair", 0));
    const seen = await statementsOf(() =>
      db.memory.ingestMany([event(session.sessionId, "pair", 1), event(session.sessionId, "pair", 2)]),
    );
    expect(seen).toEqual(["optchat.ingest.read_targets", "optchat.ingest.seal_and_append"]);
    expect(await stored(session.sessionId)).toMatchObject({ records: 3, next_seq: 3, leaf_count: 3, event_count: 3 });
  });

  it("writes one record through keys only: its generic plan has no sequential scan and no view_parts update", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "keys", projectId: "prj_unlocked" });
    await db.memory.ingest(event(session.sessionId, "keys", 0));
    const sent: { name?: string; text: string; values?: unknown[] }[] = [];
    const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
    const original = proto.query;
    proto.query = function (this: unknown, ...args: unknown[]) {
      if (typeof args[0] === "object") sent.push(args[0] as (typeof sent)[number]);
      return original.apply(this, args);
    };
    try {
      await db.memory.ingest(event(session.sessionId, "keys", 1));
    } finally {
      proto.query = original;
    }
    const write = sent[sent.length - 1] as (typeof sent)[number];
    // The plan PostgreSQL keeps for every later ingest on the connection (generic: made without the parameters'
    // values), on tables that were small and never analyzed when it was made, as in a new database: a sequential scan
    // there reads every session, generation or tree on each ingest once the tables have grown.
    const client = await db.memory.pool.connect();
    try {
      await client.query("SET plan_cache_mode = force_generic_plan");
      await client.query(`PREPARE probe AS ${write.text}`);
      const nulls = (write.values ?? []).map(() => "NULL").join(", ");
      const { rows } = await client.query(`EXPLAIN (FORMAT JSON) EXECUTE probe(${nulls})`);
      const nodes: { "Node Type": string; Operation?: string; "Relation Name"?: string }[] = [];
      const walk = (node: (typeof nodes)[number] & { Plans?: unknown[] }) => {
        nodes.push(node);
        for (const child of node.Plans ?? []) walk(child as typeof node);
      };
      walk(rows[0]["QUERY PLAN"][0].Plan);
      expect(nodes.filter((n) => n["Node Type"] === "Seq Scan").map((n) => n["Relation Name"])).toEqual([]);
      const updated = nodes.filter((n) => n["Node Type"] === "ModifyTable" && n.Operation === "Update");
      expect(updated.map((n) => n["Relation Name"]).sort()).toEqual(["generations", "trees"]);
    } finally {
      await client.query("DEALLOCATE probe").catch(() => {});
      await client.query("RESET plan_cache_mode").catch(() => {});
      client.release();
    }
  });

  it("answers a re-delivery with one statement and writes nothing", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "redo", projectId: "prj_unlocked" });
    for (let n = 0; n < 3; n++) await db.memory.ingest(event(session.sessionId, "redo", n));
    const before = await stored(session.sessionId);
    let result: unknown;
    const seen = await statementsOf(async () => {
      result = await db.memory.ingest(event(session.sessionId, "redo", 1));
    });
    expect(result).toMatchObject({ status: "duplicate", seq: 1 });
    expect(seen).toEqual(["optchat.ingest.read_one_target"]);
    expect(await stored(session.sessionId)).toEqual(before);
  });

  it("does not append to a generation that is no longer its session's current one", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "gen", projectId: "prj_unlocked" });
    for (let n = 0; n < 3; n++)
      await db.memory.ingest({ ...event(session.sessionId, "gen", n), attributes: { hostMessageId: `m${n}` } });
    // Another service rewinds the session: a new generation keeps the first record.
    const other = await openMemory(resolveConfig({ overrides: { databaseUrl: db.url, poolSize: 2 } }));
    extra.push(other);
    await other.rewindSession(session.sessionId, ["m1", "m2"]);
    const current = (await other.getSession(session.sessionId)).currentGeneration;
    expect(current).toBeGreaterThan(0);
    // The guard refuses a plan made for generation 0 once another generation is current (see the guard test below
    // for the mechanism); an ingest after the rewind goes to the new generation.
    const result = await db.memory.ingest(event(session.sessionId, "gen", 3));
    expect(result).toMatchObject({ status: "sealed", generation: current });
    const { rows } = await db.memory.pool.query(
      "SELECT count(*)::int AS n FROM optchat.records WHERE session_id = $1 AND generation = 0",
      [session.sessionId],
    );
    expect(rows[0].n).toBe(3);
  });

  it("records a conflict the locked way", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "clash", projectId: "prj_unlocked" });
    await db.memory.ingest(event(session.sessionId, "clash", 0));
    await expect(db.memory.ingest(event(session.sessionId, "clash", 0, "other content"))).rejects.toMatchObject({
      code: "INGEST_CONFLICT",
    });
    const { rows } = await db.memory.pool.query(
      "SELECT count(*)::int AS n FROM optchat.ingest_conflicts WHERE session_id = $1",
      [session.sessionId],
    );
    expect(rows[0].n).toBe(1);
  });

  it("writes nothing when the tree changed after the lookup (the guard), and the ingest seals the locked way", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "guard", projectId: "prj_unlocked" });
    await db.memory.ingest(event(session.sessionId, "guard", 0));
    const { prepared } = await prepareEvents([event(session.sessionId, "guard", 1)], "ingest");
    const fold = { upperBytes: db.config.viewBytes, lowerBytes: db.config.viewLowerBytes };
    const plan = await planSeal(db.memory.pool, prepared, fold, { lock: false });
    expect(plan.fresh.map((e) => e.seq)).toEqual([1]);

    // Another writer seals seq 1 in between: the plan's seq and fold are stale.
    await db.memory.ingest(event(session.sessionId, "guard", 2));
    const between = await stored(session.sessionId);
    expect(await writeSeal(db.memory.pool, plan)).toBe(false);
    expect(await stored(session.sessionId)).toEqual(between);

    expect(await db.memory.ingest(event(session.sessionId, "guard", 1))).toMatchObject({ status: "sealed", seq: 2 });
    expect(await stored(session.sessionId)).toMatchObject({ records: 3, span: 3, next_seq: 3, leaf_count: 3 });
    expect((await auditAll(db.memory.pool)).violations).toEqual([]);
  });

  it("writes nothing when a twin was sealed after the lookup: the insert fails on the key, the retry finds the twin", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "twin", projectId: "prj_unlocked" });
    await db.memory.ingest(event(session.sessionId, "twin", 0));
    const { prepared } = await prepareEvents([event(session.sessionId, "twin", 1)], "ingest");
    const fold = { upperBytes: db.config.viewBytes, lowerBytes: db.config.viewLowerBytes };
    const plan = await planSeal(db.memory.pool, prepared, fold, { lock: false });
    expect(plan.fresh.map((e) => e.seq)).toEqual([1]);

    // The same finalization is delivered again and sealed in between, into another session (the guard's counters of
    // this session still hold): only the key's unique index stops the stale plan.
    const other = await db.memory.openSession({ host: "test", hostSessionId: "twin-other", projectId: "prj_unlocked" });
    const twin = await db.memory.ingest({ ...event(session.sessionId, "twin", 1), sessionId: other.sessionId });
    expect(twin).toMatchObject({ status: "sealed", sessionId: other.sessionId });
    const between = await stored(session.sessionId);
    const failure = await writeSeal(db.memory.pool, plan).catch((error: unknown) => error);
    expect(failure).toMatchObject({ code: "23505", constraint: EVENT_KEY_CONSTRAINT });
    expect(await stored(session.sessionId)).toEqual(between);

    // Run again, the ingest finds the twin (sealed into another session: a conflict, recorded) and seals nothing.
    await expect(db.memory.ingest(event(session.sessionId, "twin", 1))).rejects.toMatchObject({
      code: "INGEST_CONFLICT",
    });
    expect(await stored(session.sessionId)).toEqual(between);
    expect((await auditAll(db.memory.pool)).violations).toEqual([]);
  });

  it("writes one record whose append merges parts with its own statement, every revision equal to a refold", async () => {
    // A small view and free leaves built inline (the locked way, as the plugin ingests): appends fold, and merge.
    const memory = await openMemory(resolveConfig({ overrides: { databaseUrl: db.url, viewBytes: 1024 } }));
    extra.push(memory);
    const session = await memory.openSession({ host: "test", hostSessionId: "merge", projectId: "prj_unlocked" });
    const seen = await statementsOf(async () => {
      for (let n = 0; n < 60; n++)
        await memory.ingestMany([event(session.sessionId, "merge", n, `short message ${n} with a few words`)], {
          buildFreeInline: true,
        });
    });
    expect(seen).toContain("optchat.ingest.seal_one");
    expect(seen).toContain("optchat.ingest.seal_one_merging");
    expect(seen).not.toContain("optchat.ingest.seal_and_append");
    const { rows } = await db.memory.pool.query(
      `SELECT count(*) FILTER (WHERE p.until_revision IS NOT NULL)::int AS closed FROM optchat.view_parts p
         JOIN optchat.trees t USING (tree_id) WHERE t.kind = 'session' AND t.session_id = $1`,
      [session.sessionId],
    );
    expect(rows[0].closed).toBeGreaterThan(0);
    expect(await stored(session.sessionId)).toMatchObject({ records: 60, next_seq: 60, leaf_count: 60 });
    expect((await auditAll(db.memory.pool)).violations).toEqual([]);
  });

  it("plans its statements once per connection, not on every ingest", async () => {
    // One connection, so the prepared statements seen below are the ingests' own.
    const memory = await openMemory(resolveConfig({ overrides: { databaseUrl: db.url, poolSize: 1 } }));
    extra.push(memory);
    const session = await memory.openSession({ host: "test", hostSessionId: "plans", projectId: "prj_unlocked" });
    for (let n = 0; n < 20; n++) await memory.ingest(event(session.sessionId, "plans", n));
    const { rows } = await memory.pool.query(
      `SELECT name, generic_plans::int, custom_plans::int FROM pg_prepared_statements
        WHERE name IN ('optchat.ingest.read_one_target', 'optchat.ingest.seal_one') ORDER BY name`,
    );
    // PostgreSQL plans a prepared statement for its parameters the first five times, then keeps the generic plan
    // unless a custom one looks cheaper; the lookup's custom plans always did while it took arrays.
    expect(rows.map((r) => r.name)).toEqual(["optchat.ingest.read_one_target", "optchat.ingest.seal_one"]);
    for (const row of rows) {
      expect(row.custom_plans).toBeLessThanOrEqual(5);
      expect(row.generic_plans).toBeGreaterThan(0);
    }
  });

  it("builds a free leaf inline the locked way, then keeps that session on the locked way for a while", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "free", projectId: "prj_unlocked" });
    await db.memory.ingestMany([event(session.sessionId, "free", 0, "ok")], { buildFreeInline: true });
    const { rows } = await db.memory.pool.query(
      `SELECT n.level, n.idx::int, n.summarizer FROM optchat.nodes n JOIN optchat.trees t USING (tree_id)
        WHERE t.kind = 'session' AND t.session_id = $1`,
      [session.sessionId],
    );
    expect(rows).toEqual([{ level: 0, idx: 0, summarizer: "free" }]);
    const seen = await statementsOf(() =>
      db.memory.ingestMany([event(session.sessionId, "free", 1, "ok too")], { buildFreeInline: true }),
    );
    expect(seen[0]).toBe("BEGIN");
    expect(seen).not.toContain("optchat.ingest.read_one_target");
  });

  it("keeps 8 connections writing one session gapless, every revision equal to a refold", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "hot8", projectId: "prj_unlocked" });
    const writers: Memory[] = [];
    for (let w = 0; w < 8; w++) {
      const memory = await openMemory(resolveConfig({ overrides: { databaseUrl: db.url, poolSize: 2 } }));
      extra.push(memory);
      writers.push(memory);
    }
    const perWriter = 25;
    const results = await Promise.all(
      writers.map(async (memory, w) => {
        const seqs: number[] = [];
        for (let n = 0; n < perWriter; n++) {
          const result = await memory.ingest(event(session.sessionId, "hot8", w * 1000 + n));
          if (result.status === "sealed") seqs.push(result.seq);
        }
        return seqs;
      }),
    );
    const seqs = results.flat().sort((a, b) => a - b);
    expect(seqs).toEqual(Array.from({ length: 8 * perWriter }, (_, k) => k));
    expect(await stored(session.sessionId)).toMatchObject({
      records: 8 * perWriter,
      span: 8 * perWriter,
      next_seq: 8 * perWriter,
      leaf_count: 8 * perWriter,
    });
    expect((await auditAll(db.memory.pool)).violations).toEqual([]);
  });

  it("leaves nothing torn when a writer of plain appends is SIGKILLed mid-stream", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "kill", projectId: "prj_unlocked" });
    const writer = startScript("tests/fixtures/ingest-loop.ts", [db.url, session.sessionId, "kill"]);
    const finished = collect(writer);
    await waitForLine(writer, /^SEALED 40$/);
    writer.kill("SIGKILL");
    const { stdout, signal } = await finished;
    expect(signal).toBe("SIGKILL");
    const reported = [...stdout.matchAll(/^SEALED (\d+)$/gm)].map((m) => Number(m[1]));

    // The server rolls the killed statement back (or had committed it): either way whole records, no gap.
    const after = await stored(session.sessionId);
    expect(after.records).toBeGreaterThanOrEqual(Math.max(...reported) + 1);
    expect(after).toMatchObject({ span: after.records, next_seq: after.records, leaf_count: after.records });
    expect((await auditAll(db.memory.pool)).violations).toEqual([]);
    const next = await db.memory.ingest(event(session.sessionId, "kill-after", 0));
    expect(next).toMatchObject({ status: "sealed", seq: after.records });
  });
});
