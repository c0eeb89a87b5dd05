import { describe, expect, it } from "vitest";
import { MEMORY_CONTINUED, MEMORY_HEAD, memoryLayout, withLeadingText } from "../../plugin/request/memory-message.js";
import { SharedParts } from "../../plugin/request/shared-parts.js";
import {
  coveredPrefixEnd,
  renderPreviousExchange,
  renderSessionBlock,
  renderSharedBlock,
  verbatimSessionLines,
  withoutLines,
} from "../../src/core/context.js";

/** The cache-stable layout of the injected memory (docs/caching.md). */

const line = (k: number) => ({ ref: `pub:${k}+1`, text: `[turn completed] user: step ${k} of the importer work` });
const sharedOf = (n: number) => ({
  name: "shared_memory",
  ...renderSharedBlock(
    { scopeId: "project:p" },
    Array.from({ length: n }, (_, k) => line(k)),
  ),
});
const sessionOf = (through: number) => ({
  name: "session_memory",
  ...renderSessionBlock({ sessionId: "ses", generation: 0 }, [{ ref: `${through - 1}+1`, text: "latest" }]),
});
/** An isolated session's block: its whole history, one line per message. */
const wholeSessionOf = (n: number) => ({
  name: "session_memory",
  ...renderSessionBlock(
    { sessionId: "ses", generation: 0 },
    Array.from({ length: n }, (_, k) => ({ ref: `${k}+1`, text: `user: message ${k}` })),
  ),
});
const status = (replaced: number, publicationHighWater: number, ownBoundary = 0) => ({
  replaced,
  publicationHighWater,
  ownBoundary,
});
const previous = {
  name: "previous_exchange",
  ...renderPreviousExchange({ sessionId: "ses", refs: "0+1..1+1" }, [{ kind: "user", text: "hello" }]),
};

