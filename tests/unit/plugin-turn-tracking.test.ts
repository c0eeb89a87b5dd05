import { describe, expect, it } from "vitest";
import type { HostMessageInfo } from "../../plugin/opencode/messages.js";
import { RequestSlice, requestSlice } from "../../plugin/request/slice.js";
import { newSessionState, type OpenTurn, type SessionState } from "../../plugin/turns/session-state.js";
import {
  decideIdle,
  IDLE_GRACE_MS,
  idleCheckWait,
  stoppedBeforePrompt,
  turnForAssistant,
  turnOfToolCall,
  turnsEndedBy,
} from "../../plugin/turns/tracking.js";
import { markBusy, markIdle, openContinuation } from "../../plugin/turns/turn-slice.js";

/** The turn state machine alone (plugin/turns/tracking.ts): decisions over a session's state, no database, no clock. */

function sessionWith(...turns: Array<[string, Partial<OpenTurn>?]>): SessionState {
  const state = newSessionState("ses_unit", new RequestSlice());
  for (const [id, fields] of turns) {
    // A turn tracked here (filed under its own message), with the fields the case needs.
    Object.assign(openContinuation(state, id), fields ?? {});
  }
  return state;
}

function assistant(id: string, parentID?: string): HostMessageInfo {
  return { id, sessionID: "ses_unit", role: "assistant", ...(parentID ? { parentID } : {}) } as HostMessageInfo;
}

describe("turnForAssistant", () => {
  it("maps a reply to its parent's turn, and a parentless one to the latest turn only while the session is busy", () => {
    const state = sessionWith(["msg_1"], ["msg_2"]);
    expect(turnForAssistant(state, assistant("msg_a", "msg_1"))).toBe("msg_1");
    expect(turnForAssistant(state, assistant("msg_b"))).toBeUndefined();
    markBusy(state);
    expect(turnForAssistant(state, assistant("msg_b"))).toBe("msg_2");
  });

  it("gives a continuation from an unknown message after the latest turn ended a turn of its own", () => {
    const state = sessionWith(["msg_1", { finished: true }]);
    markBusy(state);
    expect(turnForAssistant(state, assistant("msg_c", "msg_continue"))).toBe("msg_continue");
    expect(state.turns.get("msg_continue")?.admitted).toBe(false);
    expect(state.turnOfMessage.get("msg_continue")).toBe("msg_continue");
  });

  it("files an unknown parent under the running turn while it is still open", () => {
    const state = sessionWith(["msg_1"]);
    markBusy(state);
    expect(turnForAssistant(state, assistant("msg_c", "msg_synthetic"))).toBe("msg_1");
    expect(state.turnOfMessage.get("msg_synthetic")).toBe("msg_1");
    expect(state.turns.has("msg_synthetic")).toBe(false);
  });
});

describe("decideIdle", () => {
  it("decides nothing now while a step is in flight, and leaves that turn to the idle check", () => {
    const flying = {
      lastStep: { messageId: "msg_s", final: false, terminal: false },
      assistantMessages: new Set(["x"]),
    };
    const state = sessionWith(["msg_1", flying]);
    const decision = decideIdle(state);
    expect(decision.ending).toBeUndefined();
    expect(decision.undecided.map((t) => t.turnId)).toEqual(["msg_1"]);
  });

  it("ends a turn that had steps and no final answer as interrupted, or failed after a refusal", () => {
    const stopped = {
      lastStep: { messageId: "msg_s", final: true, terminal: false },
      assistantMessages: new Set(["x"]),
    };
    const state = sessionWith(["msg_1", stopped], ["msg_2"], ["msg_0", { finished: true }]);
    expect(decideIdle(state)).toEqual({
      undecided: [state.turns.get("msg_2")],
      ending: { turnIds: ["msg_1"], outcome: "interrupted" },
    });
    requestSlice(state).pendingError = "optchat: refused";
    expect(decideIdle(state).ending?.outcome).toBe("failed");
  });

  it("leaves a turn with a terminal step to that step's own job", () => {
    const ending = { ending: "completed" as const, assistantMessages: new Set(["x"]) };
    const state = sessionWith(["msg_1", ending]);
    expect(decideIdle(state)).toEqual({ undecided: [], ending: { turnIds: [], outcome: "interrupted" } });
  });
});

describe("idleCheckWait", () => {
  it("is due after the whole grace, waits out the rest before it, and drops the check once the session went busy", () => {
    expect(idleCheckWait(undefined, 10_000)).toBeUndefined();
    expect(idleCheckWait(10_000, 10_000 + IDLE_GRACE_MS)).toBe(0);
    expect(idleCheckWait(10_000, 10_000 + IDLE_GRACE_MS + 1)).toBe(0);
    expect(idleCheckWait(10_000, 11_000)).toBe(IDLE_GRACE_MS - 1_000);
  });
});

describe("turnsEndedBy", () => {
  it("ends the answered turn with every open turn of an earlier message, in the host's id order", () => {
    // Inserted in the order admissions finished (3 before 2), ended in the order of their ids.
    const state = sessionWith(["msg_1", { finished: true }], ["msg_3"], ["msg_2"], ["msg_4"]);
    expect(turnsEndedBy(state, "msg_3").map((t) => t.turnId)).toEqual(["msg_2", "msg_3"]);
  });
});

describe("stoppedBeforePrompt and turnOfToolCall", () => {
  it("counts open turns as stopped only when the session was idle at the prompt", () => {
    const state = sessionWith(["msg_1"], ["msg_2", { finished: true }]);
    expect(stoppedBeforePrompt(state)).toEqual([]);
    markIdle(state, 5);
    expect(stoppedBeforePrompt(state).map((t) => t.turnId)).toEqual(["msg_1"]);
  });

  it("runs a tool call in the calling message's turn, else in the latest", () => {
    const state = sessionWith(["msg_1", { assistantMessages: new Set(["msg_a"]) }], ["msg_2"]);
    expect(turnOfToolCall(state, "msg_a")?.turnId).toBe("msg_1");
    expect(turnOfToolCall(state, "msg_unknown")?.turnId).toBe("msg_2");
    expect(turnOfToolCall(state, undefined)?.turnId).toBe("msg_2");
    expect(turnOfToolCall(newSessionState("ses_empty", new RequestSlice()), "msg_a")).toBeUndefined();
  });
});
