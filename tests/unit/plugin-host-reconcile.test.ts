import { describe, expect, it } from "vitest";
import type { HostMessage } from "../../plugin/opencode/messages.js";
import { repairPlan } from "../../plugin/turns/reconcile.js";

/** The pure repair plan of a turn another process left active, from OpenCode 1.18.33's stored transcript. */

const S = "ses_plan";

function user(id: string, text: string): HostMessage {
  return {
    info: { id, sessionID: S, role: "user", time: { created: 1 } },
    parts: [{ id: `prt_${id}`, messageID: id, sessionID: S, type: "text", text }],
  };
}

function step(id: string, parentID: string, end: Partial<HostMessage["info"]>, parts: HostMessage["parts"] = []) {
  return { info: { id, sessionID: S, role: "assistant", parentID, time: { created: 2 }, ...end }, parts };
}

const text = (messageID: string, value: string) => ({
  id: `prt_${messageID}`,
  messageID,
  sessionID: S,
  type: "text",
  text: value,
});

describe("repairPlan", () => {
  it("stores the finished steps optchat lacks, with the live path's keys, and takes the last step's outcome", () => {
    const transcript: HostMessage[] = [
      user("msg_1", "question"),
      step("msg_2", "msg_1", { finish: "tool-calls", time: { created: 2, completed: 3 } }, [
        {
          id: "prt_tool",
          messageID: "msg_2",
          sessionID: S,
          type: "tool",
          tool: "bash",
          callID: "call_1",
          state: { status: "completed", input: { command: "ls" }, output: "a\n" },
        },
      ]),
      step("msg_3", "msg_1", { finish: "stop", time: { created: 4, completed: 5 } }, [text("msg_3", "the answer")]),
      user("msg_4", "a later turn"),
      step("msg_5", "msg_4", { finish: "stop", time: { created: 6, completed: 7 } }, [text("msg_5", "later")]),
    ];
    const plan = repairPlan(transcript, "msg_1", new Set(["msg_1"]));
    expect(plan.outcome).toBe("completed");
    expect(plan.decided).toBe(true);
    expect(plan.messages.map((m) => [m.messageId, m.at, m.drafts.map((d) => d.partId)])).toEqual([
      ["msg_2", 3, ["prt_tool:call", "prt_tool:result"]],
      ["msg_3", 5, ["prt_msg_3"]],
    ]);
  });

  it("stores the user message when it is missing too, and skips what is stored", () => {
    const transcript = [
      user("msg_1", "question"),
      step("msg_2", "msg_1", { finish: "stop", time: { created: 2, completed: 3 } }, [text("msg_2", "answer")]),
    ];
    expect(repairPlan(transcript, "msg_1", new Set()).messages.map((m) => m.drafts[0]?.partId)).toEqual([
      "msg_1:user",
      "prt_msg_2",
    ]);
    const all = repairPlan(transcript, "msg_1", new Set(["msg_1", "msg_2"]));
    expect(all).toMatchObject({ messages: [], outcome: "completed" });
  });

  it("reads an unfinished last step, a step that went on, an error and an abort as OpenCode means them", () => {
    const killed = [user("msg_1", "q"), step("msg_2", "msg_1", {}, [text("msg_2", "")])];
    // Interrupted for lack of a final step: not decided by the transcript (a start-time pass leaves such turns alone).
    expect(repairPlan(killed, "msg_1", new Set(["msg_1"]))).toMatchObject({
      messages: [],
      outcome: "interrupted",
      decided: false,
    });
    const wentOn = [user("msg_1", "q"), step("msg_2", "msg_1", { finish: "tool-calls", time: { completed: 3 } })];
    expect(repairPlan(wentOn, "msg_1", new Set(["msg_1"]))).toMatchObject({ outcome: "interrupted", decided: false });
    const failed = [
      user("msg_1", "q"),
      step("msg_2", "msg_1", { error: { name: "APIError", data: { message: "bad" } }, time: { completed: 3 } }),
    ];
    const plan = repairPlan(failed, "msg_1", new Set(["msg_1"]));
    expect(plan.outcome).toBe("failed");
    expect(plan.messages[0]?.drafts.map((d) => d.partId)).toEqual(["msg_2:error"]);
    const aborted = [
      user("msg_1", "q"),
      step("msg_2", "msg_1", { error: { name: "MessageAbortedError" }, time: { completed: 3 } }),
    ];
    // An abort is the turn's own final step: interrupted, and decided.
    expect(repairPlan(aborted, "msg_1", new Set(["msg_1"]))).toMatchObject({ outcome: "interrupted", decided: true });
    expect(repairPlan([user("msg_9", "other")], "msg_1", new Set())).toMatchObject({
      outcome: "interrupted",
      decided: false,
    });
  });
});
