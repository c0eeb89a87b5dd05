import { describe, expect, it } from "vitest";
import { sessionHistory } from "../../plugin/opencode/history.js";
import type { HostMessage, HostMessageInfo, HostPart } from "../../plugin/opencode/messages.js";

/** Stored OpenCode sessions read back as the plugin's turns (plugin/opencode/history.ts), on the shapes of facts §1-2 and §8. */

let clock = 1_000;
const S = "ses_h";

function user(id: string, text: string, extra: Partial<HostPart> = {}): HostMessage {
  clock += 10;
  return {
    info: { id, sessionID: S, role: "user", time: { created: clock } },
    parts: [{ id: `prt_${id}`, messageID: id, sessionID: S, type: "text", text, ...extra }],
  };
}

function step(id: string, parentID: string, end: Partial<HostMessageInfo> | "unfinished", text = `reply ${id}`) {
  clock += 10;
  const created = clock;
  clock += 10;
  const info: HostMessageInfo =
    end === "unfinished"
      ? { id, sessionID: S, role: "assistant", parentID, time: { created } }
      : { id, sessionID: S, role: "assistant", parentID, time: { created, completed: clock }, ...end };
  return { info, parts: [{ id: `prt_${id}`, messageID: id, sessionID: S, type: "text", text }] } as HostMessage;
}

/** A compaction request: a user message OpenCode makes itself, with a compaction part. */
function compactionRequest(id: string): HostMessage {
  clock += 10;
  return {
    info: { id, sessionID: S, role: "user", time: { created: clock } },
    parts: [{ id: `prt_${id}`, messageID: id, sessionID: S, type: "compaction" }],
  };
}

const outcomes = (messages: HostMessage[]) => sessionHistory(messages).turns.map((turn) => [turn.turnId, turn.outcome]);

describe("sessionHistory", () => {
  it("makes a turn per prompt, with its steps, and ends it with its terminal step's outcome", () => {
    const history = sessionHistory([
      user("msg_1", "hello"),
      step("msg_2", "msg_1", { finish: "tool-calls" }),
      step("msg_3", "msg_1", { finish: "stop" }),
      user("msg_4", "ERROR400"),
      step("msg_5", "msg_4", { error: { name: "APIError", data: { message: "bad" } } }),
      user("msg_6", "abort me"),
      step("msg_7", "msg_6", { error: { name: "MessageAbortedError" } }),
    ]);
    expect(history.turns.map((t) => [t.turnId, t.outcome, t.messages.map((m) => m.messageId)])).toEqual([
      ["msg_1", "completed", ["msg_1", "msg_2", "msg_3"]],
      ["msg_4", "failed", ["msg_4", "msg_5"]],
      ["msg_6", "interrupted", ["msg_6", "msg_7"]],
    ]);
    expect(history.turns[0]?.query).toBe("hello");
    // The same records the plugin makes: the user message whole, the step's text, the failure as a note.
    expect(history.turns[1]?.messages[1]?.drafts.map((d) => d.kind)).toEqual(["assistant", "note"]);
    // Stamped as the plugin stamps them: creation for the prompt, completion for a step.
    expect(history.turns[0]?.messages[2]?.at).toBeGreaterThan(history.turns[0]?.messages[1]?.at as number);
  });

  it("ends queued prompts answered together with the answer's outcome", () => {
    // msg_3 and msg_4 were typed while msg_2 (created before them) was still running; one step answers both.
    clock += 10;
    const running: HostMessage = {
      info: { id: "msg_2", sessionID: S, role: "assistant", parentID: "msg_1", time: { created: clock } },
      parts: [],
    };
    const messages = [user("msg_1", "first"), running, user("msg_3", "second"), user("msg_4", "third")];
    (running.info as { time: { completed?: number } }).time.completed = clock + 5;
    (running.info as { finish?: string }).finish = "tool-calls";
    messages.push(step("msg_5", "msg_4", { finish: "stop" }));
    expect(outcomes(messages)).toEqual([
      ["msg_1", "completed"],
      ["msg_3", "completed"],
      ["msg_4", "completed"],
    ]);
  });

  it("ends a turn whose process was killed mid-step as interrupted, storing nothing of that step", () => {
    const history = sessionHistory([
      user("msg_1", "slow"),
      step("msg_2", "msg_1", "unfinished", ""),
      user("msg_3", "again, in a new process"),
      step("msg_4", "msg_3", { finish: "stop" }),
    ]);
    expect(history.turns.map((t) => [t.turnId, t.outcome, t.messages.length])).toEqual([
      ["msg_1", "interrupted", 1],
      ["msg_3", "completed", 2],
    ]);
    expect(history.notStored.unfinishedSteps).toBe(1);
  });

  it("ends a turn that stopped after tool calls (a rejected permission) as interrupted at the next prompt", () => {
    expect(
      outcomes([
        user("msg_1", "read /etc/hostname"),
        step("msg_2", "msg_1", { finish: "tool-calls" }),
        user("msg_3", "never mind"),
        step("msg_4", "msg_3", { finish: "stop" }),
      ]),
    ).toEqual([
      ["msg_1", "interrupted"],
      ["msg_3", "completed"],
    ]);
  });

  it("keeps OpenCode's own messages out: a compaction's summary and its Continue… go on in the turn", () => {
    const compaction = compactionRequest("msg_3");
    const history = sessionHistory([
      user("msg_1", "USAGE=97000 big"),
      step("msg_2", "msg_1", {}), // overflow: completed, no finish, no error
      compaction,
      step("msg_4", "msg_3", { summary: true, mode: "compaction", finish: "stop" }, "## Objective"),
      user("msg_5", "Continue if you have next steps, or stop and ask for clarification.", { synthetic: true }),
      step("msg_6", "msg_5", { finish: "stop" }),
    ]);
    expect(history.turns.map((t) => [t.turnId, t.outcome, t.messages.map((m) => m.messageId)])).toEqual([
      ["msg_1", "completed", ["msg_1", "msg_2", "msg_4", "msg_6"]],
    ]);
    expect(history.turns[0]?.messages[2]?.drafts[0]).toMatchObject({ kind: "note" });
    expect(history.notStored.hostMessages).toBe(2);
  });

  it("gives a compaction asked for after a finished turn a turn of its own, as the plugin's continuation turn", () => {
    const compaction = compactionRequest("msg_3");
    expect(
      outcomes([
        user("msg_1", "hello"),
        step("msg_2", "msg_1", { finish: "stop" }),
        compaction,
        step("msg_4", "msg_3", { summary: true, mode: "compaction", finish: "stop" }),
      ]),
    ).toEqual([
      ["msg_1", "completed"],
      ["msg_3", "interrupted"],
    ]);
  });

  it("has no turn for a session without prompts", () => {
    expect(sessionHistory([]).turns).toEqual([]);
  });
});
