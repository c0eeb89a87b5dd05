import { describe, expect, it } from "vitest";
import { eventually, sessionWithOneMessage, useTestMemory, useWorkerProcesses } from "../helpers.js";

const db = useTestMemory();
const workers = useWorkerProcesses(db, { OPTCHAT_WORKER_CONCURRENCY: "2" });
const start = workers.start;

async function ingestLong(name: string): Promise<string> {
  const session = await sessionWithOneMessage(db.memory, {
    hostSessionId: name,
    projectId: "prj_leases",
    kind: "assistant",
    content: `a long answer that needs the summarizer. ${"detail ".repeat(200)}`,
  });
  return session.sessionId;
}

async function activeJob(): Promise<{ id: string; retry_count: number }> {
  return await eventually(
    async () => {
      const { rows } = await db.memory.pool.query(
        "SELECT id, retry_count FROM pgboss.job WHERE name = 'optchat-node' AND state = 'active'",
      );
      return rows[0];
    },
    20_000,
    "an active node job",
  );
}

async function leafRows(sessionId: string) {
  const { rows } = await db.memory.pool.query(
    "SELECT n.revision, n.job_id, n.job_attempt FROM optchat.nodes n JOIN optchat.trees t USING (tree_id) WHERE t.session_id = $1 AND n.level = 0",
    [sessionId],
  );
  return rows;
}

/** The session's leaf rows, once there are any. */
async function builtLeaves(sessionId: string, timeoutMs: number, what: string) {
  return await eventually(
    async () => {
      const found = await leafRows(sessionId);
      return found.length > 0 ? found : undefined;
    },
    timeoutMs,
    what,
  );
}

describe("compactor leases", () => {
  it("re-runs the job of a SIGKILLed worker on another worker within 15 s", async () => {
    const slow = await start({ OPTCHAT_SUMMARIZER: "fake:delay=120000" });
    const sessionId = await ingestLong("killed");
    const job = await activeJob();
    await start(); // the other worker is already running when the first one dies
    slow.child.kill("SIGKILL");
    const killedAt = Date.now();
    const rows = await builtLeaves(sessionId, 30_000, "the node built by the second worker");
    const seconds = (Date.now() - killedAt) / 1000;
    expect(seconds).toBeLessThan(15);
    expect(rows).toEqual([{ revision: 0, job_id: job.id, job_attempt: job.retry_count + 1 }]);
    console.info(`compactor-leases: node rebuilt ${seconds.toFixed(1)} s after SIGKILL`);
  }, 60_000);

  it("does not let a worker that was paused past its lease commit (fencing)", async () => {
    for (const w of workers.all) if (w.child.exitCode === null) w.child.kill("SIGKILL");
    // The summary takes 8 s, so the SIGSTOP below lands inside it even on a loaded machine.
    const paused = await start({ OPTCHAT_SUMMARIZER: "fake:delay=8000" });
    const sessionId = await ingestLong("paused");
    const job = await activeJob();
    // Stop it only once it is inside the model call, so that it resumes with a summary in hand and tries to commit.
    await eventually(
      async () => paused.events.find((e) => e.type === "summarizing"),
      30_000,
      "the paused worker's model call",
    );
    paused.child.kill("SIGSTOP"); // no heartbeats from here on: the claim expires
    const other = await start();
    const rows = await builtLeaves(sessionId, 40_000, "the node built by the other worker");
    expect(rows).toEqual([{ revision: 0, job_id: job.id, job_attempt: job.retry_count + 1 }]);

    // The paused worker wakes up with its summary done and tries to commit with its stale attempt.
    paused.child.kill("SIGCONT");
    const lost = await eventually(
      async () => paused.events.find((e) => e.type === "lease_lost"),
      40_000,
      () =>
        `lease_lost from the paused worker (its events: ${JSON.stringify(paused.events)}; stderr: ${paused.stderr()})`,
    );
    expect(lost).toMatchObject({ ref: "0+1", jobId: job.id });
    expect(await leafRows(sessionId)).toEqual(rows); // nothing overwritten, nothing duplicated
    expect(other.events.filter((e) => e.type === "built" && e.ref === "0+1")).toHaveLength(1);
    paused.child.kill("SIGTERM");
    other.child.kill("SIGTERM");
    expect(await paused.exited).toMatchObject({ code: 0 });
  }, 120_000);
});
