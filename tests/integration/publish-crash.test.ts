import { describe, expect, it } from "vitest";
import { eventually, finishTurnNeedingSummary, useTestMemory, useWorkerProcesses } from "../helpers.js";

const db = useTestMemory();
const workers = useWorkerProcesses(db);

async function state() {
  const { rows } = await db.memory.pool.query(
    `SELECT (SELECT count(*)::int FROM optchat.publications) AS publications,
            (SELECT count(*)::int FROM optchat.nodes n JOIN optchat.trees t USING (tree_id) WHERE t.kind = 'shared') AS shared_nodes,
            (SELECT next_publication_seq::int FROM optchat.scopes WHERE scope_id = 'project:prj_crash') AS next_seq`,
  );
  return rows[0];
}

describe("crash boundaries of the publish path", () => {
  it("leaves the previous state when a worker dies before the publication commit, and one complete publication after", async () => {
    const slow = await workers.start({ OPTCHAT_SUMMARIZER: "fake:delay=120000", OPTCHAT_WORKER_CONCURRENCY: "2" });
    // Three messages of 240 bytes: their session nodes are free, the publication leaf needs the summarizer.
    await finishTurnNeedingSummary(db.memory, {
      hostSessionId: "crash",
      projectId: "prj_crash",
      theme: "the migration plan keeps both schemas readable until the switch.",
      day: 23,
    });
    await eventually(
      async () => {
        const { rows } = await db.memory.pool.query(
          "SELECT 1 FROM pgboss.job WHERE name = 'optchat-publish' AND state = 'active'",
        );
        return rows.length > 0 ? true : undefined;
      },
      20_000,
      "the publication job held by the slow worker",
    );
    expect(await state()).toEqual({ publications: 0, shared_nodes: 0, next_seq: 0 });

    const healthy = await workers.start();
    slow.child.kill("SIGKILL");
    // Killed before its commit: nothing of the publication exists (no number taken, no leaf, no view revision).
    expect(await state()).toEqual({ publications: 0, shared_nodes: 0, next_seq: 0 });
    await eventually(
      async () => ((await state()).publications === 1 ? true : undefined),
      40_000,
      "the publication by the other worker",
    );
    expect(await state()).toEqual({ publications: 1, shared_nodes: 1, next_seq: 1 });

    // Killing the remaining worker after the commit keeps the complete new state.
    healthy.child.kill("SIGKILL");
    expect(await state()).toEqual({ publications: 1, shared_nodes: 1, next_seq: 1 });
    expect(await db.memory.audit()).toMatchObject({ ok: true, violations: [] });
  }, 90_000);
});
