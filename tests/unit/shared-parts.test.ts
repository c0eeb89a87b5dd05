import { describe, expect, it } from "vitest";
import { SharedParts } from "../../plugin/request/shared-parts.js";

/** The shared block's lines in parts whose boundaries every later rendering keeps (docs/caching.md). */

const lines = (n: number, tag = "") => Array.from({ length: n }, (_, k) => `pub:${k}+1|line ${k}${tag}\n`);
/** The line counts at which the parts end. */
const ends = (parts: readonly string[]) => {
  let total = 0;
  return parts.map((part) => {
    total += part.split("\n").length - 1;
    return total;
  });
};

describe("shared parts", () => {
  it("ends a part wherever an earlier rendering ended, and joins back to the lines", () => {
    const parts = new SharedParts();
    expect(parts.group("<a>\n", lines(4))).toEqual([lines(4).join("")]);
    const grown = parts.group("<a>\n", lines(9));
    expect(ends(grown)).toEqual([4, 9]);
    expect(grown.join("")).toBe(lines(9).join(""));
    expect(ends(parts.group("<a>\n", lines(12)))).toEqual([4, 9, 12]);
    // The same lines again: the same parts (every step and turn of an epoch sends the same bytes).
    expect(ends(parts.group("<a>\n", lines(12)))).toEqual([4, 9, 12]);
    expect(parts.group("<a>\n", [])).toEqual([]);
  });

  it("keeps the end of a session at an older snapshot for the sessions ahead of it, and theirs for it", () => {
    const parts = new SharedParts();
    parts.group("<a>\n", lines(10)); // session A
    expect(ends(parts.group("<a>\n", lines(6)))).toEqual([6]); // session B, an older snapshot: a prefix
    expect(ends(parts.group("<a>\n", lines(14)))).toEqual([6, 10, 14]); // A again: B's and its own ends
    expect(ends(parts.group("<a>\n", lines(8)))).toEqual([6, 8]); // B again
  });

  it("keeps only the ends before a changed line after a fold, and keeps scopes apart", () => {
    const parts = new SharedParts();
    parts.group("<a>\n", lines(3));
    parts.group("<a>\n", lines(7));
    parts.group("<b>\n", lines(5, " of b"));
    const folded = [...lines(5), "pub:5+2|merged\n", ...lines(9).slice(7)];
    expect(ends(parts.group("<a>\n", folded))).toEqual([3, 8]);
    expect(ends(parts.group("<b>\n", lines(6, " of b")))).toEqual([5, 6]);
  });
});
