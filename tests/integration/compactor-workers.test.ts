import { describe, expect, it } from "vitest";
import { auditTreeViews } from "../../src/memory/audit.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import { ingestEvent, useTestMemory, useWorkerProcesses } from "../helpers.js";

const VIEW_BYTES = 6000;
// Every merge built (not only those a view wants), so that each tree is complete and every node's build is counted.
const db = useTestMemory({ viewBytes: VIEW_BYTES, compactorMerges: "all" });
const { all: workers, start } = useWorkerProcesses(db);

const SESSIONS = 20;
const PER_SESSION = 250;

/** Messages of mixed sizes: short ones are free nodes, long ones need the summarizer. */
function content(session: number, n: number): string {
  const sentence = `session ${session} message ${n}: the importer uses the durable queue; retries stay at three. `;
  return n % 3 === 0 ? sentence.repeat(1 + (n % 11)) : sentence;
}

/** Nodes of a complete binary tree over T leaves: every (level, index) with (index+1)·2^level <= T. */
function fullTreeNodes(leaves: number): number {
  let total = 0;
  for (let level = 0; 2 ** level <= leaves; level++) total += Math.floor(leaves / 2 ** level);
  return total;
}

describe("compactor: three worker processes sharing the queue", () => {
  it("build every node of 20 sessions × 250 records exactly once, leave no job behind, and reach readiness", async () => {
    const env = {
      OPTCHAT_VIEW_BYTES: String(VIEW_BYTES),
      OPTCHAT_WORKER_CONCURRENCY: "4",
      OPTCHAT_COMPACTOR_MERGES: "all",
    };
    await Promise.all([1, 2, 3].map(() => start(env)));

    const sessions = await Promise.all(
      Array.from({ length: SESSIONS }, (_, s) =>
        db.memory.openSession({ host: "test", hostSessionId: `w${s}`, projectId: "prj_workers" }),
      ),
    );
    // Ingest while the workers run, in batches of 25 per session, sessions interleaved.
    for (let from = 0; from < PER_SESSION; from += 25) {
      await Promise.all(
        sessions.map((session, s) =>
          db.memory.ingestMany(
            Array.from({ length: 25 }, (_, k): IngestEvent => {
              const n = from + k;
              return ingestEvent({
                sessionId: session.sessionId,
                turnId: `t${Math.floor(n / 10)}`,
                kind: n % 10 === 0 ? "user" : "assistant",
                host: `w${s}`,
                messageId: `m${n}`,
                occurredAt: new Date(Date.UTC(2026, 10, 1, 0, 0, n)).toISOString(),
                content: content(s, n),
              });
            }),
          ),
        ),
      );
    }

    // The first settle waits for most of the ~9,900 builds: ~80 s on an idle 2-core machine, past 150 s at load
    // average 10-14 (other test files and benches on the same cores); a bound, not a speed target.
    for (const session of sessions) {
      const state = await db.memory.settle(session.sessionId, { timeoutMs: 270_000 });
      expect(state).toMatchObject({ ready: true, leafCount: PER_SESSION, builtLeaves: PER_SESSION, failing: [] });
    }
    // Parents finish shortly after the last leaf; wait for the queue to drain.
    const pool = db.memory.pool;
    const deadline = Date.now() + 60_000;
    let open = -1;
    while (Date.now() < deadline) {
      open = (
        await pool.query(
          "SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'optchat-node' AND state IN ('created', 'retry', 'active')",
        )
      ).rows[0].n;
      if (open === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(open).toBe(0);

    const nodes = await pool.query(
      "SELECT count(*)::int AS n, count(DISTINCT (tree_id, level, idx))::int AS distinct_nodes, max(revision)::int AS max_revision FROM optchat.nodes",
    );
    expect(nodes.rows[0]).toEqual({
      n: SESSIONS * fullTreeNodes(PER_SESSION),
      distinct_nodes: SESSIONS * fullTreeNodes(PER_SESSION),
      max_revision: 0,
    });
    // Free nodes (short messages, children that fit together) are built inline where they become ready; every other
    // node was built by one completed job (a leaf run or a batch of due merges is one job's several nodes), and the
    // three workers shared that work.
    const byJob = await pool.query("SELECT count(*)::int AS n FROM optchat.nodes WHERE job_id IS NOT NULL");
    const free = await pool.query(
      "SELECT count(*)::int AS n FROM optchat.nodes WHERE job_id IS NULL AND summarizer = 'free'",
    );
    expect(byJob.rows[0].n + free.rows[0].n).toBe(SESSIONS * fullTreeNodes(PER_SESSION));
    const orphans = await pool.query(
      `SELECT count(*)::int AS n FROM optchat.nodes n WHERE n.job_id IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM pgboss.job j WHERE j.id = n.job_id AND j.state = 'completed')`,
    );
    expect(orphans.rows[0].n).toBe(0);
    const builtBy = workers.map((w) => w.events.filter((e) => e.type === "built").length);
    for (const count of builtBy) expect(count).toBeGreaterThan(0);
    expect(builtBy.reduce((a, b) => a + b, 0)).toBe(byJob.rows[0].n);

    // Views are within budget once built, and every persisted revision equals a refold of the event log.
    for (const session of sessions) {
      const view = await db.memory.view(session.sessionId);
      expect(view.unbuilt).toBe(0);
      expect(view.bytes).toBeLessThanOrEqual(VIEW_BYTES);
      const trees = await pool.query("SELECT tree_id FROM optchat.trees WHERE session_id = $1", [session.sessionId]);
      expect(await auditTreeViews(pool, trees.rows[0].tree_id)).toEqual([]);
    }

    // SIGTERM stops a worker cleanly.
    for (const w of workers) w.child.kill("SIGTERM");
    for (const w of workers) expect(await w.exited).toEqual({ code: 0, signal: null });
    console.info(`compactor-workers: nodes built per worker ${builtBy.join(", ")}`);
  }, 450_000);
});
