import { describe, expect, it } from "vitest";
import { billedByPiece, requestPieces } from "../../scripts/bench/cache-breakdown.js";
import { AnthropicCache } from "../../scripts/prompt-cache.js";

/** bench cache's breakdown of billed input tokens by piece of the request (docs/caching.md "Measured"). */

const mark = { cache_control: { type: "ephemeral" } };
const body = (prompt: string) => ({
  model: "m",
  tools: [
    { name: "bash", description: "x".repeat(3000), input_schema: {} },
    { name: "memory_zoom", description: "z".repeat(700), input_schema: {} },
  ],
  system: [{ type: "text", text: "s".repeat(2000), ...mark }],
  messages: [
    {
      role: "user",
      content: [
        { type: "text", text: "optchat memory. head" },
        { type: "text", text: '<shared_memory scope="p">\nintro\n' },
        { type: "text", text: `pub:0+1|${"l".repeat(900)}\n`, ...mark },
        { type: "text", text: "optchat memory, continued: shared memory as of publication 1." },
        { type: "text", text: prompt, ...mark },
      ],
    },
  ],
});

describe("bench cache breakdown", () => {
  it("gives every piece its share of the read, written and uncached tokens, adding up to the billed figure", () => {
    const cache = new AnthropicCache(() => 0);
    const first = body("[bench s1 t1] hello");
    const usage1 = cache.apply(first);
    const one = billedByPiece(requestPieces("anthropic", first), usage1);
    const billed = (u: typeof usage1) =>
      u.inputTokens - u.cacheReadTokens - u.cacheWriteTokens + 0.1 * u.cacheReadTokens + 1.25 * u.cacheWriteTokens;
    const sum = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);
    expect(sum(one)).toBeCloseTo(billed(usage1), 6);
    // Nothing was cached: everything up to the last mark was written (1.25× its tokens), nothing read.
    expect(one.tools).toBeGreaterThan(one.memoryTools);
    expect(one.memoryHead).toBeGreaterThan(0);
    expect(one.sharedLines).toBeGreaterThan(one.sharedOpening);
    expect(one.prompt).toBeGreaterThan(0);
    expect(one.history).toBe(0);
    // The same memory with a new prompt: the stable pieces are read (0.1×), the new prompt and volatile part written.
    const second = body("[bench s1 t2] again, a longer prompt this time");
    const usage2 = cache.apply(second);
    expect(usage2.cacheReadTokens).toBeGreaterThan(0);
    const two = billedByPiece(requestPieces("anthropic", second), usage2);
    expect(sum(two)).toBeCloseTo(billed(usage2), 6);
    expect(two.sharedLines).toBeCloseTo(one.sharedLines * (0.1 / 1.25), 0);
    expect(two.prompt).toBeGreaterThan(two.sharedLines / 10);
  });
});
