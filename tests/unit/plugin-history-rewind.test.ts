import { describe, expect, it } from "vitest";
import { RequestSlice } from "../../plugin/request/slice.js";
import { applyRewind, type RewoundState } from "../../plugin/turns/history-rewind.js";

/** A committed revert applied to the adapter's per-session state (plugin/turns/history-rewind.ts). */

type FakeSession = { readonly sessionId: string; readonly currentGeneration: number };

function stateWith(
  turns: { turnId: string; admitted: boolean; finished: boolean }[],
): RewoundState<FakeSession> & { request: RequestSlice } {
  const request = new RequestSlice();
  request.assembled = { turnId: "msg_2" } as never;
  request.prepared = { turnId: "msg_2" } as never;
  request.epoch = { turnId: "msg_1" } as never;
  return {
    session: { sessionId: "mem_s", currentGeneration: 0 },
    turns: new Map(turns.map((t) => [t.turnId, { ...t }])),
    turnOfMessage: new Map(turns.map((t) => [t.turnId, t.turnId])),
    pinned: new Map(turns.map((t) => [t.turnId, {}])),
    ingested: new Set(["msg_1", "msg_2", "msg_3"]),
    seqs: new Map([
      ["msg_1", 0],
      ["msg_2", 2],
    ]),
    seqsLoaded: true,
    request,
  };
}

describe("applyRewind", () => {
  it("drops the removed turns and every cache of the old generation, and moves to the new one", () => {
    const state = stateWith([
      { turnId: "msg_1", admitted: true, finished: true },
      { turnId: "msg_2", admitted: true, finished: true },
      // The prompt that commits the revert: not admitted yet (its admission rewinds first).
      { turnId: "msg_4", admitted: false, finished: false },
    ]);
    const session = state.session as FakeSession;
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
    const decision = applyRewind(state, state.session as FakeSession, ["msg_2"], 1);
    expect(decision).toMatchObject({ type: "disable", reason: expect.stringContaining("msg_5") });
    // Nothing was changed: the session stays on its old generation, with memory off.
    expect(state.session?.currentGeneration).toBe(0);
    expect(state.seqsLoaded).toBe(true);
  });
});
