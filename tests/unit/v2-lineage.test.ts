import { describe, expect, it } from "vitest";
import { copiedEvents, lineageOf } from "../../plugin/v2/lineage.js";
import { v2Records } from "../../plugin/v2/records.js";
import type { V2Context, V2StoredMessage } from "../../plugin/v2/v2-api.js";
import { windowOf } from "../../plugin/v2/window.js";

const AT = new Date("2026-12-07T10:00:00Z");

/** A fork's copies as `ctx.session.context` gave them (2.1.2, docs/opencode-v2-notes.md). */
const COPIES: V2StoredMessage[] = [
  { type: "user", id: "msg_u_4", text: "look TOOLS=[…] END", time: { created: 1 } },
  {
    type: "assistant",
    id: "msg_a_5",
    content: [
      {
        type: "tool",
        id: "call_1",
        name: "shell",
        state: { status: "completed", input: { command: "echo hi" }, content: [{ type: "text", text: "hi\n" }] },
      } as never,
      { type: "tool", id: "call_2", name: "shell", state: { status: "running", input: {} } } as never,
    ],
  },
  {
    type: "assistant",
    id: "msg_a_14",
    content: [
      { type: "text", text: "" },
      { type: "text", text: "done" },
    ],
  },
];

describe("V2 fork copies as ingest events", () => {
  it("maps the copies as the live events would be recorded (same kinds and contents, in order)", () => {
    const events = copiedEvents("mem_child", "ses_child", COPIES, AT);
    expect(events.map((e) => [e.kind, e.content, e.turnId, e.finalization?.partId])).toEqual([
      ["user", "look TOOLS=[…] END", "msg_u_4", "text"],
      ["tool_call", '{"command":"echo hi"}', "msg_u_4", "call-call_1"],
      ["tool_result", "hi\n", "msg_u_4", "result-call_1"],
      ["assistant", "done", "msg_u_4", "text-1"],
    ]);
    // The live path, fed the events V2 published for the parent's same messages, stores the same contents.
    const live = v2Records(() => AT);
    live.fromEvent("mem_parent", "msg_u", {
      type: "session.tool.input.started",
      data: { sessionID: "p", id: "call_1", name: "shell" },
    });
    const call = live.fromEvent("mem_parent", "msg_u", {
      type: "session.tool.called",
      data: { sessionID: "p", assistantMessageID: "msg_a", id: "call_1", input: { command: "echo hi" } },
    });
    const result = live.fromEvent("mem_parent", "msg_u", {
      type: "session.tool.success",
      data: { sessionID: "p", assistantMessageID: "msg_a", id: "call_1", content: [{ type: "text", text: "hi\n" }] },
    });
    expect([call?.content, call?.toolName, result?.content]).toEqual([events[1]?.content, "shell", events[2]?.content]);
  });

  it("a failed tool's copy is its error, flagged as the live failure is", () => {
    const failed: V2StoredMessage[] = [
      { type: "user", id: "u", text: "go" },
      {
        type: "assistant",
        id: "a",
        content: [
          { type: "tool", id: "c", name: "shell", state: { status: "error", input: {}, error: "boom" } } as never,
        ],
      },
    ];
    const [, , result] = copiedEvents("mem", "ses", failed, AT);
    expect([result?.kind, result?.content, result?.attributes]).toEqual(["tool_result", "boom", { error: true }]);
  });

  it("asks V2 for the copies only when the session is a fork, and names a subagent's parent", async () => {
    const asked: string[] = [];
    const ctx = (info: object) =>
      ({
        session: {
          hook: () => undefined,
          get: async () => info,
          context: async () => {
            asked.push("context");
            return COPIES;
          },
        },
      }) as unknown as V2Context;
    expect(await lineageOf(ctx({ id: "s", parentID: "ses_parent" }), "s")).toEqual({
      parentHostSessionId: "ses_parent",
      copies: [],
    });
    expect(asked).toEqual([]);
    expect((await lineageOf(ctx({ id: "s", fork: { sessionID: "ses_p" } }), "s")).copies).toHaveLength(3);
    expect(asked).toEqual(["context"]);
  });
});

describe("the model's window under V2", () => {
  const models = [
    { id: "fake", modelID: "fake", providerID: "fake", limit: { context: 16_000, output: 4_000 } },
    { id: "alias", modelID: "claude-x", providerID: "anthropic", limit: { context: 200_000 } },
    { id: "nolimit", providerID: "fake" },
  ];
  it("is the listed model's limit.context, matched by provider and id or model id", () => {
    expect(windowOf(models, { id: "fake", providerID: "fake" })).toBe(16_000);
    expect(windowOf(models, { id: "claude-x", providerID: "anthropic" })).toBe(200_000);
    expect(windowOf(models, { id: "fake", providerID: "other" })).toBeUndefined();
    expect(windowOf(models, { id: "nolimit", providerID: "fake" })).toBeUndefined();
  });
});
