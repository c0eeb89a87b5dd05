import { beforeAll, describe, expect, it } from "vitest";
import { tilingProblem } from "../../src/core/fold.js";
import { type NodeAddress, parseRef } from "../../src/core/tree.js";
import { resolveConfig } from "../../src/memory/config.js";
import { type Memory, openMemory } from "../../src/memory/service.js";
import { viewAsText } from "../../src/memory/views.js";
import { startWorker } from "../../src/memory/worker.js";
import { eventually, ingestEvent, runCli, useTestMemory, waitForIdleQueues } from "../helpers.js";

const VIEW_BYTES = 5000;
// Complete trees (every merge built): the projection test needs coarser nodes than the view's fold asks for.
const db = useTestMemory({ viewBytes: VIEW_BYTES, compactorMerges: "all" });
const MESSAGES = 100;
const originals: string[] = [];
let sessionId = "";

function message(n: number): string {
  const base = `message ${n}: ${n % 5 === 0 ? "the user decides" : "the agent reports"} item ${n * 13}.`;
  return n % 4 === 0 ? `${base} ${"with a long explanation ".repeat(30)}` : base;
}

async function drained(memory: Memory): Promise<void> {
  await eventually(
    async () => {
      const { rows } = await memory.pool.query(
        "SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'optchat-node' AND state IN ('created', 'retry', 'active')",
      );
      return rows[0].n === 0 ? true : undefined;
    },
    60_000,
    "an empty node queue",
  );
}

/** Ingests messages `from` to `to` (exclusive) of `originals` into a session and waits for the compactor. */
async function ingestAndSettle(session: string, host: string, from: number, to: number): Promise<void> {
  await db.memory.ingestMany(
    originals.slice(from, to).map((content, k) =>
      ingestEvent({
        sessionId: session,
        turnId: `t${(from + k) >> 2}`,
        kind: (from + k) % 2 === 0 ? ("user" as const) : ("assistant" as const),
        host,
        messageId: `m${from + k}`,
        occurredAt: new Date(Date.UTC(2026, 10, 1, 9, 0, from + k)).toISOString(),
        content,
      }),
    ),
  );
  const worker = await startWorker(db.memory, db.config, () => {});
  await db.memory.settle(session, { timeoutMs: 60_000 });
  await drained(db.memory);
  await worker.stop();
}

beforeAll(async () => {
  const session = await db.memory.openSession({ host: "test", hostSessionId: "zoom", projectId: "prj_zoom" });
  sessionId = session.sessionId;
  for (let n = 0; n <= MESSAGES; n++) originals.push(message(n));
  await ingestAndSettle(sessionId, "zoom", 0, MESSAGES);
});

