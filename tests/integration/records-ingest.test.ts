import { describe, expect, it } from "vitest";
import { InputInvalidError, OptchatError } from "../../src/core/errors.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import { readFixture, seededRandom, shuffled, useTestMemory } from "../helpers.js";

interface FixtureEvent extends Omit<IngestEvent, "sessionId"> {
  hostSessionId: string;
}
interface Fixture {
  sessions: { host: string; hostSessionId: string; projectId: string }[];
  events: FixtureEvent[];
}

const db = useTestMemory();

async function snapshot(): Promise<unknown[]> {
  const { rows } = await db.memory.pool.query(
    `SELECT r.session_id, r.generation, r.seq, r.event_key, r.kind, encode(r.payload_hash, 'hex') AS hash, r.payload_bytes,
            r.tool_call_id, r.host_truncated, r.host_original_bytes
       FROM optchat.records r ORDER BY r.session_id, r.generation, r.seq`,
  );
  const counts = await db.memory.pool.query(
    `SELECT (SELECT count(*) FROM optchat.records) AS records, (SELECT count(*) FROM optchat.blobs) AS blobs,
            (SELECT count(*) FROM optchat.staged_items) AS staged, (SELECT count(*) FROM optchat.ingest_conflicts) AS conflicts,
            (SELECT json_agg(next_seq ORDER BY session_id) FROM optchat.generations) AS next_seqs`,
  );
  return [rows, counts.rows[0]];
}

describe("ingest: replaying a recorded two-session fixture", () => {
  it("leaves record counts, seqs and payloads unchanged across 10 replays in shuffled orders", async () => {
    const fixture = readFixture<Fixture>("two-sessions.json");
    const sessionIds = new Map<string, string>();
    for (const s of fixture.sessions) {
      const session = await db.memory.openSession(s);
      sessionIds.set(s.hostSessionId, session.sessionId);
    }
    const toEvent = ({ hostSessionId, ...rest }: FixtureEvent): IngestEvent => ({
      ...rest,
      sessionId: sessionIds.get(hostSessionId) as string,
    });

    // Replay 1: the host delivers each session in order, but the two sessions interleave arbitrarily.
    const seed = 20261130;
    const random = seededRandom(seed);
    const queues = fixture.sessions.map((s) => fixture.events.filter((e) => e.hostSessionId === s.hostSessionId));
    while (queues.some((q) => q.length > 0)) {
      const open = queues.filter((q) => q.length > 0);
      const queue = open[Math.floor(random() * open.length)] as FixtureEvent[];
      await db.memory.ingest(toEvent(queue.shift() as FixtureEvent));
    }
    const first = await snapshot();

    // Seqs follow each session's order of final events, starting at 0 with no gap.
    for (const s of fixture.sessions) {
      const finals = fixture.events.filter((e) => e.hostSessionId === s.hostSessionId && e.final !== false);
      const records = await db.memory.listRecords(sessionIds.get(s.hostSessionId) as string);
      expect(records.map((r) => r.seq)).toEqual(finals.map((_, i) => i));
      expect(records.map((r) => r.kind)).toEqual(finals.map((e) => e.kind));
      for (const [i, record] of records.entries()) {
        const page = await db.memory.readPayload(record, { maxBytes: 1 << 20 });
        expect(page.text).toBe(finals[i]?.content);
        expect(page.complete).toBe(true);
      }
    }
    const [, counts] = first as [unknown, { records: number; staged: number; conflicts: number }];
    expect(counts.records).toBe(fixture.events.filter((e) => e.final !== false).length);
    expect(counts.staged).toBe(0); // every delta was followed by its final
    expect(counts.conflicts).toBe(0);

    // Replays 2..10: any order at all, including deltas after their finals.
    for (let replay = 2; replay <= 10; replay++) {
      const results = [];
      for (const event of shuffled(fixture.events, random)) results.push(await db.memory.ingest(toEvent(event)));
      expect(results.filter((r) => r.status === "sealed")).toEqual([]);
      expect(await snapshot(), `replay ${replay} (seed ${seed})`).toEqual(first);
    }
    // The same replay as one batch is just as idempotent.
    const batch = await db.memory.ingestMany(fixture.events.map(toEvent));
    expect(new Set(batch.map((r) => r.status))).toEqual(new Set(["duplicate", "already_sealed"]));
    expect(await snapshot()).toEqual(first);
  });
});

