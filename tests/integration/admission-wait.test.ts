import { afterAll, describe, expect, it } from "vitest";
import { resolveConfig } from "../../src/memory/config.js";
import { type Memory, openMemory } from "../../src/memory/service.js";
import { type RunningCompactor, startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import { messageWriter, useTestMemory } from "../helpers.js";

/**
 * A prompt's turn pins its snapshot at admission, so a prompt that follows another session's finished turn by moments
 * (`opencode run` after `opencode run`) waits for that turn's publication, bounded by OPTCHAT_ADMISSION_WAIT_MS from
 * the turn's end, while a compactor worker is alive to publish it. The file's memory waits up to 600 s: a wait that
 * should not happen fails the test by its timeout.
 */
const db = useTestMemory({ admissionWaitMs: 600_000 });
const writeMessage = messageWriter(db, Date.UTC(2026, 11, 7, 9));
let worker: RunningCompactor | undefined;
let bounded: Memory | undefined;

afterAll(async () => {
  await worker?.stop();
  await bounded?.close();
});

let project = 0;
async function twoSessions(): Promise<[Session, Session]> {
  project += 1;
  const open = (name: string) =>
    db.memory.openSession({ host: "test", hostSessionId: `${name}${project}`, projectId: `prj_wait_${project}` });
  return [await open("A"), await open("B")];
}

/** A compactor worker that beats but has not taken the job yet (a busy or slow one): someone will publish. */
async function aliveWorker(id: string): Promise<void> {
  await db.memory.pool.query(
    `INSERT INTO optchat.compactor_workers (worker_id, host_name, pid, runs_in, summarizer)
     VALUES ($1::text, 'test', 1, 'test', 'fake')`,
    [id],
  );
}

/** A whole turn of `session`, finished and left to the compactor (none runs unless a test starts one). */
async function finishedTurn(session: Session, turnId: string, decision: string): Promise<void> {
  await db.memory.admitTurn({ sessionId: session.sessionId, turnId, query: decision });
  await writeMessage(session, turnId, "user", decision);
  await writeMessage(session, turnId, "assistant", `Noted: ${decision}`);
  await db.memory.finishTurn({ sessionId: session.sessionId, turnId }, "completed");
}

describe("a prompt admitted right after another session's turn ended", () => {
  it("waits for that turn's publication, so its snapshot holds it", async () => {
    const [a, b] = await twoSessions();
    await aliveWorker("slow-1");
    await finishedTurn(a, "a1", "The release branch is trunk-7.");
    const admission = db.memory.admitTurn({ sessionId: b.sessionId, turnId: "b1", awaitRecent: true });
    // The compactor starts only now: the admission cannot have pinned a snapshot with A's publication before.
    worker = await startWorker(db.memory, db.config, () => {});
    const turn = await admission;
    expect(turn.snapshot.publicationHighWater).toBe(1);
    expect(turn.snapshot.sharedViewRevision).not.toBeNull();
    const a1 = await db.memory.getTurn({ sessionId: a.sessionId, turnId: "a1" });
    expect(a1.publicationState).toBe("published");
    await worker.stop();
    worker = undefined;
  });

  it("does not wait when no compactor worker is alive to publish it", async () => {
    await db.memory.pool.query("UPDATE optchat.compactor_workers SET stopped_at = now()");
    const [a, b] = await twoSessions();
    await finishedTurn(a, "a1", "Tokens expire after an hour.");
    const turn = await db.memory.admitTurn({ sessionId: b.sessionId, turnId: "b1", awaitRecent: true });
    expect(turn.snapshot.publicationHighWater).toBe(0);
    await aliveWorker("slow-2");
  });

  it("is admitted without it once the turn's end is OPTCHAT_ADMISSION_WAIT_MS old (a stalled compactor)", async () => {
    const [a, b] = await twoSessions();
    await finishedTurn(a, "a1", "The cache is keyed by tenant.");
    bounded = await openMemory(resolveConfig({ overrides: { ...db.config, admissionWaitMs: 300 } }));
    const turn = await bounded.admitTurn({ sessionId: b.sessionId, turnId: "b1", awaitRecent: true });
    expect(turn.state).toBe("active");
    expect(turn.snapshot.publicationHighWater).toBe(0);
    expect((await db.memory.getTurn({ sessionId: a.sessionId, turnId: "a1" })).publicationState).toBe("pending");
  });

  it("does not wait for a turn that ended longer ago, for its own session's turns, on re-admission, or unasked", async () => {
    const [a, b] = await twoSessions();
    await finishedTurn(a, "old", "Logs go to the audit bucket.");
    await db.memory.pool.query(
      "UPDATE optchat.turns SET finished_at = finished_at - interval '1 hour' WHERE session_id = $1::text",
      [a.sessionId],
    );
    expect((await db.memory.admitTurn({ sessionId: b.sessionId, turnId: "b1", awaitRecent: true })).state).toBe(
      "active",
    );
    // Now a recent unpublished turn of A: B's re-admission, A's own next turn, and an admission that does not ask all
    // go ahead at once (each would wait 600 s otherwise).
    await finishedTurn(a, "recent", "Deploys freeze on Fridays.");
    expect((await db.memory.admitTurn({ sessionId: b.sessionId, turnId: "b1", awaitRecent: true })).turnId).toBe("b1");
    expect((await db.memory.admitTurn({ sessionId: a.sessionId, turnId: "a2", awaitRecent: true })).state).toBe(
      "active",
    );
    await db.memory.finishTurn({ sessionId: b.sessionId, turnId: "b1" }, "completed");
    expect((await db.memory.admitTurn({ sessionId: b.sessionId, turnId: "b2" })).state).toBe("active");
  }, 20_000);
});
