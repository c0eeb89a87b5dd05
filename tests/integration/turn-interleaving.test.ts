import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OptchatError } from "../../src/core/errors.js";
import type { RunningCompactor } from "../../src/memory/worker.js";
import { startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import { eventually, messageWriter, useTestMemory } from "../helpers.js";

// Summaries take 150 ms, so a turn's cover is not built yet when it finishes (the case where publication used to
// wait by rescheduling itself).
const db = useTestMemory({ summarizer: "fake:delay=150" });
let worker: RunningCompactor;

beforeAll(async () => {
  worker = await startWorker(db.memory, db.config, () => {});
});
afterAll(async () => {
  await worker?.stop();
});

async function open(name: string): Promise<Session> {
  return await db.memory.openSession({ host: "test", hostSessionId: name, projectId: "prj_interleave" });
}

const record = messageWriter(db, Date.UTC(2026, 10, 21, 9));

async function publicationOf(session: Session, turnId: string) {
  const { rows } = await db.memory.pool.query<{ publication_seq: string }>(
    "SELECT publication_seq FROM optchat.publications WHERE session_id = $1 AND turn_id = $2",
    [session.sessionId, turnId],
  );
  return rows[0] ? Number(rows[0].publication_seq) : undefined;
}

async function published(session: Session, turnId: string): Promise<number> {
  return await eventually(() => publicationOf(session, turnId), 30_000, `the publication of ${turnId}`);
}

async function publishJobs(session: Session, turnId: string) {
  const { rows } = await db.memory.pool.query<{ jobs: number; waits: number }>(
    `SELECT count(*)::int AS jobs, count(*) FILTER (WHERE data ? 'waits')::int AS waits FROM pgboss.job
      WHERE name = 'optchat-publish' AND singleton_key = $1`,
    [`${session.sessionId}:0:${turnId}`],
  );
  return rows[0] as { jobs: number; waits: number };
}

async function refNotFound(promise: Promise<unknown>) {
  await expect(promise).rejects.toSatisfy(
    (error: unknown) => error instanceof OptchatError && error.code === "REF_NOT_FOUND",
  );
}

describe("interleaved turns (issue 9 item 4)", () => {
  it("publishes only a turn's own records: another turn's record between them stays invisible until that turn is published", async () => {
    const a = await open("A");
    const reader = await open("B");
    const t1 = { sessionId: a.sessionId, turnId: "t1" };
    const t2 = { sessionId: a.sessionId, turnId: "t2" };
    await db.memory.admitTurn(t1);
    await record(a, "t1", "user", "Plan the cache eviction for the ledger service.");
    await db.memory.admitTurn(t2);
    await record(a, "t2", "user", "Also rotate the quokkazebra credentials before Friday.");
    await record(a, "t1", "assistant", "Eviction uses a two-queue LRU sized from the ledger's hot set.");
    await db.memory.finishTurn(t1, "completed");
    const seq = await published(a, "t1");

    const probe = { sessionId: reader.sessionId, turnId: "probe1" };
    await db.memory.admitTurn(probe);
    // t2's record lies between t1's: before, t1's publication covered 0..2 and another session found it.
    expect((await db.memory.search(probe, { query: "quokkazebra" })).hits).toEqual([]);
    // t1's own records are shared…
    expect((await db.memory.search(probe, { query: "eviction" })).hits.length).toBeGreaterThan(0);
    const pub = await db.memory.zoom(probe, `pub:${seq}+1`);
    expect(pub).toMatchObject({ kind: "publication", turnId: "t1", range: "0..0, 2..2" });
    const cover = pub.kind === "publication" ? pub.cover : [];
    expect(cover.map((line) => line.ref)).toEqual([`${a.sessionId}:0:0+1`, `${a.sessionId}:0:2+1`]);
    for (const line of cover) {
      expect(line.text).not.toMatch(/quokkazebra/);
      expect((await db.memory.zoom(probe, line.ref)).kind).toBe("message");
    }
    // …and t2's record is not, through any read path.
    expect((await db.memory.search(probe, { query: "quokkazebra credentials", match: "any" })).hits).toEqual([]);
    for (const ref of [`${a.sessionId}:0:1+1`, `${a.sessionId}:0:0+2`, `${a.sessionId}:0:0+4`]) {
      await refNotFound(db.memory.zoom(probe, ref));
      await refNotFound(db.memory.date(probe, ref));
    }
    const shared = await db.memory.zoom(probe, `pub:${seq}+1`);
    expect(JSON.stringify(shared)).not.toMatch(/quokkazebra/);
    expect(await db.memory.audit()).toMatchObject({ ok: true, violations: [] });

    // Once t2 is finished and published, its record is shared like any other.
    await db.memory.finishTurn(t2, "completed");
    await published(a, "t2");
    const later = { sessionId: reader.sessionId, turnId: "probe2" };
    await db.memory.admitTurn(later);
    const hits = (await db.memory.search(later, { query: "quokkazebra" })).hits;
    expect(hits.map((hit) => hit.ref)).toContain(`${a.sessionId}:0:1+1`);
    expect((await db.memory.zoom(later, `${a.sessionId}:0:1+1`)).kind).toBe("message");
    expect(await db.memory.audit()).toMatchObject({ ok: true, violations: [] });
  }, 60_000);

  it("audits a publication that shows a record of another, unpublished turn", async () => {
    const d = await open("D");
    await db.memory.admitTurn({ sessionId: d.sessionId, turnId: "d1" });
    await record(d, "d1", "user", "First part of d1.");
    await db.memory.admitTurn({ sessionId: d.sessionId, turnId: "d2" });
    await record(d, "d2", "user", "The queued prompt of d2.");
    await record(d, "d1", "assistant", "Second part of d1.");
    await db.memory.finishTurn({ sessionId: d.sessionId, turnId: "d1" }, "completed");
    const seq = await published(d, "d1");
    await db.memory.settle(d.sessionId, { timeoutMs: 20_000 });
    // What a publication covering the turn's whole span [0, 3) looked like before: 0+2 (d1's and d2's records), 2+1.
    await db.memory.pool.query(
      `UPDATE optchat.publications SET cover_levels = '{1,0}', cover_idxs = '{0,2}'
        WHERE scope_id = 'project:prj_interleave' AND publication_seq = $1`,
      [seq],
    );
    const report = await db.memory.audit();
    expect(report.ok).toBe(false);
    expect(report.violations).toContainEqual(
      expect.objectContaining({ audit: "turn_visibility", subject: expect.stringMatching(/1\+1 of turn d2$/) }),
    );
    await db.memory.pool.query(
      `UPDATE optchat.publications SET cover_levels = '{0,0}', cover_idxs = '{0,2}'
        WHERE scope_id = 'project:prj_interleave' AND publication_seq = $1`,
      [seq],
    );
    await db.memory.finishTurn({ sessionId: d.sessionId, turnId: "d2" }, "completed");
    await published(d, "d2");
    expect(await db.memory.audit()).toMatchObject({ ok: true, violations: [] });
  }, 60_000);
});

describe("dependency-driven, in-order publication (issue 9 item 5)", () => {
  it("publishes a session's turns in admission order: a turn finished first waits for the earlier one", async () => {
    const c = await open("C");
    await db.memory.admitTurn({ sessionId: c.sessionId, turnId: "c1" });
    await record(c, "c1", "user", "c1 asks about the retry budget.");
    await db.memory.admitTurn({ sessionId: c.sessionId, turnId: "c2" });
    await record(c, "c2", "user", "c2 asks about the deploy window.");
    await record(c, "c2", "assistant", "c2's answer: Tuesdays after the freeze.");
    await db.memory.finishTurn({ sessionId: c.sessionId, turnId: "c2" }, "completed");
    await db.memory.settle(c.sessionId, { timeoutMs: 20_000 });
    // c2's cover is built and c2 is finished, but c1 is not: no job exists for c2 (nothing polls), no publication.
    expect(await publishJobs(c, "c2")).toEqual({ jobs: 0, waits: 0 });
    expect(await publicationOf(c, "c2")).toBeUndefined();

    await record(c, "c1", "assistant", "c1's answer: three retries, then the dead-letter queue.");
    await db.memory.finishTurn({ sessionId: c.sessionId, turnId: "c1" }, "completed");
    const first = await published(c, "c1");
    const second = await published(c, "c2");
    expect(second).toBe(first + 1);
    expect(await publishJobs(c, "c1")).toEqual({ jobs: 1, waits: 0 });
    expect(await publishJobs(c, "c2")).toEqual({ jobs: 1, waits: 0 });
    expect(await db.memory.audit()).toMatchObject({ ok: true, violations: [] });
  }, 60_000);

  it("schedules a publication from the node commit that summarizes its last record: one job, no waiting", async () => {
    const e = await open("E");
    const ctx = { sessionId: e.sessionId, turnId: "e1" };
    await db.memory.admitTurn(ctx);
    // Over 512 bytes each: every leaf and the parent need the (150 ms) summarizer, so nothing is summarized when the
    // turn finishes.
    for (let k = 0; k < 2; k++)
      await record(e, "e1", k === 0 ? "user" : "assistant", `part ${k}: ${"the index rebuild plan ".repeat(30)}`);
    await db.memory.finishTurn(ctx, "completed");
    const { rows } = await db.memory.pool.query<{ built: number }>(
      `SELECT count(*)::int AS built FROM optchat.nodes n JOIN optchat.trees t USING (tree_id)
        WHERE t.session_id = $1 AND n.level = 1`,
      [e.sessionId],
    );
    expect(rows[0]?.built).toBe(0);
    await published(e, "e1");
    expect(await publishJobs(e, "e1")).toEqual({ jobs: 1, waits: 0 });
  }, 60_000);
});