describe("ingest: conflicting content under a sealed finalization key", () => {
  it("raises INGEST_CONFLICT, records the conflict and changes nothing else", async () => {
    const session = await db.memory.openSession({
      host: "test",
      hostSessionId: "conflict-host",
      projectId: "prj_conflict",
    });
    const base = {
      sessionId: session.sessionId,
      turnId: "t1",
      kind: "assistant" as const,
      finalization: { hostSessionId: "conflict-host", messageId: "m1", partId: "p1", revision: 0 },
      occurredAt: "2026-11-20T10:00:00Z",
    };
    const sealed = await db.memory.ingest({ ...base, content: "the original answer" });
    expect(sealed).toMatchObject({ status: "sealed", seq: 0 });
    const before = await snapshot();

    const attempt = db.memory.ingest({ ...base, content: "a different answer" });
    await expect(attempt).rejects.toBeInstanceOf(OptchatError);
    await expect(attempt).rejects.toMatchObject({
      code: "INGEST_CONFLICT",
      details: { seq: 0, sessionId: session.sessionId },
    });

    const after = (await snapshot()) as [unknown, Record<string, unknown>];
    const [beforeRows, beforeCounts] = before as [unknown, Record<string, unknown>];
    expect(after[0]).toEqual(beforeRows);
    expect(after[1]).toEqual({ ...beforeCounts, conflicts: 1 });
    const { rows } = await db.memory.pool.query(
      "SELECT event_key, encode(offered_hash, 'hex') AS offered, offered_bytes FROM optchat.ingest_conflicts",
    );
    expect(rows).toEqual([
      { event_key: sealed.eventKey, offered: expect.stringMatching(/^[0-9a-f]{64}$/), offered_bytes: 18 },
    ]);
    const page = await db.memory.readPayload({ sessionId: session.sessionId, generation: 0, seq: 0 });
    expect(page.text).toBe("the original answer");

    // A deliberate host rewrite uses a new revision: that is a new record, not a conflict.
    const rewrite = await db.memory.ingest({
      ...base,
      finalization: { ...base.finalization, revision: 1 },
      content: "a different answer",
    });
    expect(rewrite).toMatchObject({ status: "sealed", seq: 1 });
  });
});

describe("ingest: staging of partial content", () => {
  it("keeps the latest partial content until the final arrives, then seals once and forgets the staged copy", async () => {
    const session = await db.memory.openSession({
      host: "test",
      hostSessionId: "staging-host",
      projectId: "prj_staging",
    });
    const base = {
      sessionId: session.sessionId,
      turnId: "t1",
      kind: "assistant" as const,
      finalization: { hostSessionId: "staging-host", messageId: "m1", partId: "p1" },
      occurredAt: "2026-11-20T10:00:00Z",
    };
    expect(await db.memory.ingest({ ...base, final: false, content: "Hel" })).toMatchObject({ status: "staged" });
    expect(await db.memory.ingest({ ...base, final: false, content: "Hello wor" })).toMatchObject({ status: "staged" });
    const staged = await db.memory.pool.query("SELECT convert_from(content, 'UTF8') AS text FROM optchat.staged_items");
    expect(staged.rows).toEqual([{ text: "Hello wor" }]);
    expect(await db.memory.listRecords(session.sessionId)).toEqual([]);

    expect(await db.memory.ingest({ ...base, content: "Hello world" })).toMatchObject({ status: "sealed", seq: 0 });
    expect((await db.memory.pool.query("SELECT 1 FROM optchat.staged_items")).rowCount).toBe(0);
    expect(await db.memory.ingest({ ...base, final: false, content: "Hello w" })).toMatchObject({
      status: "already_sealed",
    });
    expect((await db.memory.pool.query("SELECT 1 FROM optchat.staged_items")).rowCount).toBe(0);
  });
});

