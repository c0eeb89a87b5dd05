import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { breakpointBlocks } from "../../src/compactor/providers/anthropic.js";
import { BLOCK_MAX_BYTES, contextBlocks, groupLines, stableWindow } from "../../src/core/context-blocks.js";
import { buildSummaryPrompt, promptMessages, utf8Bytes } from "../../src/core/summary.js";

const line = fc
  .string({ unit: "grapheme", minLength: 1, maxLength: 400 })
  .map((text) => `user: ${text.replace(/[\r\n]+/g, " ")}`);
const view = fc.array(line, { minLength: 0, maxLength: 300 });

describe("cache-stable context blocks (issue 13 item 3)", () => {
  it("carry exactly the context, `<chat>` first, every line once and whole", () => {
    fc.assert(
      fc.property(view, (lines) => {
        const blocks = contextBlocks(lines, Number.POSITIVE_INFINITY);
        const expected = lines.length === 0 ? "" : `<chat>\n${lines.join("\n")}\n`;
        expect(blocks.map((b) => b.text).join("")).toBe(expected);
        for (const block of blocks) {
          expect(block.bytes).toBe(utf8Bytes(block.text));
          expect(block.text.endsWith("\n")).toBe(true);
        }
      }),
    );
  });

  it("keep every block but the last when lines are appended", () => {
    fc.assert(
      fc.property(view, fc.array(line, { minLength: 1, maxLength: 40 }), (lines, more) => {
        const before = groupLines(lines);
        const after = groupLines([...lines, ...more]);
        for (let k = 0; k < before.length - 1; k++) expect(after[k]).toEqual(before[k]);
      }),
    );
  });

  it("keep the blocks before a changed line (a merge in the view)", () => {
    fc.assert(
      fc.property(fc.array(line, { minLength: 2, maxLength: 300 }), fc.nat(), line, (lines, at, replacement) => {
        const p = at % lines.length;
        const before = groupLines(lines);
        const changed = [...lines.slice(0, p), replacement, ...lines.slice(p + 1)];
        const after = groupLines(changed);
        // The block holding line p, and everything after it, may change; the blocks wholly before it may not.
        let start = 0;
        for (let k = 0; k < before.length; k++) {
          const end = start + (before[k]?.lines.length ?? 0);
          if (end > p) break;
          expect(after[k]).toEqual(before[k]);
          start = end;
        }
      }),
    );
  });

  it("are ~2 KB and never larger than the maximum unless one line is", () => {
    const lines = Array.from({ length: 2000 }, (_, i) => `assistant: reply ${i} ${"detail ".repeat((i * 7) % 60)}`);
    const groups = groupLines(lines);
    const mean = groups.reduce((s, g) => s + g.bytes, 0) / groups.length;
    expect(mean).toBeGreaterThan(1200);
    expect(mean).toBeLessThan(3500);
    for (const g of groups) if (g.lines.length > 1) expect(g.bytes).toBeLessThan(BLOCK_MAX_BYTES + 512);
  });

  it("fit a budget by dropping whole blocks from the front, in steps, so the start rarely moves", () => {
    const all = Array.from(
      { length: 1500 },
      (_, i) => `tool_result: output ${i} ${"x".repeat(150 + ((i * 37) % 200))}`,
    );
    const total = all.reduce((s, l) => s + utf8Bytes(l) + 1, 0);
    const budget = 64 * 1024;
    let starts = 0;
    let previousFirst: string | undefined;
    let calls = 0;
    for (let n = 1; n <= all.length; n += 2) {
      calls += 1;
      const blocks = contextBlocks(all.slice(0, n), budget);
      const bytes = blocks.reduce((s, b) => s + b.bytes, 0);
      expect(bytes).toBeLessThanOrEqual(budget + "<chat>\n".length);
      const first = blocks[0]?.text;
      if (first !== previousFirst) starts += 1;
      previousFirst = first;
    }
    // ~450 KB of lines through a 64 KB window: the start moves about once per 12 KB of growth, not on every call.
    expect(starts).toBeLessThan(total / (budget / 8));
    expect(starts).toBeLessThan(calls / 10);
    expect(stableWindow([{ bytes: 10 }, { bytes: 10 }], 100)).toHaveLength(2);
  });

  it("put the context before the step and no ids in the request", () => {
    const prompt = buildSummaryPrompt(["user: a", "assistant: b"], { type: "merge", left: "user: a", right: "x" });
    const user = promptMessages(prompt)[1]?.content ?? "";
    expect(user.startsWith("<chat>\nuser: a\nassistant: b\n</chat>\n\n")).toBe(true);
    expect(user).not.toMatch(/\d+\+\d+\|/);
  });
});

describe("Anthropic breakpoints", () => {
  const blocks = (n: number, lastClosed: boolean) =>
    Array.from({ length: n }, (_, k) => ({ closed: k < n - 1 || lastClosed }));
  const sorted = (marks: Set<number>) => [...marks].sort((a, b) => a - b);

  it("mark the last closed block, then every 20 back, at most 3 (the system prompt has the fourth)", () => {
    expect(sorted(breakpointBlocks(blocks(0, false)))).toEqual([]);
    expect(sorted(breakpointBlocks(blocks(1, false)))).toEqual([]);
    expect(sorted(breakpointBlocks(blocks(1, true)))).toEqual([0]);
    expect(sorted(breakpointBlocks(blocks(2, false)))).toEqual([0]);
    expect(sorted(breakpointBlocks(blocks(100, false)))).toEqual([58, 78, 98]);
    expect(sorted(breakpointBlocks(blocks(100, true)))).toEqual([59, 79, 99]);
    for (let n = 0; n < 200; n++) expect(breakpointBlocks(blocks(n, n % 2 === 0)).size).toBeLessThanOrEqual(3);
  });

  it("never mark a block that the next call of the tree sees with more lines", () => {
    fc.assert(
      fc.property(view, fc.array(line, { minLength: 1, maxLength: 40 }), (lines, more) => {
        const before = contextBlocks(lines, Number.POSITIVE_INFINITY);
        const after = contextBlocks([...lines, ...more], Number.POSITIVE_INFINITY);
        for (const k of breakpointBlocks(before)) expect(after[k]?.text).toBe(before[k]?.text);
      }),
    );
  });
});
