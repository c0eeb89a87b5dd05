import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { highlightSegments } from "../../src/core/highlight.js";
import { queryGroups } from "../../src/core/tokenize.js";

describe("highlighted search excerpts", () => {
  it("marks Latin words case-insensitively and CJK bigrams, keeping the text whole", () => {
    expect(highlightSegments("The Broker keeps a durable queue; broker!", queryGroups("broker").flat())).toEqual([
      { text: "The ", match: false },
      { text: "Broker", match: true },
      { text: " keeps a durable queue; ", match: false },
      { text: "broker", match: true },
      { text: "!", match: false },
    ]);
    expect(highlightSegments("我们把数据存进队列", queryGroups("数据").flat())).toEqual([
      { text: "我们把", match: false },
      { text: "数据", match: true },
      { text: "存进队列", match: false },
    ]);
    // Overlapping and adjacent matches are one segment; no term leaves the text as one unmarked segment.
    expect(highlightSegments("aaab", ["aa"])).toEqual([
      { text: "aaa", match: true },
      { text: "b", match: false },
    ]);
    expect(highlightSegments("<script>", [])).toEqual([{ text: "<script>", match: false }]);
    expect(highlightSegments("", ["x"])).toEqual([]);
  });

  it("cuts any text into alternating segments that join back to it, each match being a term", () => {
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
          // Every occurrence of a term lies inside a match.
          let at = 0;
          const matched = new Uint8Array(text.length);
          for (const s of segments) {
            if (s.match) matched.fill(1, at, at + s.text.length);
            at += s.text.length;
          }
          for (const term of terms) {
            for (let i = text.toLowerCase().indexOf(term); i >= 0; i = text.toLowerCase().indexOf(term, i + 1)) {
              expect([...matched.slice(i, i + term.length)].every((m) => m === 1)).toBe(true);
            }
          }
        },
      ),
    );
  });
});
