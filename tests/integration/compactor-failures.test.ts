import { describe, expect, it } from "vitest";
import { NODE_BYTES, SIZE_TRIES } from "../../src/core/summary.js";
import { readStatus } from "../../src/memory/status.js";
import { type CompactorEvent, startWorker } from "../../src/memory/worker.js";
import { eventually, finishTurnNeedingSummary, sessionWithOneMessage, useTestMemory } from "../helpers.js";

const db = useTestMemory({ failureRetrySeconds: 1 });
const LONG = `user: please keep the retry policy at three attempts. ${"because the broker redelivers anyway; ".repeat(40)}`;

async function sessionWithOneLongMessage(name: string) {
  return await sessionWithOneMessage(db.memory, {
    hostSessionId: name,
    projectId: "prj_failures",
    kind: "user",
    content: LONG,
  });
}

async function leafRow(sessionId: string) {
  const { rows } = await db.memory.pool.query(
    `SELECT n.text, n.byte_length, n.attempts, n.overshoot, n.summarizer, n.revision
       FROM optchat.nodes n JOIN optchat.trees t USING (tree_id) WHERE t.session_id = $1 AND n.level = 0 AND n.idx = 0`,
    [sessionId],
  );
  return rows;
}

/** A worker whose every summarizer call fails, with the events it reported. */
async function failingWorker() {
  const events: CompactorEvent[] = [];
  const worker = await startWorker(db.memory, { ...db.config, summarizer: "fake:fail" }, (e) => events.push(e));
  return { worker, events };
}

/** The failure row of `table` once it counts at least `failures` failures. */
async function failureRow(table: "node_failures" | "publication_failures", failures: number, what: string) {
  return await eventually(
    async () => {
      const { rows } = await db.memory.pool.query(`SELECT failures, last_error FROM optchat.${table}`);
      return rows[0]?.failures >= failures ? rows[0] : undefined;
    },
    20_000,
    what,
  );
}

describe("compactor failures", () => {
  it("keeps the shortest try of a summarizer that always overshoots, flagged, after the retry limit", async () => {
    const session = await sessionWithOneLongMessage("overshoot");
    const worker = await startWorker(db.memory, { ...db.config, summarizer: "fake:overshoot=40" }, () => {});
    try {
      await db.memory.settle(session.sessionId, { timeoutMs: 20_000 });
      expect(await leafRow(session.sessionId)).toEqual([
        {
          text: expect.any(String),
          byte_length: NODE_BYTES + 40 - 5 * (SIZE_TRIES - 1),
          attempts: SIZE_TRIES,
          overshoot: true,
          summarizer: "fake-extractive/1",
          revision: 0,
        },
      ]);
    } finally {
      await worker.stop();
    }
  });

  it("leaves a visible failing job, the sources intact and settle reporting MEMORY_NOT_READY, then recovers", async () => {
    const session = await sessionWithOneLongMessage("failing");
    const { worker: failing, events } = await failingWorker();
    try {
      // Retried after the fixed delay (1 s here), forever, and reported once.
      const failures = await failureRow("node_failures", 3, "three failures");
      expect(failures.last_error).toMatch(/configured to fail every call/);
      expect(events.filter((e) => e.type === "failure")).toHaveLength(1);

      const settled = db.memory.settle(session.sessionId, { timeoutMs: 500 });
      await expect(settled).rejects.toMatchObject({
        code: "MEMORY_NOT_READY",
        details: {
          pending: 1,
          firstPending: 0,
          failing: [{ ref: "0+1", lastError: expect.stringMatching(/fail every call/) }],
        },
      });
      await expect(settled).rejects.toThrow(/not summarized yet; failing: 0\+1/);
      // The source is untouched and readable whole.
      const page = await db.memory.readPayload({ sessionId: session.sessionId, generation: 0, seq: 0 });
      expect(page).toMatchObject({ text: LONG, complete: true });
      expect(await leafRow(session.sessionId)).toEqual([]);
      // The job is still there, waiting for its next try: nothing is dropped.
      const { rows } = await db.memory.pool.query(
        "SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'optchat-node' AND state IN ('created', 'retry', 'active')",
      );
      expect(rows[0].n).toBe(1);
    } finally {
      await failing.stop();
    }

    const healthy = await startWorker(db.memory, db.config, () => {});
    try {
      await db.memory.settle(session.sessionId, { timeoutMs: 20_000 });
      expect(await leafRow(session.sessionId)).toHaveLength(1);
      const { rows } = await db.memory.pool.query("SELECT count(*)::int AS n FROM optchat.node_failures");
      expect(rows[0].n).toBe(0);
    } finally {
      await healthy.stop();
    }
  });

  it("keeps retrying a publication whose summary fails, visibly, and publishes it once the summarizer works", async () => {
    // Three messages of 240 bytes: their session nodes are free, the publication leaf needs the summarizer.
    const ctx = await finishTurnNeedingSummary(db.memory, {
      hostSessionId: "pub-fail",
      projectId: "prj_pub_fail",
      theme: "the rollout waits for the canary to stay green for an hour.",
      day: 24,
    });
    const session = { sessionId: ctx.sessionId };
    const { worker: failing, events } = await failingWorker();
    try {
      const row = await failureRow("publication_failures", 2, "two failed publication attempts");
      expect(row.last_error).toMatch(/configured to fail every call/);
      expect(events.filter((e) => e.type === "failure")).toHaveLength(1);
      const { rows } = await db.memory.pool.query(
        "SELECT count(*)::int AS n FROM optchat.publications WHERE turn_id = 't1' AND session_id = $1",
        [session.sessionId],
      );
      expect(rows[0].n).toBe(0);
      const status = await readStatus(db.url);
      expect(status.failingPublications).toBe(1);
    } finally {
      await failing.stop();
    }
    const healthy = await startWorker(db.memory, db.config, () => {});
    try {
      await eventually(
        async () => {
          const { rows } = await db.memory.pool.query(
            "SELECT count(*)::int AS n FROM optchat.publications WHERE session_id = $1",
            [session.sessionId],
          );
          return rows[0].n === 1 ? true : undefined;
        },
        20_000,
        "the publication",
      );
      expect(
        (await db.memory.pool.query("SELECT count(*)::int AS n FROM optchat.publication_failures")).rows[0].n,
      ).toBe(0);
    } finally {
      await healthy.stop();
    }
  });
});
