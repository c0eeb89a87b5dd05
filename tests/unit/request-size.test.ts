import { describe, expect, it } from "vitest";
import type { HostMessage } from "../../plugin/opencode/messages.js";
import { measuredSize, noteSent, rememberedSize } from "../../plugin/request/request-size.js";
import { estimateTokens } from "../../src/core/context.js";

const model = { providerID: "p", modelID: "m" };

function user(id: string, text: string): HostMessage {
  return {
    info: { id, sessionID: "s", role: "user", agent: "build", model },
    parts: [{ id: `${id}-p`, messageID: id, sessionID: "s", type: "text", text }],
  };
}

/** An assistant step with a bash result, and (once answered) the input OpenCode reported for its request. */
function step(id: string, output: string, reported?: number): HostMessage {
  const info = {
    id,
    sessionID: "s",
    role: "assistant",
    ...(reported ? { tokens: { input: 3, cache: { read: reported - 3 } } } : {}),
  };
  return {
    info,
    parts: [
      {
        id: `${id}-t`,
        messageID: id,
        sessionID: "s",
        type: "tool",
        tool: "bash",
        callID: `${id}-c`,
        state: { status: "completed", input: { command: "x" }, output },
      },
    ],
  };
}

describe("the request's real size from OpenCode's reports (issue 36)", () => {
  it("fits the instructions and the tokens per estimated token through the session's reported steps", () => {
    const state = {};
    const [overhead, ratio] = [9_000, 0.85];
    const report = (sent: HostMessage[]) => {
      noteSent(state, sent);
      const e = noteSentEstimate(sent);
      return Math.round(overhead + ratio * e);
    };
    const u = user("u1", "do the task");
    expect(measuredSize(state, [u])).toBeUndefined();
    const r1 = report([u]);
    const a1 = step("a1", "x".repeat(3_000), r1);
    // One report: the ratio is taken as 1, the overhead is the rest.
    expect(measuredSize(state, [u, a1])).toEqual({ ratio: 1, overhead: r1 - noteSentEstimate([u]) });
    const r2 = report([u, a1]);
    const a2 = step("a2", "y".repeat(3_000), r2);
    const fitted = measuredSize(state, [u, a1, a2]);
    expect(fitted?.ratio).toBeCloseTo(ratio, 2);
    expect(Math.abs((fitted?.overhead ?? 0) - overhead)).toBeLessThan(3);
    // Another session of the same agent and model starts from it.
    expect(rememberedSize([user("u9", "other")])).toEqual(fitted);
    // A report that does not answer the request sent last is not taken.
    const stale = step("a3", "z", 1);
    expect(measuredSize(state, [u, a1, a2, user("u2", "meanwhile"), stale])).toEqual(fitted);
  });
});

/** What noteSent estimates for a request's messages (messageText: text, or tool name, input and output). */
function noteSentEstimate(messages: HostMessage[]): number {
  return messages.reduce((sum, m) => {
    let text = "";
    for (const p of m.parts) {
      if (p.type === "text") text += `${p.text ?? ""}\n`;
      else if (p.type === "tool")
        text += `${p.tool ?? ""} ${JSON.stringify(p.state?.input ?? null)}\n${p.state?.output ?? ""}\n`;
    }
    return sum + estimateTokens(text);
  }, 0);
}
