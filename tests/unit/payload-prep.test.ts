import { createHash } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { countLoneSurrogates, isValidUtf8, payloadAsText } from "../../src/core/payload.js";
import { tokenize, toTsvectorLiteral } from "../../src/core/tokenize.js";
import { preparePayload, SEARCH_INDEX_BYTES } from "../../src/memory/payload-prep.js";
import { loopTurns } from "../helpers.js";

/** What ingestion derived from a payload in one task before it was done in slices: the reference. */
function reference(content: string | Uint8Array, toolName?: string) {
  const payload = typeof content === "string" ? Buffer.from(content, "utf8") : Buffer.from(content);
  const text = payloadAsText(payload.subarray(0, SEARCH_INDEX_BYTES));
  return {
    payload,
    payloadHash: createHash("sha256").update(payload).digest(),
    validUtf8: isValidUtf8(payload),
    loneSurrogatesReplaced: typeof content === "string" ? countLoneSurrogates(content) : 0,
    search: toTsvectorLiteral(tokenize(toolName ? `${toolName} ${text}` : text)),
  };
}

describe("payload preparation for ingestion", () => {
  it("derives exactly what the one-task derivation did, for strings and bytes", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string({ unit: "grapheme", maxLength: 200 }),
          fc.string({ unit: "binary", maxLength: 200 }), // lone surrogates
          fc.uint8Array({ maxLength: 200 }),
        ),
        fc.option(fc.constantFrom("bash", "read"), { nil: undefined }),
        async (content, toolName) => {
          expect(await preparePayload(content, toolName)).toEqual(reference(content, toolName));
        },
      ),
      { numRuns: 100 },
    );
  });

  it("derives the same for a large text, with a surrogate pair and a lone surrogate across slice boundaries", async () => {
    const slice = 4 * 1024 * 1024;
    const text = `${"a".repeat(slice - 1)}😀${"word 部署 ".repeat(200_000)}\uD800${"b".repeat(slice)}`;
    const { payload, ...derived } = await preparePayload(text, "bash");
    const { payload: expected, ...expectedDerived } = reference(text, "bash");
    // Buffer.equals: a deep comparison of 10 MB element by element takes minutes.
    expect(payload.equals(expected)).toBe(true);
    expect(derived).toEqual(expectedDerived);
    expect(derived.loneSurrogatesReplaced).toBe(1);
  });

  it("lets the event loop turn while it encodes, hashes and tokenizes a large payload", async () => {
    // Long words, so the 1 MiB of search text stays under the 50,000-token limit and is tokenized to its end.
    const text = `${"x".repeat(60)} ${"déjà".repeat(15)}\n`.repeat(100_000); // about 10 MB
    const probe = loopTurns();
    await preparePayload(text);
    const turns = probe.stop();
    // 1 MiB of search text in 32 KiB slices alone is 32 turns; encoding and hashing add a few.
    expect(turns).toBeGreaterThanOrEqual(30);
  });
});
