import { describe, expect, it } from "vitest";
import type { HostMessage } from "../../plugin/opencode/messages.js";
import { EPOCH_LIMITS } from "../../plugin/request/cache-epoch.js";
import { applyEpoch, type EpochRequest, startEpoch } from "../../plugin/request/epoch-layout.js";
import { memoryMessage, withLeadingText } from "../../plugin/request/memory-message.js";
import { estimateTokens } from "../../src/core/context.js";
import type { AssembledContext } from "../../src/memory/index.js";

/** A session's cache epoch over OpenCode's messages (plugin/request/epoch-layout.ts, docs/caching.md). */

const text = (id: string, role: string, body: string): HostMessage => ({
  info: { id, sessionID: "ses", role },
  parts: [{ id: `${id}-p`, messageID: id, sessionID: "ses", type: "text", text: body }],
});

const sharedLine = (k: number, who: string) => `pub:${k}+1|[turn completed] user: ${who} turn ${k}`;

function contextWith(lines: readonly string[], own: readonly number[], highWater = lines.length): AssembledContext {
  const pieces = ['<shared_memory scope="project:p">\nintro', ...lines, "</shared_memory>"];
  return {
    historyComplete: false,
    reused: false,
    blocks: [{ name: "shared_memory", text: pieces.join("\n"), pieces, tokens: 0, lines: lines.length }],
    tokens: { available: 0, used: 0, shared: 0, own: 0, previous: 0 },
    snapshot: { publicationHighWater: highWater } as never,
    omitted: [],
    ownPublications: own,
  };
}

function request(
  messages: HostMessage[],
  turnId: string,
  context: AssembledContext,
  fits = true,
): [HostMessage[], EpochRequest] {
  return [
    messages,
    {
      turnId,
      limits: EPOCH_LIMITS,
      requestIndex: messages.length - 1,
      replaceable: messages.length - 1,
      context,
      tokensOf: (m) => estimateTokens(JSON.stringify(m.parts)),
      estimate: estimateTokens,
      fits: () => fits,
    },
  ];
}

/** The text a provider sees, message by message. */
const wire = (messages: readonly HostMessage[]) =>
  messages.map((m) => `${m.info.role}:${m.parts.map((p) => p.text ?? "").join("¦")}`);

describe("cache epochs over OpenCode's messages", () => {
  const older = [text("u0", "user", "an old prompt"), text("a0", "assistant", "an old reply")];
  const memory = memoryMessage(
    "ses",
    "t1",
    ["HEAD\n\n", "<shared_memory>\n", `${sharedLine(0, "other")}\n`],
    {
      id: "u1",
      sessionID: "ses",
      role: "user",
      time: { created: 1 },
    },
    1,
  );

  function begin() {
    // Turn 1's request as the adapter built it: the memory, then its prompt led by the volatile part.
    const epoch = startEpoch(
      "t1",
      memory,
      10,
      { id: "u1", text: "VOLATILE\n\n", tokens: 3 },
      contextWith([sharedLine(0, "other")], []),
      [],
    );
    const sent = [memory, withLeadingText(text("u1", "user", "prompt 1"), "VOLATILE\n\n", "t1")];
    return { epoch, sent };
  }

  it("re-sends the previous turn's request as the head of the next, then appends others' new lines to the prompt", () => {
    const { epoch, sent } = begin();
    const history = [...older, text("u1", "user", "prompt 1"), text("a1", "assistant", "reply 1")];
    // Turn 2: s1's own turn 1 (pub 1) and another session's turn (pub 2) were published meanwhile.
    const context2 = contextWith([sharedLine(0, "other"), sharedLine(1, "own"), sharedLine(2, "other")], [1]);
    const [turn2, req2] = request([...history, text("u2", "user", "prompt 2")], "t2", context2);
    expect(applyEpoch(epoch, turn2, req2)).toBeUndefined();
    expect(wire(turn2).slice(0, wire(sent).length)).toEqual(wire(sent));
    const lead = turn2.at(-1)?.parts[0]?.text as string;
    expect(lead).toContain("<shared_memory_update>");
    expect(lead).toContain(sharedLine(2, "other"));
    expect(lead).not.toContain("own turn 1");
    expect(turn2).toHaveLength(1 + 3); // the memory, then turn 1 and the prompt: the older messages are replaced

    // A later step of turn 2 sends the same bytes, and turn 3 begins with all of turn 2's request.
    const [step, stepReq] = request([...history, text("u2", "user", "prompt 2")], "t2", context2);
    expect(applyEpoch(epoch, step, stepReq)).toBeUndefined();
    expect(wire(step)).toEqual(wire(turn2));
    const [turn3, req3] = request(
      [...history, text("u2", "user", "prompt 2"), text("a2", "assistant", "reply 2"), text("u3", "user", "prompt 3")],
      "t3",
      context2,
    );
    expect(applyEpoch(epoch, turn3, req3)).toBeUndefined();
    expect(wire(turn3).slice(0, wire(turn2).length)).toEqual(wire(turn2));
    // Nothing new since turn 2: the prompt goes as OpenCode wrote it.
    expect(wire(turn3).at(-1)).toBe("user:prompt 3");
  });

  it("ends the epoch when the kept history is too long, the window is short, or its first message is gone", () => {
    const long = text("a1", "assistant", "x".repeat(4 * EPOCH_LIMITS.keptTokens));
    const { epoch } = begin();
    const [tooLong, req] = request(
      [...older, text("u1", "user", "prompt 1"), long, text("u2", "user", "p2")],
      "t2",
      contextWith([], []),
    );
    const before = wire(tooLong);
    expect(applyEpoch(epoch, tooLong, req)).toMatch(/native history kept/);
    expect(wire(tooLong)).toEqual(before);

    const [short, shortReq] = request(
      [...older, text("u1", "user", "prompt 1"), text("u2", "user", "p2")],
      "t2",
      contextWith([sharedLine(0, "other")], []),
      false,
    );
    expect(applyEpoch(begin().epoch, short, shortReq)).toMatch(/not fit/);

    const [gone, goneReq] = request([text("u9", "user", "p9")], "t9", contextWith([], []));
    expect(applyEpoch(begin().epoch, gone, goneReq)).toMatch(/no longer in the history/);
  });
});
