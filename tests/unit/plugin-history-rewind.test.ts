import { describe, expect, it } from "vitest";
import { RequestSlice } from "../../plugin/request/slice.js";
import { applyRewind } from "../../plugin/turns/history-rewind.js";
import { rewoundTo } from "../../plugin/turns/session-open.js";
import { newSessionState, type SessionState } from "../../plugin/turns/session-state.js";
import {
  firstIngestion,
  markAdmitted,
  markFinished,
  noteSeq,
  openContinuation,
  setSeqsLoaded,
} from "../../plugin/turns/turn-slice.js";
import type { Session } from "../../src/memory/index.js";

/** A committed revert applied to the adapter's per-session state (plugin/turns/history-rewind.ts). */

const session = { sessionId: "mem_s", currentGeneration: 0 } as Session;

function stateWith(turns: { turnId: string; admitted: boolean; finished: boolean }[]): SessionState & {
  request: RequestSlice;
} {
  const request = new RequestSlice();
  request.assembled = { turnId: "msg_2" } as never;
  request.prepared = { turnId: "msg_2" } as never;
  request.epoch = { turnId: "msg_1" } as never;
  const state = newSessionState("ses_rewind", request);
  rewoundTo(state, session, 0);
  for (const t of turns) {
    const turn = openContinuation(state, t.turnId);
    markAdmitted(state, t.turnId, {} as never);
    if (!t.admitted) Object.assign(turn, { admitted: false });
    if (t.finished) markFinished(turn);
  }
  for (const id of ["msg_1", "msg_2", "msg_3"]) firstIngestion(state, id);
  noteSeq(state, "msg_1", 0);
  noteSeq(state, "msg_2", 2);
  setSeqsLoaded(state, true);
  return state as SessionState & { request: RequestSlice };
}

describe("applyRewind", () => {
  it("drops the removed turns and every cache of the old generation, and moves to the new one", () => {
    const state = stateWith([
      { turnId: "msg_1", admitted: true, finished: true },
      { turnId: "msg_2", admitted: true, finished: true },
      // The prompt that commits the revert: not admitted yet (its admission rewinds first).
      { turnId: "msg_4", admitted: false, finished: false },
    ]);
    expect(applyRewind(state, session, ["msg_2", "msg_3"], 1)).toEqual({ type: "rewound" });
    expect(state.session).toEqual({ sessionId: "mem_s", currentGeneration: 1 });
    expect([...state.turns.keys()]).toEqual(["msg_1", "msg_4"]);
    expect([...state.turnOfMessage.keys()]).toEqual(["msg_1", "msg_4"]);
    expect([...state.pinned.keys()]).toEqual(["msg_1", "msg_4"]);
    expect([...state.ingested]).toEqual(["msg_1"]);
    expect(state.seqs.size).toBe(0);
    expect(state.seqsLoaded).toBe(false);
    expect(state.request.assembled).toBeUndefined();
    expect(state.request.prepared).toBeUndefined();
    expect(state.request.epoch).toBeUndefined();
  });

  it("switches memory off when a prompt was admitted in the generation the rewind ended", () => {
    const state = stateWith([
      { turnId: "msg_1", admitted: true, finished: true },
      { turnId: "msg_5", admitted: true, finished: false },
    ]);
    const decision = applyRewind(state, session, ["msg_2"], 1);
    expect(decision).toMatchObject({ type: "disable", reason: expect.stringContaining("msg_5") });
    // Nothing was changed: the session stays on its old generation, with memory off.
    expect(state.session?.currentGeneration).toBe(0);
    expect(state.seqsLoaded).toBe(true);
  });
});
