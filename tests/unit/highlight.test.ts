import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { highlightSegments } from "../../src/core/highlight.js";
import { queryGroups } from "../../src/core/tokenize.js";

describe("highlighted search excerpts", () => {
  it("marks Latin words case-insensitively and CJK bigrams, keeping the text whole", () => {
    expect(
      highlightSegments("The Broker's DurableBroker, src/broker.ts and brokers: broker!", queryGroups("broker").flat()),
    ).toEqual([
      { text: "The ", match: false },
      { text: "Broker", match: true },
      { text: "'s DurableBroker, src/", match: false },
      { text: "broker", match: true },
      { text: ".ts and brokers: ", match: false },
      { text: "broker", match: true },
      { text: "!", match: false },
    ]);
    // As the tokenizer has it: a CJK run next to a word is not part of it, and underscores join parts of a word.
    expect(highlightSegments("数据broker fsynced_queue", ["broker", "queue"])).toEqual([
      { text: "数据", match: false },
      { text: "broker", match: true },
      { text: " fsynced_", match: false },
      { text: "queue", match: true },
    ]);
    expect(highlightSegments("我们把数据存进队列", queryGroups("数据").flat())).toEqual([
      { text: "我们把", match: false },
      { text: "数据", match: true },
      { text: "存进队列", match: false },
    ]);
    // Overlapping and touching matches are one segment; no term leaves the text as one unmarked segment.
    expect(highlightSegments("数据数据 数数数", ["数据", "数数"])).toEqual([
      { text: "数据数据", match: true },
      { text: " ", match: false },
      { text: "数数数", match: true },
    ]);
    expect(highlightSegments("<script>", [])).toEqual([{ text: "<script>", match: false }]);
    expect(highlightSegments("", ["x"])).toEqual([]);
  });

  it("cuts any text into alternating segments that join back to it, marking whole-word occurrences of the terms", () => {
    const unit = fc.constantFrom("a", "B", "b", "数", "据", " ", "<", "&");
    fc.assert(
      fc.property(
        fc.string({ unit, maxLength: 40 }),
        fc.array(fc.string({ unit, minLength: 1, maxLength: 3 })),
        (text, raw) => {
          const terms = raw.map((t) => t.toLowerCase());
          const segments = highlightSegments(text, terms);
          expect(segments.map((s) => s.text).join("")).toBe(text);
          for (const [k, s] of segments.entries()) {
            expect(s.text.length).toBeGreaterThan(0);
            if (k > 0) expect(s.match).not.toBe(segments[k - 1]?.match);
          }
          // Every occurrence of a term between spaces (or the ends) lies inside a match.
          let at = 0;
          const matched = new Uint8Array(text.length);
          for (const s of segments) {
            if (s.match) matched.fill(1, at, at + s.text.length);
            at += s.text.length;
          }
          for (const term of terms) {
            const lower = text.toLowerCase();
            for (let i = lower.indexOf(term); i >= 0; i = lower.indexOf(term, i + 1)) {
              const end = i + term.length;
              const spaced = (i === 0 || text[i - 1] === " ") && (end === text.length || text[end] === " ");
              if (spaced) expect([...matched.slice(i, end)].every((m) => m === 1)).toBe(true);
            }
          }
          // Every match holds an occurrence of a term.
          for (const s of segments.filter((segment) => segment.match)) {
            expect(terms.some((term) => s.text.toLowerCase().includes(term))).toBe(true);
          }
        },
      ),
    );
  });
});
