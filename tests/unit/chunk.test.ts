import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { chunkEnds, chunkText, fitsInBytes, type ScanCounter } from "../../src/core/chunk.js";
import { createPayloadTextDecoder, payloadAsText } from "../../src/core/payload.js";
import { cutToBytes, utf8Bytes } from "../../src/core/summary.js";
import { createTokenizer, tokenize, tokenSliceEnds } from "../../src/core/tokenize.js";

/** The chunker as it was before it was made linear (issue 9 item 3): its boundaries are the reference. */
function referenceChunkText(text: string, maxBytes: number): string[] {
  const cut = (rest: string, limit: number) => {
    if (utf8Bytes(rest) <= limit) return rest;
    let bytes = 0;
    let out = "";
    for (const char of rest) {
      const width = utf8Bytes(char);
      if (bytes + width > limit) break;
      bytes += width;
      out += char;
    }
    return out;
  };
  const parts: string[] = [];
  let rest = text;
  while (utf8Bytes(rest) > maxBytes) {
    const head = cut(rest, maxBytes);
    const half = Math.floor(head.length / 2);
    let end = head.lastIndexOf("\n");
    if (end < half) end = head.lastIndexOf(" ");
    end = end < half ? head.length : end + 1;
    parts.push(rest.slice(0, end));
    rest = rest.slice(end);
  }
  if (rest.length > 0 || parts.length === 0) parts.push(rest);
  return parts;
}

/** Text with newlines, spaces, 1–4 byte characters, paired and lone surrogates. */
const mixedText = fc
  .array(
    fc.oneof(
      fc.constantFrom("\n", " ", "  ", "a", "word", "é", "部署", "😀", "\uD800", "\uDC00", "x\n"),
      fc.string({ unit: "grapheme", maxLength: 12 }),
    ),
    { maxLength: 400 },
  )
  .map((pieces) => pieces.join(""));

/** Texts of `units` code units in shapes that stress the chunker differently. */
function shaped(shape: string, units: number): string {
  const unit = { words: "alpha beta\ngamma ", unbroken: "x", spaces: "     ", wide: "部署脚本", emoji: "😀" }[shape];
  if (!unit) throw new Error(shape);
  return unit.repeat(Math.ceil(units / unit.length)).slice(0, units);
}

describe("chunking", () => {
  it("cuts exactly where the previous chunker cut (boundaries are recorded with every chunked node)", () => {
    fc.assert(
      fc.property(mixedText, fc.integer({ min: 8, max: 200 }), (text, max) => {
        expect(chunkText(text, max)).toEqual(referenceChunkText(text, max));
      }),
      { numRuns: 300 },
    );
  });

  it("measures and cuts by UTF-8 bytes as TextEncoder counts them", () => {
    fc.assert(
      fc.property(mixedText, fc.integer({ min: -1, max: 300 }), (text, limit) => {
        expect(fitsInBytes(text, limit)).toBe(utf8Bytes(text) <= limit);
        const cut = cutToBytes(text, limit);
        expect(text.startsWith(cut)).toBe(true);
        expect(utf8Bytes(cut)).toBeLessThanOrEqual(Math.max(0, limit));
        // Longest: the next code point would not fit.
        const next = text.slice(cut.length).codePointAt(0);
        if (next !== undefined) expect(utf8Bytes(cut + String.fromCodePoint(next))).toBeGreaterThan(limit);
      }),
      { numRuns: 300 },
    );
  });

  // Linear by count, not by clock: the code units examined per code unit of text stay under a constant, the same at
  // 1 MiB and 8 MiB. The previous chunker measured the whole rest of the text for every part (quadratic).
  it.each([
    "words",
    "unbroken",
    "spaces",
    "wide",
    "emoji",
  ])("examines each code unit a bounded number of times (%s)", (shape) => {
    const perUnit: number[] = [];
    for (const units of [1 << 20, 8 << 20]) {
      const text = shaped(shape, units);
      const counter: ScanCounter = { units: 0 };
      let parts = 0;
      let start = 0;
      for (const end of chunkEnds(text, 32 * 1024, counter)) {
        expect(end).toBeGreaterThan(start);
        start = end;
        parts++;
      }
      expect(start).toBe(text.length);
      expect(counter.units).toBeLessThanOrEqual(3 * text.length + 3 * parts);
      perUnit.push(counter.units / text.length);
    }
    // The same work per code unit at both sizes (up to the last part, which is measured but never searched back).
    expect(Math.abs((perUnit[1] as number) - (perUnit[0] as number))).toBeLessThan(0.05);
  });

  it("looks at no more of a text than the limit to decide that it does not fit", () => {
    const counter: ScanCounter = { units: 0 };
    const huge = "x".repeat(8 << 20);
    expect(fitsInBytes(huge, 512)).toBe(false);
    const cut = chunkEnds(`${huge} `, 64, counter).next().value;
    expect(cut).toBe(64);
    expect(counter.units).toBeLessThanOrEqual(2 * 64 + 2);
  });
});