describe("ingest: bad input", () => {
  const valid = {
    sessionId: "ses_whatever",
    turnId: "t1",
    kind: "user",
    finalization: { hostSessionId: "h", messageId: "m" },
    occurredAt: "2026-11-20T10:00:00Z",
    content: "hi",
  };

  async function issuesFor(event: unknown): Promise<{ field: string; problem: string }[]> {
    try {
      await db.memory.ingest(event as IngestEvent);
    } catch (error) {
      expect(error).toBeInstanceOf(InputInvalidError);
      expect((error as InputInvalidError).code).toBe("INPUT_INVALID");
      return [...(error as InputInvalidError).issues];
    }
    throw new Error("ingest accepted invalid input");
  }

  it.each([
    ["a missing field", { ...valid, turnId: undefined }, "turnId", /Required/],
    ["a wrong kind", { ...valid, kind: "system" }, "kind", /must be one of user, assistant/],
    ["hidden reasoning", { ...valid, kind: "reasoning" }, "kind", /reasoning is never stored/],
    ["a negative size", { ...valid, hostTruncated: { originalBytes: -5 } }, "hostTruncated.originalBytes", /negative/],
    [
      "a negative revision",
      { ...valid, finalization: { ...valid.finalization, revision: -1 } },
      "finalization.revision",
      /negative/,
    ],
    [
      "a session ID that is a path",
      { ...valid, sessionId: "/home/user/.local/share/opencode" },
      "sessionId",
      /opaque ID/,
    ],
    ["a relative path as session ID", { ...valid, sessionId: "a..b" }, "sessionId", /\.\./],
    ["a tool result without its call id", { ...valid, kind: "tool_result" }, "toolCallId", /pairs a call/],
    ["a bad timestamp", { ...valid, occurredAt: "yesterday" }, "occurredAt", /ISO 8601/],
    ["a non-text content", { ...valid, content: 42 }, "content", /string or a Uint8Array/],
    ["an unknown field", { ...valid, sessoinId: "x" }, "(input)", /unknown field\(s\) sessoinId/],
  ])("rejects %s with a typed error naming the field", async (_label, event, field, problem) => {
    const issues = await issuesFor(event);
    expect(issues).toContainEqual({ field, problem: expect.stringMatching(problem) });
  });

  it("names the index of the bad event in a batch and ingests nothing of it", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "batch-host", projectId: "prj_batch" });
    const good = { ...valid, sessionId: session.sessionId } as IngestEvent;
    const attempt = db.memory.ingestMany([good, { ...good, kind: "bogus" } as unknown as IngestEvent]);
    await expect(attempt).rejects.toMatchObject({ code: "INPUT_INVALID", issues: [{ field: "events[1].kind" }] });
    expect(await db.memory.listRecords(session.sessionId)).toEqual([]);
  });

  it("rejects an unknown session with SESSION_NOT_FOUND and stores nothing", async () => {
    await expect(
      db.memory.ingest({ ...valid, sessionId: "ses_never_registered" } as IngestEvent),
    ).rejects.toMatchObject({
      code: "SESSION_NOT_FOUND",
      details: { field: "sessionId" },
    });
    const { rows } = await db.memory.pool.query("SELECT count(*)::int AS n FROM optchat.blobs WHERE byte_length = 2");
    expect(rows[0].n).toBe(0);
  });

  it("rejects openSession without a project or scope, and with a path as project", async () => {
    await expect(db.memory.openSession({ host: "test", hostSessionId: "x" })).rejects.toMatchObject({
      code: "INPUT_INVALID",
      issues: [{ field: "projectId" }],
    });
    await expect(
      db.memory.openSession({ host: "test", hostSessionId: "x", projectId: "/srv/repo" }),
    ).rejects.toMatchObject({
      issues: [{ field: "projectId" }],
    });
  });
});
