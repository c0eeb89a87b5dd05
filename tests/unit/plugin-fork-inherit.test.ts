import { describe, expect, it } from "vitest";
import type { HostMessage } from "../../plugin/opencode/messages.js";
import { copiedHistoryEvents, looksLikeFork } from "../../plugin/turns/fork-inherit.js";

/** A fork's copies as the plugin maps them (plugin/turns/fork-inherit.ts); the matching itself is tests/integration. */

const S = "ses_fork";
const where = { sessionId: "mem_child", hostSessionId: S, projectId: "prj", fallbackAt: 5 };

function user(id: string, text: string, created: number): HostMessage {
  return {
    info: { id, sessionID: S, role: "user", time: { created } },
    parts: [{ id: `prt_${id}`, messageID: id, sessionID: S, type: "text", text }],
  };
}

function answer(id: string, parentID: string, text: string, completed?: number): HostMessage {
  return {
    info: {
      id,
      sessionID: S,
      role: "assistant",
      parentID,
      finish: "stop",
      time: completed === undefined ? { created: 1 } : { created: 1, completed },
    },
    parts: [{ id: `prt_${id}`, messageID: id, sessionID: S, type: "text", text }],
  };
}

describe("a fork's copied history", () => {
  it("maps the finished messages before the prompt with the live path's keys, and nothing of the prompt", () => {
    const transcript = [
      user("msg_a", "first question", 10),
      answer("msg_b", "msg_a", "first answer", 20),
      user("msg_c", "second question", 30),
      answer("msg_d", "msg_c", "never finished"),
      user("msg_p", "the prompt", 40),
    ];
    const events = copiedHistoryEvents(transcript, "msg_p", where);
    expect(events.map((e) => [e.turnId, e.kind, e.content, e.finalization.messageId, e.finalization.partId])).toEqual([
      ["msg_a", "user", "first question", "msg_a", "msg_a:user"],
      ["msg_a", "assistant", "first answer", "msg_b", "prt_msg_b"],
      ["msg_c", "user", "second question", "msg_c", "msg_c:user"],
    ]);
    expect(events[1]).toMatchObject({
      sessionId: "mem_child",
      occurredAt: new Date(20).toISOString(),
      finalization: { hostSessionId: S, revision: 0 },
      attributes: { hostMessageId: "msg_b", hostPartId: "prt_msg_b" },
    });
  });

  it("has nothing to offer when the prompt is the session's first message", () => {
    expect(copiedHistoryEvents([user("msg_p", "hello", 1)], "msg_p", where)).toEqual([]);
    expect(copiedHistoryEvents([], "msg_p", where)).toEqual([]);
  });

  it("knows OpenCode's fork title", () => {
    expect(looksLikeFork("parser rewrite (fork #1)")).toBe(true);
    expect(looksLikeFork("parser rewrite (fork #12)")).toBe(true);
    expect(looksLikeFork("parser rewrite")).toBe(false);
    expect(looksLikeFork("(fork #1) parser")).toBe(false);
    expect(looksLikeFork(undefined)).toBe(false);
  });
});
