import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { jsonbProblems, storableText, unstorableTextProblem } from "../../src/core/text.js";

describe("text that PostgreSQL text and jsonb columns can hold", () => {
  it("names NUL and unpaired surrogates, and accepts well-formed text with astral characters", () => {
    expect(unstorableTextProblem("ab\u0000c")).toMatch(/^contains U\+0000 \(NUL\)/);
    expect(unstorableTextProblem("x\uD800y")).toMatch(/^contains an unpaired UTF-16 surrogate/);
    expect(unstorableTextProblem("x\uDC00")).toMatch(/^contains an unpaired UTF-16 surrogate/);
    expect(unstorableTextProblem("\uDE00\uD83D")).toMatch(/unpaired/); // reversed halves are not a pair
    expect(unstorableTextProblem("emoji 😀 and 漢字")).toBeUndefined();
  });

  it("repairs any string into one with no problem, and leaves storable strings unchanged", () => {
    fc.assert(
      fc.property(fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)) }), (s) => {
        const repaired = storableText(s);
        expect(unstorableTextProblem(repaired)).toBeUndefined();
        expect(repaired.length).toBe(s.length);
        if (unstorableTextProblem(s) === undefined) expect(repaired).toBe(s);
      }),
    );
    expect(storableText("a\u0000b\uD800")).toBe("a\u2400b\uFFFD");
  });

  it("finds every place in a JSON value that jsonb refuses, by path", () => {
    const cyclic: Record<string, unknown> = { ok: 1 };
    cyclic.self = cyclic;
    const problems = jsonbProblems({
      fine: ["a", 1, true, null, { deep: "😀" }],
      nul: "x\u0000",
      "key\u0000": 1,
      nested: { list: [0, "\uDFFF"] },
      big: 10n,
      inf: Number.POSITIVE_INFINITY,
      cyclic,
      when: new Date(0),
    });
    expect(problems.map((p) => p.path.join("/"))).toEqual([
      "nul",
      '"key\\u0000"',
      "nested/list/1",
      "big",
      "inf",
      "cyclic/self",
    ]);
    // The names of bad keys are escaped, so an error message that quotes them is storable itself.
    for (const { path } of problems)
      for (const part of path) expect(unstorableTextProblem(String(part))).toBeUndefined();
  });
});
