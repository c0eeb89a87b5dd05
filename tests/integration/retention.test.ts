import { describe, expect, it } from "vitest";
import { viewAsText } from "../../src/memory/views.js";
import { startWorker } from "../../src/memory/worker.js";
import { deleteSupersededRevisions } from "../../src/store/retention.js";
import { ingestEvent, MEDIUM_WINDOW, useTestMemory } from "../helpers.js";

// Job retention at its floor and a fast sweep, so the test sees pg-boss's maintenance delete finished jobs.
const db = useTestMemory({ viewBytes: 2000, jobRetentionSeconds: 1, retentionSweepSeconds: 1 });

let n = 0;
async function ingest(sessionId: string, host: string, turnId: string, text: string) {
  n += 1;
  await db.memory.ingest(
    ingestEvent({
      sessionId,
      turnId,
      kind: n % 2 ? "user" : "assistant",
      host,
      messageId: `m${n}`,
      occurredAt: new Date(Date.UTC(2026, 11, 1, 9, 0, n)).toISOString(),
      content: text,
    }),
  );
}

async function count(sql: string, values: unknown[] = []): Promise<number> {
  const { rows } = await db.memory.pool.query(sql, values);
  return Number(rows[0].n);
}

const WINDOW = MEDIUM_WINDOW;

describe("retention of derived rows (issue 9 item 8)", () => {
  it("deletes finished jobs after OPTCHAT_JOB_RETENTION_SECONDS, and superseded unpinned revisions while pinned ones read back unchanged", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "ret", projectId: "prj_ret" });
    const worker = await startWorker(db.memory, db.config, () => {});
    try {
      for (let t = 0; t < 3; t++) {
        await db.memory.admitTurn({ sessionId: session.sessionId, turnId: `t${t}` });
        for (let k = 0; k < 6; k++)
          await ingest(session.sessionId, "ret", `t${t}`, `turn ${t} message ${k} `.repeat(8));
        await db.memory.settle(session.sessionId);
        await db.memory.finishTurn({ sessionId: session.sessionId, turnId: `t${t}` }, "completed");
      }
      // A later turn pins its own view at its first assembly: that revision must survive every sweep.
      await db.memory.admitTurn({ sessionId: session.sessionId, turnId: "t3", query: "what happened?" });
      const ctx = { sessionId: session.sessionId, turnId: "t3" };
      const assembled = await db.memory.assembleContext(ctx, WINDOW);
      const pinned = (await db.memory.getTurn(ctx)).snapshot.ownViewRevision as number;
      expect(pinned).toBeGreaterThan(1);
      const pinnedView = viewAsText(await db.memory.view(session.sessionId, { revision: pinned }));
      for (let k = 0; k < 8; k++) await ingest(session.sessionId, "ret", "t3", `after the pin ${k} `.repeat(8));
      await db.memory.settle(session.sessionId);

      // Finished jobs: kept 1 s, then deleted by the worker's pg-boss maintenance (every second here). The nodes built
      // by jobs name them (nodes.job_id): there were jobs, and none of them may remain, nor any other finished one.
      const jobsThatRan = await count("SELECT count(DISTINCT job_id) AS n FROM optchat.nodes WHERE job_id IS NOT NULL");
      expect(jobsThatRan).toBeGreaterThan(10);
      const deadline = Date.now() + 60_000;
      let left = jobsThatRan;
      while (Date.now() < deadline) {
        left = await count(
          `SELECT count(*) AS n FROM pgboss.job j
            WHERE j.name LIKE 'optchat-%'
              AND (j.state > 'active' OR j.id IN (SELECT job_id FROM optchat.nodes WHERE job_id IS NOT NULL))`,
        );
        if (left === 0) break;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
      expect(left).toBe(0);

      // Revisions: a retention longer than their age keeps them all; at 0 only the pinned and latest ones stay.
      const tree = await db.memory.pool.query(
        "SELECT tree_id, view_revision FROM optchat.trees WHERE session_id = $1::text",
        [session.sessionId],
      );
      const { tree_id: treeId, view_revision: latest } = tree.rows[0];
      const before = await count("SELECT count(*) AS n FROM optchat.view_revisions WHERE tree_id = $1::bigint", [
        treeId,
      ]);
      expect(before).toBe(latest);
      expect(await deleteSupersededRevisions(db.memory.pool, { olderThanSeconds: 3600 })).toBe(0);
      expect(await worker.retention.sweep()).toBe(0); // the configured default: one day
      const deleted = await deleteSupersededRevisions(db.memory.pool, { olderThanSeconds: 0 });
      expect(deleted).toBeGreaterThan(0);
      const { rows: kept } = await db.memory.pool.query(
        "SELECT revision FROM optchat.view_revisions WHERE tree_id = $1::bigint ORDER BY revision",
        [treeId],
      );
      expect(kept.map((r) => r.revision)).toEqual([pinned, latest]);
      // The pinned revision reads back exactly; the turn still assembles the same own history.
      expect(viewAsText(await db.memory.view(session.sessionId, { revision: pinned }))).toBe(pinnedView);
      const again = await db.memory.assembleContext(ctx, WINDOW);
      expect(again.blocks.find((b) => b.name === "session_memory")?.text).toBe(
        assembled.blocks.find((b) => b.name === "session_memory")?.text,
      );
      // The shared tree's revisions pinned by the turns' snapshots are kept too, and every audit still passes.
      const report = await db.memory.audit();
      expect(report.violations).toEqual([]);
    } finally {
      await worker.stop(5000);
    }
  });
});
