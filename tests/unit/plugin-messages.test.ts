import { describe, expect, it } from "vitest";
import { resolvePluginConfig } from "../../plugin/base/config.js";
import { projectScopeId } from "../../plugin/base/identity.js";
import {
  assistantRecordDrafts,
  type HostMessage,
  lastRequestIndex,
  replaceablePrefix,
  requestQuery,
  stepOutcome,
  withoutRetryTriggers,
  wouldBeRetried,
} from "../../plugin/opencode/messages.js";

const part = (fields: Record<string, unknown>) =>
  ({ id: "prt_1", messageID: "msg_a", sessionID: "ses_x", type: "text", ...fields }) as never;

describe("requestQuery", () => {
  it("keeps the user's words and drops harness-injected text", () => {
    const query = requestQuery([
      part({ text: "<system-reminder>Plan mode is active</system-reminder>\nadd a persistent queue" }),
      part({ text: "Called the Read tool with README.md", synthetic: true }),
      part({ text: "The server restarted while you were working on the previous task." }),
    ]);
    expect(query).toBe("add a persistent queue");
  });
});

describe("assistantRecordDrafts", () => {
  it("stores text, then each finished tool call with its result, and a note for a failed request", () => {
    const drafts = assistantRecordDrafts(
      { id: "msg_a", sessionID: "ses_x", role: "assistant", error: { name: "APIError", data: { message: "bad" } } },
      [
        part({ id: "p1", type: "reasoning", text: "hidden" }),
        part({ id: "p2", text: "Running it" }),
        part({
          id: "p3",
          type: "tool",
          tool: "bash",
          callID: "call_1",
          state: { status: "completed", input: { command: "ls" }, output: "a\nb" },
        }),
        part({ id: "p4", type: "tool", tool: "read", callID: "call_2", state: { status: "running", input: {} } }),
        part({ id: "p5", type: "tool", tool: "read", callID: "call_3", state: { status: "error", error: "denied" } }),
      ],
    );
    expect(drafts.map((d) => [d.kind, d.partId, d.toolCallId ?? null])).toEqual([
      ["assistant", "p2", null],
      ["tool_call", "p3:call", "call_1"],
      ["tool_result", "p3:result", "call_1"],
      ["tool_call", "p5:call", "call_3"],
      ["tool_result", "p5:result", "call_3"],
      ["note", "msg_a:error", null],
    ]);
    expect(drafts[2]?.content).toBe("a\nb");
    expect(drafts[4]?.content).toBe("error: denied");
    expect(drafts[5]?.content).toBe("The model request failed: APIError: bad");
  });
});

describe("stepOutcome", () => {
  const info = (fields: Record<string, unknown>) => ({ id: "m", sessionID: "s", role: "assistant", ...fields });
  it("follows OpenCode 1.18.33: completed marks final; abort interrupts, errors fail, tool-calls continue", () => {
    expect(stepOutcome(info({ finish: "stop" }))).toEqual({ final: false });
    expect(stepOutcome(info({ finish: "stop", time: { completed: 1 } }))).toEqual({
      final: true,
      terminal: true,
      outcome: "completed",
    });
    expect(stepOutcome(info({ finish: "tool-calls", time: { completed: 1 } }))).toEqual({
      final: true,
      terminal: false,
    });
    expect(stepOutcome(info({ time: { completed: 1 } }))).toEqual({ final: true, terminal: false });
    expect(stepOutcome(info({ finish: "unknown", time: { completed: 1 } }))).toEqual({ final: true, terminal: false });
    expect(stepOutcome(info({ finish: "stop", summary: true, time: { completed: 1 } }))).toEqual({
      final: true,
      terminal: false,
    });
    expect(stepOutcome(info({ error: { name: "MessageAbortedError" }, time: { completed: 1 } }))).toMatchObject({
      outcome: "interrupted",
    });
    expect(stepOutcome(info({ error: { name: "APIError" }, time: { completed: 1 } }))).toMatchObject({
      outcome: "failed",
    });
  });
});