describe("search tokens in slices", () => {
  const searchText = fc
    .array(
      fc.oneof(
        fc.constantFrom(
          " ",
          "\n",
          "\t",
          "_",
          "a_b",
          "ΟΔΟΣ",
          "Σ",
          ".",
          "'",
          "部署脚本",
          "ﾃﾞｰﾀ",
          "e\u0301",
          "\u0301",
          "x",
        ),
        fc.string({ unit: "grapheme", maxLength: 8 }),
      ),
      { maxLength: 200 },
    )
    .map((pieces) => pieces.join(""));

  it("gives exactly the tokens of the whole text, whatever the slice size", () => {
    fc.assert(
      fc.property(searchText, fc.integer({ min: 1, max: 40 }), (text, sliceUnits) => {
        const tokenizer = createTokenizer();
        let start = 0;
        for (const end of tokenSliceEnds(text, sliceUnits)) {
          expect(end).toBeGreaterThanOrEqual(start);
          if (!tokenizer.add(text.slice(start, end))) break;
          start = end;
        }
        expect(tokenizer.tokens).toEqual(tokenize(text));
      }),
      { numRuns: 500 },
    );
  });

  it("stops at the same token limit as the whole text", () => {
    const text = Array.from({ length: 60_000 }, (_, i) => `w${i}`).join(" ");
    const tokenizer = createTokenizer();
    let start = 0;
    let stopped = false;
    for (const end of tokenSliceEnds(text, 1000)) {
      if (!tokenizer.add(text.slice(start, end))) {
        stopped = true;
        break;
      }
      start = end;
    }
    expect(stopped).toBe(true);
    expect(tokenizer.tokens).toEqual(tokenize(text));
  });
});

describe("payload text page by page", () => {
  it("decodes to exactly payloadAsText of the whole payload, however the pages split it", () => {
    const bytes = fc.uint8Array({ maxLength: 300 }).chain((random) =>
      fc
        .tuple(fc.constantFrom(new Uint8Array([0xef, 0xbb, 0xbf]), new Uint8Array()), fc.string({ unit: "grapheme" }))
        .map(([bom, text]) => {
          const utf8 = new TextEncoder().encode(text);
          const all = new Uint8Array(bom.length + utf8.length + random.length);
          all.set(bom, 0);
          all.set(utf8, bom.length);
          all.set(random, bom.length + utf8.length);
          return all;
        }),
    );
    fc.assert(
      fc.property(bytes, fc.array(fc.nat(400), { maxLength: 6 }), (payload, cuts) => {
        const points = [...new Set(cuts.map((c) => c % (payload.length + 1)))].sort((a, b) => a - b);
        const decoder = createPayloadTextDecoder();
        let text = "";
        let at = 0;
        for (const point of [...points, payload.length]) {
          text += decoder.push(payload.subarray(at, point));
          at = point;
        }
        text += decoder.end();
        expect(text).toBe(payloadAsText(payload));
      }),
      { numRuns: 300 },
    );
  });
});
