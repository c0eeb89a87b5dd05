import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunningCompactor } from "../../src/memory/worker.js";
import { startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import { eventually, LARGE_WINDOW, messageWriter, useTestMemory } from "../helpers.js";

/** A rewind of a session's history as a new generation, through the service API (issue 15 item 2). */

const db = useTestMemory();
let worker: RunningCompactor;
const writeMessage = messageWriter(db, Date.UTC(2026, 11, 1, 10));

const WINDOW = LARGE_WINDOW;

async function turn(session: Session, turnId: string, texts: [string, string], finish = true): Promise<void> {
  await db.memory.admitTurn({ sessionId: session.sessionId, turnId, query: texts[0] });
  for (const [n, text] of texts.entries()) {
    await writeMessage(session, turnId, n === 0 ? "user" : "assistant", text, {
      attributes: { hostMessageId: `host-${turnId}-${n}` },
    });
  }
  if (finish) await db.memory.finishTurn({ sessionId: session.sessionId, turnId }, "completed");
}

async function count(sql: string, values: unknown[] = []): Promise<number> {
  const { rows } = await db.memory.pool.query(sql, values);
  return Number(rows[0].n);
}

beforeAll(async () => {
  worker = await startWorker(db.memory, db.config, () => {});
});
afterAll(async () => {
  await worker?.stop();
});

describe("a rewind", () => {
  it("starts a new generation with the retained prefix; the superseded records are no longer the session's history", async () => {
    const session = await db.memory.openSession({ host: "test", hostSessionId: "R", projectId: "prj_rewind" });
    await turn(session, "t1", ["REWMARK-1 keep this question", "REWMARK-1 kept answer"]);
    await turn(session, "t2", ["REWMARK-2 to be reverted", "REWMARK-2 reverted answer"]);
    await turn(session, "t3", ["REWMARK-3 also reverted", "REWMARK-3 never finished"], false);
    await db.memory.settle(session.sessionId, { timeoutMs: 30_000 });
    // t1 and t2 are published before the revert: the rewind must take t2 out of the shared memory.
    await eventually(
      async () => ((await count("SELECT count(*) AS n FROM optchat.publications")) === 2 ? true : undefined),
      30_000,
      "two publications",
    );

    // OpenCode removes from the revert point (t2's user message) to the end, in any order.
    const result = await db.memory.rewindSession(session.sessionId, ["host-t3-1", "host-t2-0", "host-unknown"]);
    expect(result).toEqual({ status: "rewound", generation: 1, kept: 2, superseded: 4, publicationsRetired: 1 });
    expect(await db.memory.rewindSession(session.sessionId, ["host-t2-0"])).toEqual({ status: "unchanged" });

    const current = await db.memory.getSession(session.sessionId);
    expect(current.currentGeneration).toBe(1);
    const records = await db.memory.listRecords(session.sessionId);
    expect(records.map((r) => [r.generation, r.seq, r.kind])).toEqual([
      [1, 0, "user"],
      [1, 1, "assistant"],
    ]);
    // The previous generation is kept as it was (its records are what its publications point at).
    expect((await db.memory.listRecords(session.sessionId, { generation: 0 })).length).toBe(6);
    // Its open turn ended; nothing past the prefix will be published from it.
    const states = await db.memory.pool.query(
      "SELECT turn_id, state, publication_state FROM optchat.turns WHERE session_id = $1::text AND generation = 0 ORDER BY turn_id",
      [session.sessionId],
    );
    expect(states.rows.find((r) => r.turn_id === "t3")).toMatchObject({
      state: "interrupted",
      publication_state: "none",
    });

    const readiness = await db.memory.settle(session.sessionId, { timeoutMs: 30_000 });
    expect(readiness.ready).toBe(true);
    const view = JSON.stringify((await db.memory.view(session.sessionId)).lines);
    expect(view).toContain("REWMARK-1");
    expect(view).not.toContain("REWMARK-2");

    // The next turn continues the new generation after the prefix, and its memory holds none of the reverted text.
    const next = await db.memory.admitTurn({ sessionId: session.sessionId, turnId: "t4", query: "REWMARK-4 again" });
    expect(next.generation).toBe(1);
    expect(next.snapshot.ownBoundary).toBe(2);
    const context = await db.memory.assembleContext({ sessionId: session.sessionId, turnId: "t4" }, WINDOW);
    const own = context.blocks
      .filter((b) => b.name !== "shared_memory")
      .map((b) => b.text)
      .join("\n");
    expect(own).toContain("REWMARK-1");
    expect(own).not.toMatch(/REWMARK-[23]/);
    await turn(session, "t4", ["REWMARK-4 again", "REWMARK-4 answer"]);
    await eventually(
      async () =>
        (await count("SELECT count(*) AS n FROM optchat.publications WHERE session_id = $1::text AND generation = 1", [
          session.sessionId,
        ])) === 1
          ? true
          : undefined,
      30_000,
      "the new generation's publication",
    );

    // Another session of the scope: the reverted turn is a removed marker in its shared memory, and no search or
    // zoom finds its words; the retained turn is there.
    const other = await db.memory.openSession({ host: "test", hostSessionId: "O", projectId: "prj_rewind" });
    await db.memory.settle(other.sessionId, { timeoutMs: 30_000 });
    await eventually(
      async () => {
        const probe = await db.memory.previewContext(other.sessionId, WINDOW);
        const shared = probe.blocks.find((b) => b.name === "shared_memory")?.text ?? "";
        return shared.includes("REWMARK-4") && !shared.includes("unbuilt") ? shared : undefined;
      },
      30_000,
      "the shared view rebuilt over the retired turn",
    );
    await db.memory.admitTurn({ sessionId: other.sessionId, turnId: "o1", query: "what was reverted?" });
    const foreign = await db.memory.assembleContext({ sessionId: other.sessionId, turnId: "o1" }, WINDOW);
    const shared = foreign.blocks.find((b) => b.name === "shared_memory")?.text ?? "";
    expect(shared).toContain("REWMARK-1");
    expect(shared).not.toMatch(/REWMARK-[23]/);
    expect(shared).toContain("this turn was reverted in its session");
    const found = await db.memory.search({ sessionId: other.sessionId, turnId: "o1" }, { query: "REWMARK-2 reverted" });
    expect(JSON.stringify(found)).not.toContain("REWMARK-2");
    const kept = await db.memory.search({ sessionId: other.sessionId, turnId: "o1" }, { query: "REWMARK-1 kept" });
    expect(JSON.stringify(kept)).toContain("REWMARK-1");

    const audit = await db.memory.audit();
    expect(audit.violations).toEqual([]);
  });
});