describe("replaceablePrefix", () => {
  const message = (id: string, role = "user", synthetic = false): HostMessage => ({
    info: { id, sessionID: "s", role },
    parts: [{ id: `${id}-p`, messageID: id, sessionID: "s", type: "text", text: id, synthetic }],
  });
  it("replaces only messages sealed below the boundary and stops at the first one memory does not hold", () => {
    const messages = [message("u1"), message("a1", "assistant"), message("u2"), message("a2", "assistant")];
    const seqs = new Map([
      ["u1", 0],
      ["a1", 3],
      ["u2", 4],
    ]);
    expect(replaceablePrefix(messages, (id) => seqs.get(id), 4)).toBe(2);
    expect(replaceablePrefix(messages, (id) => seqs.get(id), 10)).toBe(3);
    // A message never ingested (a fork's copy) keeps everything from it on, verbatim.
    expect(replaceablePrefix(messages, (id) => (id === "u1" ? undefined : seqs.get(id)), 10)).toBe(0);
    expect(replaceablePrefix(messages, (id) => seqs.get(id), 0)).toBe(0);
  });
  it("counts a message with nothing to store as covered, such as the empty one a killed process leaves", () => {
    const empty: HostMessage = { info: { id: "k1", sessionID: "s", role: "assistant" }, parts: [] };
    const messages = [message("u1"), empty, message("u2")];
    const seqs = new Map([["u1", 0]]);
    expect(replaceablePrefix(messages, (id) => seqs.get(id), 5)).toBe(2);
  });
  it("finds the request among harness continuations", () => {
    const messages = [message("u1"), message("a1", "assistant"), message("c1", "user", true)];
    expect(lastRequestIndex(messages)).toBe(0);
  });
});

describe("resolvePluginConfig", () => {
  it("takes plugin options over the environment and freezes the result", () => {
    const config = resolvePluginConfig({ mode: "augment" }, { OPTCHAT_MODE: "replace", OPTCHAT_READINESS: "partial" });
    expect(config.plugin.mode).toBe("augment");
    expect(config.plugin.readiness).toBe("partial");
    expect(Object.isFrozen(config.plugin)).toBe(true);
  });
  it("names the option and the environment variable of a bad setting", () => {
    expect(() => resolvePluginConfig({}, { OPTCHAT_MODE: "merge" })).toThrow(
      /OPTCHAT_MODE \/ option mode \(environment variable OPTCHAT_MODE\): not replace or augment/,
    );
    expect(() => resolvePluginConfig({ leaseSecond: 3 }, {})).toThrow(/unknown option\(s\) leaseSecond/);
  });
});

describe("withoutRetryTriggers", () => {
  it("keeps OpenCode 1.18.33 from retrying our errors, without changing what the user reads", () => {
    const texts = [
      "optchat: memory is not ready (waited 15000 ms; 3 nodes pending): set OPTCHAT_READINESS=partial",
      "database unavailable: connect ECONNREFUSED 127.0.0.1:5432",
      "summarizer said: internal server error (HTTP 502), try again later; resource exhausted",
      "needs 4290 tokens, window 5240; request timed out",
    ];
    for (const text of texts) {
      expect(wouldBeRetried(text)).toBe(true);
      const safe = withoutRetryTriggers(text);
      expect(wouldBeRetried(safe)).toBe(false);
      expect(safe.replaceAll("\u2060", "")).toBe(text);
    }
  });
});

describe("projectScopeId", () => {
  it("shares a git project by OpenCode's project id, and directories outside git one by one", () => {
    expect(projectScopeId({ id: "4f8c590ca95a", worktree: "/repo", directory: "/repo/sub" })).toBe("4f8c590ca95a");
    const a = projectScopeId({ id: "global", worktree: "/", directory: "/tmp/a" });
    expect(a).toMatch(/^global-[0-9a-f]{16}$/);
    expect(projectScopeId({ id: "global", worktree: "/", directory: "/tmp/b" })).not.toBe(a);
    expect(projectScopeId({ id: "global", worktree: "/", directory: "/tmp/a" })).toBe(a);
  });
});
