import { describe, expect, it } from "vitest";
import { readHostEvent } from "../../plugin/opencode/events.js";

/** OpenCode's bus events as the adapter reads them (plugin/opencode/events.ts); the shapes are OpenCode 1.18.33's. */
describe("readHostEvent", () => {
  it("reads the events the adapter acts on", () => {
    const part = { id: "prt_1", messageID: "msg_1", sessionID: "ses_1", type: "text", text: "x" };
    expect(readHostEvent({ type: "message.part.updated", properties: { part } })).toEqual({ type: "part", part });
    const info = { id: "msg_2", sessionID: "ses_1", role: "assistant" };
    expect(readHostEvent({ type: "message.updated", properties: { info } })).toEqual({ type: "assistant", info });
    expect(
      readHostEvent({ type: "session.created", properties: { info: { id: "ses_2", title: "t (fork #1)" } } }),
    ).toEqual({ type: "created", info: { id: "ses_2", title: "t (fork #1)" } });
    expect(readHostEvent({ type: "session.deleted", properties: { info: { id: "ses_3" } } })).toEqual({
      type: "deleted",
      hostSessionId: "ses_3",
    });
    expect(
      readHostEvent({ type: "session.status", properties: { sessionID: "s", status: { type: "retry" } } }),
    ).toEqual({ type: "busy", hostSessionId: "s" });
    expect(readHostEvent({ type: "session.idle", properties: { sessionID: "s" } })).toEqual({
      type: "idle",
      hostSessionId: "s",
    });
    expect(
      readHostEvent({ type: "session.updated", properties: { info: { id: "s", revert: { messageID: "msg_9" } } } }),
    ).toEqual({ type: "updated", hostSessionId: "s", revertTo: "msg_9" });
    expect(readHostEvent({ type: "session.updated", properties: { info: { id: "s" } } })).toEqual({
      type: "updated",
      hostSessionId: "s",
      revertTo: undefined,
    });
    expect(readHostEvent({ type: "message.removed", properties: { sessionID: "s", messageID: "msg_9" } })).toEqual({
      type: "removed",
      hostSessionId: "s",
      messageId: "msg_9",
    });
  });

  it("ignores user messages, other events, and events missing what they are acted on by", () => {
    expect(
      readHostEvent({ type: "message.updated", properties: { info: { id: "m", sessionID: "s", role: "user" } } }),
    ).toBeUndefined();
    expect(readHostEvent({ type: "message.part.updated", properties: { part: { id: "p" } } })).toBeUndefined();
    expect(readHostEvent({ type: "session.status", properties: { status: { type: "idle" } } })).toBeUndefined();
    expect(readHostEvent({ type: "session.status", properties: { sessionID: "s", status: {} } })).toBeUndefined();
    expect(readHostEvent({ type: "session.deleted", properties: {} })).toBeUndefined();
    expect(readHostEvent({ type: "file.edited", properties: { file: "x" } })).toBeUndefined();
    expect(readHostEvent({})).toBeUndefined();
  });
});
