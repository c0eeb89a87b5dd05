import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { availableMemoryTokens, fixedRequestTokens } from "../../src/core/context.js";

describe("the request budget (seed 000 §7: available_memory = max(0, W − I − A − O − R))", () => {
  it("gives memory what the window leaves after the fixed part, and nothing when the fixed part alone overflows", () => {
    const tokens = fc.integer({ min: 0, max: 2_000_000 });
    fc.assert(
      fc.property(tokens, tokens, tokens, tokens, tokens, (windowTokens, i, a, o, r) => {
        const input = { windowTokens, instructionsTokens: i, activeTokens: a, outputTokens: o, reserveTokens: r };
        const fixed = fixedRequestTokens(input);
        expect(fixed).toBe(i + a + o + r);
        const available = availableMemoryTokens(input);
        expect(available).toBe(fixed > windowTokens ? 0 : windowTokens - fixed);
        expect(available + fixed).toBeGreaterThanOrEqual(Math.min(windowTokens, fixed));
      }),
    );
  });
});