describe("zoom", () => {
  it("reaches the exact source payload from every view line in log2(n) steps", async () => {
    const view = await db.memory.view(sessionId);
    expect(view.unbuilt).toBe(0);
    expect(view.bytes).toBeLessThanOrEqual(VIEW_BYTES);
    expect(view.lines.some((line) => line.level >= 3)).toBe(true); // the view really is coarse somewhere
    for (const [k, line] of view.lines.entries()) {
      let ref = line.ref;
      let steps = 0;
      for (;;) {
        const opened = await db.memory.zoomSession(sessionId, ref);
        steps += 1;
        if (opened.kind === "record") {
          const page = await db.memory.readPayload(
            { sessionId, generation: 0, seq: opened.seq },
            { maxBytes: 1 << 20 },
          );
          expect(page.text).toBe(originals[opened.seq]);
          break;
        }
        // Alternate between the left and right child so that different paths are walked.
        const next = opened.lines[(k + steps) % 2];
        if (!next) throw new Error("zoom returned fewer than two lines");
        ref = next.ref;
      }
      expect(steps).toBe(line.level + 1); // log2(n) openings, then the message itself
    }
  });

  it("rejects refs that are not lines of the tree", async () => {
    for (const ref of ["3+2", "0+3", "96+8", "abc", "-1+1", `${MESSAGES}+1`]) {
      await expect(db.memory.zoomSession(sessionId, ref)).rejects.toMatchObject({ code: "REF_NOT_FOUND" });
    }
  });

  it("projects to a smaller budget without changing the canonical view, or says how small it can get", async () => {
    // A projection may use only nodes built by its revision's event (so that it is the same whenever it is asked
    // for). Here every merge of the first 100 messages is built before message 101 makes the latest revision.
    const other = await db.memory.openSession({ host: "test", hostSessionId: "project", projectId: "prj_zoom" });
    await ingestAndSettle(other.sessionId, "project", 0, MESSAGES);
    await ingestAndSettle(other.sessionId, "project", MESSAGES, MESSAGES + 1);
    const canonical = await db.memory.view(other.sessionId);
    const tiny = await db.memory.view(other.sessionId, { budget: 10 });
    expect(tiny.projection).toMatchObject({ budget: 10, fits: false, minimalBytes: tiny.bytes });
    expect(tiny.bytes).toBeGreaterThan(10);
    // The smallest cover still tiles all 101 messages, one line per set bit of 101 (64 + 32 + 4 + 1).
    expect(
      tilingProblem(
        tiny.lines.map((line) => parseRef(line.ref) as NodeAddress),
        MESSAGES + 1,
      ),
    ).toBeUndefined();
    expect(tiny.lines.map((line) => line.level)).toEqual([6, 5, 2, 0]);
    expect(tiny.bytes).toBeLessThan(canonical.bytes);

    const budget = Math.floor((tiny.bytes + canonical.bytes) / 2);
    const projected = await db.memory.view(other.sessionId, { budget });
    expect(projected.projection).toMatchObject({ budget, fits: true });
    expect(projected.bytes).toBeLessThanOrEqual(budget);
    expect(projected.lines.length).toBeLessThan(canonical.lines.length);
    expect(await db.memory.view(other.sessionId)).toEqual(canonical);
    // Cached per (revision, budget).
    const { rows } = await db.memory.pool.query("SELECT budget, fits FROM optchat.view_projections ORDER BY budget");
    expect(rows).toEqual([
      { budget: 10, fits: false },
      { budget, fits: true },
    ]);
  });

  it("is available from the CLI as the model sees it", async () => {
    const env = { DATABASE_URL: db.url, OPTCHAT_VIEW_BYTES: String(VIEW_BYTES) };
    const view = await runCli(["view", sessionId], env);
    expect(view.code, view.stderr).toBe(0);
    expect(view.stdout.trimEnd()).toBe(viewAsText(await db.memory.view(sessionId)));
    const first = (await db.memory.view(sessionId)).lines.find((line) => line.level > 0);
    const zoom = await runCli(["zoom", sessionId, first?.ref as string], env);
    expect(zoom.stdout.trimEnd().split("\n")).toHaveLength(2);
    const leaf = await runCli(["zoom", sessionId, "4+1"], env);
    expect(leaf.stdout).toContain(originals[4]);
    const tooSmall = await runCli(["view", sessionId, "--budget", "10"], env);
    expect(tooSmall.code).toBe(3);
    expect(tooSmall.stderr).toMatch(/does not fit: the smallest cover is \d+ bytes/);
  });
});

describe("restart", () => {
  it("reloads views and refs byte-identical and regenerates nothing", async () => {
    const nodesBefore = await db.memory.pool.query(
      "SELECT tree_id, level, idx, revision, text, built_at FROM optchat.nodes ORDER BY 1, 2, 3, 4",
    );
    const jobsBefore = await db.memory.pool.query("SELECT count(*)::int AS n FROM pgboss.job");
    const viewBefore = viewAsText(await db.memory.view(sessionId));
    const zoomBefore = await db.memory.zoomSession(sessionId, "0+2");

    // Everything stops; a new process opens the same database and runs a worker for a while.
    const reopened = await openMemory(resolveConfig({ overrides: { databaseUrl: db.url, viewBytes: VIEW_BYTES } }));
    try {
      // Its start-up sweep (awaited by startWorker) has queued whatever it finds missing; let that run.
      const worker = await startWorker(reopened, db.config, () => {});
      await waitForIdleQueues(reopened.pool);
      await worker.stop();
      expect(viewAsText(await reopened.view(sessionId))).toBe(viewBefore);
      expect(await reopened.zoomSession(sessionId, "0+2")).toEqual(zoomBefore);
      const nodesAfter = await reopened.pool.query(
        "SELECT tree_id, level, idx, revision, text, built_at FROM optchat.nodes ORDER BY 1, 2, 3, 4",
      );
      expect(nodesAfter.rows).toEqual(nodesBefore.rows);
      const jobsAfter = await reopened.pool.query("SELECT count(*)::int AS n FROM pgboss.job");
      expect(jobsAfter.rows[0].n).toBe(jobsBefore.rows[0].n);
    } finally {
      await reopened.close();
    }
  });
});
