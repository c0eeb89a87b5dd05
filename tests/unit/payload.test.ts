import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  countLoneSurrogates,
  decodePayloadCursor,
  encodePayloadCursor,
  isValidUtf8,
  utf8SafePrefixLength,
} from "../../src/core/payload.js";

describe("isValidUtf8", () => {
  it("agrees with a strict decoder on arbitrary bytes", () => {
    const strict = new TextDecoder("utf-8", { fatal: true });
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        let expected = true;
        try {
          strict.decode(bytes);
        } catch {
          expected = false;
        }
        expect(isValidUtf8(bytes)).toBe(expected);
      }),
      { numRuns: 5000 },
    );
  });

  it("accepts every well-formed string's encoding", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme" }), (text) => {
        expect(isValidUtf8(Buffer.from(text, "utf8"))).toBe(true);
      }),
    );
  });

  it.each([
    ["overlong '/'", [0xc0, 0xaf]],
    ["encoded surrogate", [0xed, 0xa0, 0x80]],
    ["above U+10FFFF", [0xf4, 0x90, 0x80, 0x80]],
    ["truncated sequence", [0xe2, 0x82]],
    ["lone continuation", [0x80]],
  ])("rejects %s", (_label, bytes) => expect(isValidUtf8(Uint8Array.from(bytes))).toBe(false));
});

describe("utf8SafePrefixLength", () => {
  it("cuts a valid payload only at code point boundaries, losing at most 3 bytes", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme", minLength: 1 }), fc.nat(), (text, at) => {
        const bytes = Buffer.from(text, "utf8");
        const cut = at % (bytes.length + 1);
        const chunk = bytes.subarray(0, cut);
        const length = utf8SafePrefixLength(chunk, cut === bytes.length);
        expect(length).toBeLessThanOrEqual(cut);
        expect(cut - length).toBeLessThanOrEqual(3);
        if (length > 0) expect(isValidUtf8(chunk.subarray(0, length))).toBe(true);
        if (cut === bytes.length) expect(length).toBe(cut);
      }),
      { numRuns: 3000 },
    );
  });
});

describe("payload cursors", () => {
  it("round-trip and reject anything else", () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[0-9a-f]{16}$/), fc.nat({ max: 2 ** 40 }), (hashPrefix, offset) => {
        expect(decodePayloadCursor(encodePayloadCursor({ hashPrefix, offset }))).toEqual({ hashPrefix, offset });
      }),
    );
    for (const bad of ["", "p1.", "p1.zz.1", "p2.0123456789abcdef.1", "p1.0123456789abcdef.-1"]) {
      expect(decodePayloadCursor(bad)).toBeUndefined();
    }
  });
});

describe("countLoneSurrogates", () => {
  it("counts exactly the code units that UTF-8 encoding replaces", () => {
    fc.assert(
      fc.property(
        fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)) }),
        (text) => {
          const replacedByEncoder = [...Buffer.from(text, "utf8").toString("utf8")].filter(
            (c) => c === "\uFFFD",
          ).length;
          const alreadyThere = [...text].filter((c) => c === "\uFFFD").length;
          expect(countLoneSurrogates(text)).toBe(replacedByEncoder - alreadyThere);
        },
      ),
      { numRuns: 3000 },
    );
  });
});
