import { describe, expect, it } from "vitest";
import { MEMORY_CONTINUED, MEMORY_HEAD } from "../../plugin/request/memory-message.js";
import { applyLayout, layoutTurn } from "../../plugin/v2/layout.js";
import type { V2Message } from "../../plugin/v2/v2-api.js";
import type { AssembledContext } from "../../src/memory/index.js";

/** An assembly holding a shared block with `lines` (and a session block the V2 layout must leave out). */
function assembled(lines: string[], ownPublications: number[], highWater: number): AssembledContext {
  const opening = '<shared_memory scope="s">\nThis project\'s conversations.';
  const pieces = [opening, ...lines, "</shared_memory>"];
  return {
    blocks: [
      { name: "shared_memory", text: pieces.join("\n"), pieces, tokens: 1, lines: lines.length },
      {
        name: "session_memory",
        text: "<session_memory>\nown\n</session_memory>",
        pieces: ["<session_memory>", "own", "</session_memory>"],
        tokens: 1,
        lines: 1,
      },
    ],
    tokens: { available: 1, used: 1, shared: 1, own: 1, previous: 0 },
    snapshot: { publicationHighWater: highWater } as AssembledContext["snapshot"],
    omitted: [],
    historyComplete: true,
    reused: false,
    ownPublications,
  };
}

const user = (id: string, text: string): V2Message => ({ id, role: "user", content: [{ type: "text", text }] });
const reply = (text: string): V2Message => ({ id: `a-${text}`, role: "assistant", content: [{ type: "text", text }] });
const textOf = (m: V2Message | undefined) => (m?.content[0] as { text: string } | undefined)?.text ?? "";

describe("the V2 request layout (plugin/v2/layout.ts)", () => {
  it("renders the other conversations' lines before the first turn, then only what they published since", () => {
    const lines1 = ["pub:0+1|user: A's decision", "pub:1+1|user: B's own first turn"];
    const first = [user("u1", "first")];
    const layout = layoutTurn(undefined, first, "u1", assembled(lines1, [1], 2));
    const rendering = layout.leading.get("u1") ?? "";
    expect(rendering.startsWith(MEMORY_HEAD)).toBe(true);
    expect(rendering).toContain("A's decision");
    expect(rendering).not.toContain("B's own first turn");
    expect(rendering).not.toContain("session_memory");

    const second = [...first, reply("one"), user("u2", "second")];
    const lines2 = [...lines1, "pub:2+1|user: A's second decision", "pub:3+1|user: B's own second turn"];
    layoutTurn(layout, second, "u2", assembled(lines2, [1, 3], 4));
    const update = layout.leading.get("u2") ?? "";
    expect(update.startsWith(MEMORY_CONTINUED)).toBe(true);
    expect(update).toContain("A's second decision");
    expect(update).not.toContain("pub:0+1");
    expect(update).not.toContain("B's own");

    // Nothing new: no text leads the third turn.
    const third = [...second, reply("two"), user("u3", "third")];
    layoutTurn(layout, third, "u3", assembled(lines2, [1, 3], 4));
    expect(layout.leading.get("u3")).toBe("");

    // Each led message gets its text back, byte for byte, as a user message of its own just before it.
    const request = structuredClone(third);
    applyLayout(layout, request);
    expect(request.map((m) => m.id ?? "memory")).toEqual(["memory", "u1", "a-one", "memory", "u2", "a-two", "u3"]);
    expect(textOf(request[0])).toBe(rendering);
    expect(textOf(request[3])).toBe(update);
    expect(request.slice(1, 3)).toEqual(third.slice(0, 2));
  });

  it("renders again when the message carrying the rendering has left V2's history (a compaction)", () => {
    const layout = layoutTurn(undefined, [user("u1", "first")], "u1", assembled(["pub:0+1|x: A"], [], 1));
    const afterCheckpoint = [user("c1", "<conversation-checkpoint>…"), user("u5", "fifth")];
    const next = layoutTurn(layout, afterCheckpoint, "u5", assembled(["pub:0+1|x: A", "pub:1+1|x: A2"], [], 2));
    expect(next.renderedAt).toBe("u5");
    expect(next.leading.get("u5")?.startsWith(MEMORY_HEAD)).toBe(true);
    expect(next.leading.get("u5")).toContain("x: A2");
  });

  it("keeps a turn's text for its later steps (the decision is made once per turn)", () => {
    const layout = layoutTurn(undefined, [user("u1", "first")], "u1", assembled(["pub:0+1|x: A"], [], 1));
    const same = layoutTurn(layout, [user("u1", "first")], "u1", assembled(["pub:0+1|x: A", "pub:1+1|x: B"], [], 2));
    expect(same.leading.get("u1")).not.toContain("x: B");
  });
});