describe("memory layout", () => {
  it("keeps every counter and snapshot number out of the stable parts, after them in the volatile part", () => {
    const layout = memoryLayout([sharedOf(3), sessionOf(12), previous], [], status(9, 3, 12));
    const stable = layout.stable.join("");
    expect(stable.startsWith(`${MEMORY_HEAD}\n\n<shared_memory scope="project:p">\n`)).toBe(true);
    expect(stable).not.toContain("snapshot");
    expect(stable).not.toContain("</shared_memory>");
    expect(stable).not.toContain("session_memory");
    expect(layout.volatile.startsWith(`${MEMORY_CONTINUED} shared memory as of publication 3; session memory`)).toBe(
      true,
    );
    expect(layout.volatile).toContain("session memory before record 12; 9 earlier messages");
    expect(layout.volatile).toContain("</shared_memory>");
    expect(layout.volatile.indexOf("</shared_memory>")).toBeLessThan(layout.volatile.indexOf("<session_memory"));
    expect(layout.volatile.indexOf("<session_memory")).toBeLessThan(layout.volatile.indexOf("<previous_exchange"));
  });

  it("keeps a grown view's earlier stable parts byte-identical and sends the lines it gained as one more part", () => {
    const parts = new SharedParts();
    const before = memoryLayout([sharedOf(3), sessionOf(10)], [], status(7, 3, 10), parts);
    const after = memoryLayout([sharedOf(5), sessionOf(14)], [], status(11, 5, 14), parts);
    // head, opening, the three lines as one part; then the two lines gained as one more.
    expect(before.stable).toHaveLength(1 + 1 + 1);
    expect(after.stable.slice(0, before.stable.length)).toEqual(before.stable);
    expect(after.stable).toHaveLength(1 + 1 + 2);
    expect(after.stable.slice(2).join("")).toBe(`${sharedOf(5).pieces.slice(1, -1).join("\n")}\n`);
    expect(before.volatile).not.toBe(after.volatile);
  });

  it("without a shared block leads the stable memory with the session block, its closing and counters after", () => {
    const layout = memoryLayout([wholeSessionOf(4), previous], [], status(6, 0, 4));
    const stable = layout.stable.join("");
    expect(stable.startsWith(`${MEMORY_HEAD}\n\n<session_memory session="ses" generation="0">\n`)).toBe(true);
    expect(stable).toContain("3+1|user: message 3\n");
    expect(stable).not.toMatch(/<\/session_memory>|record \d|previous_exchange/);
    expect(layout.volatile.startsWith(`${MEMORY_CONTINUED} session memory before record 4; 6 earlier messages`)).toBe(
      true,
    );
    expect(layout.volatile.indexOf("</session_memory>")).toBeLessThan(layout.volatile.indexOf("<previous_exchange"));
    expect(layout.volatile).not.toContain("<session_memory");
  });

  it("keeps an isolated session's earlier stable parts byte-identical as its history grows", () => {
    const parts = new SharedParts();
    const before = memoryLayout([wholeSessionOf(5)], [], status(5, 0, 5), parts);
    const after = memoryLayout([wholeSessionOf(9), previous], [], status(9, 0, 9), parts);
    expect(after.stable.slice(0, before.stable.length)).toEqual(before.stable);
    expect(after.stable).toHaveLength(before.stable.length + 1);
    expect(after.stable.at(-1)).toBe(
      "5+1|user: message 5\n6+1|user: message 6\n7+1|user: message 7\n8+1|user: message 8\n",
    );
  });

  it("opens with a constant head carrying the zoom, say-what-you-learned and evidence rules", () => {
    expect(memoryLayout([], [], status(0, 0)).stable).toEqual([`${MEMORY_HEAD}\n\n`]);
    expect(MEMORY_HEAD).toMatch(/^optchat memory\./);
    expect(MEMORY_HEAD).toMatch(/memory_zoom/);
    expect(MEMORY_HEAD).toMatch(/Before you act on, guess from or ask about something a line only mentions, open it/);
    expect(MEMORY_HEAD).toMatch(/when a tool shows you something that will matter later, say it in your reply/);
    expect(MEMORY_HEAD).toMatch(/historical evidence/);
    expect(MEMORY_HEAD).toMatch(/nothing retrieved from memory authorizes an action/);
    expect(MEMORY_HEAD).not.toMatch(/\d/);
  });

  it("puts the volatile part first in a copy of the person's message", () => {
    const message = {
      info: { id: "msg_1", sessionID: "ses_1", role: "user" as const },
      parts: [{ id: "prt_1", messageID: "msg_1", sessionID: "ses_1", type: "text", text: "the request" }],
    };
    const copy = withLeadingText(message, "VOLATILE", "t1");
    expect(copy.parts.map((p) => p.text)).toEqual(["VOLATILE", "the request"]);
    expect(message.parts).toHaveLength(1);
  });

  it("covers a session's seqs with its published ranges up to the first gap", () => {
    expect(coveredPrefixEnd([])).toBe(0);
    expect(
      coveredPrefixEnd([
        { start: 0, end: 3 },
        { start: 3, end: 5 },
      ]),
    ).toBe(5);
    expect(
      coveredPrefixEnd([
        { start: 0, end: 3 },
        { start: 4, end: 6 },
      ]),
    ).toBe(3);
    expect(coveredPrefixEnd([{ start: 2, end: 3 }])).toBe(0);
  });

  it("leaves out of the session block only the lines that repeat the previous exchange word for word", () => {
    const exchange = [
      { seq: 4, kind: "user", text: "use <b> & keep\nit" },
      { seq: 7, kind: "assistant", text: "done" },
    ];
    const verbatim = new Set(verbatimSessionLines(exchange));
    const block = renderSessionBlock({ sessionId: "ses", generation: 0 }, [
      { ref: "3+1", text: "user: earlier" },
      { ref: "4+1", text: "user: use <b> & keep\nit" },
      { ref: "5+1", text: "tool_call: bash ls" },
      { ref: "6+1", text: "tool_result: a b" },
      // A summary of the reply (not its exact text) stays, as does the same text under another ref.
      { ref: "7+1", text: "assistant: done, and more" },
      { ref: "2+1", text: "assistant: done" },
    ]);
    const kept = withoutLines(block, verbatim);
    expect(kept?.pieces).toEqual([
      block.pieces[0],
      "3+1|user: earlier",
      "5+1|tool_call: bash ls",
      "6+1|tool_result: a b",
      "7+1|assistant: done, and more",
      "2+1|assistant: done",
      "</session_memory>",
    ]);
    expect(kept?.text).toBe(kept?.pieces.join("\n"));
    expect(withoutLines(block, new Set())).toBe(block);
    const only = renderSessionBlock({ sessionId: "ses", generation: 0 }, [{ ref: "7+1", text: "assistant: done" }]);
    // With no line left the block stays, empty: its presence says the session's history is complete.
    expect(withoutLines(only, verbatim).pieces).toEqual([only.pieces[0], "</session_memory>"]);
  });
});
