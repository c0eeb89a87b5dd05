import { describe, expect, it } from "vitest";
import {
  ANTHROPIC_MIN_CACHEABLE_TOKENS,
  AnthropicCache,
  anthropicBlocks,
  CACHE_TTL_MS,
  CacheRuleError,
  commonPrefixLength,
  estimateTokensOf,
  OpenAiPrefixCache,
} from "../../scripts/prompt-cache.js";

/** The simulator's rules (scripts/prompt-cache.ts, docs/caching.md), one test per rule. */

const MARK = { cache_control: { type: "ephemeral" } };
// About 1,430 tokens: every prefix that ends at or after it is cacheable.
const BIG = "b".repeat(5000);

function text(value: string, marked = false) {
  return { type: "text", text: value, ...(marked ? MARK : {}) };
}

function request(system: unknown[], messages: unknown[]) {
  return { model: "m", system, messages };
}

function clock(start = 1_000_000) {
  let now = start;
  return {
    now: () => now,
    advance: (ms: number) => {
      now += ms;
    },
  };
}

describe("the token estimator", () => {
  it("counts ceil(UTF-8 bytes / 3.5)", () => {
    expect(estimateTokensOf("abcdefg")).toBe(2);
    expect(estimateTokensOf("é")).toBe(1); // two bytes
    expect(estimateTokensOf("a".repeat(3500))).toBe(1000);
  });
});

describe("Anthropic caching", () => {
  it("orders blocks tools, system, messages and strips cache_control from what is hashed", () => {
    const blocks = anthropicBlocks({
      tools: [{ name: "bash", input_schema: {}, ...MARK }],
      system: [text("sys")],
      messages: [{ role: "user", content: [text("hi", true), text("there")] }],
    });
    expect(blocks.map((b) => b.breakpoint)).toEqual([true, false, true, false]);
    expect(blocks.map((b) => b.json).join("")).not.toContain("cache_control");
    expect(blocks[2]?.json).toContain('"role":"user"');
  });

  it("writes at a breakpoint, then reads the exact prefix up to it; text after the last breakpoint is uncached", () => {
    const cache = new AnthropicCache(clock().now);
    const first = cache.apply(request([text(BIG, true)], [{ role: "user", content: [text("q1")] }]));
    expect(first.cacheReadTokens).toBe(0);
    expect(first.cacheWriteTokens).toBeGreaterThan(ANTHROPIC_MIN_CACHEABLE_TOKENS);
    expect(first.inputTokens).toBeGreaterThan(first.cacheWriteTokens);
    const second = cache.apply(request([text(BIG, true)], [{ role: "user", content: [text("q2 other")] }]));
    expect(second.cacheReadTokens).toBe(first.cacheWriteTokens);
    expect(second.cacheWriteTokens).toBe(0);
  });

  it("misses when one byte before the breakpoint differs", () => {
    const cache = new AnthropicCache(clock().now);
    cache.apply(request([text(BIG, true)], []));
    const changed = cache.apply(request([text(`${BIG}!`, true)], []));
    expect(changed.cacheReadTokens).toBe(0);
    expect(changed.cacheWriteTokens).toBe(changed.inputTokens);
  });

  it("looks back up to 20 blocks from a breakpoint for an earlier entry, not 21", () => {
    const cache = new AnthropicCache(clock().now);
    const head = [text(BIG, true)];
    cache.apply(request(head, []));
    const blocks = (n: number) => Array.from({ length: n }, (_, i) => text(`block ${i}`, i === n - 1));
    // The head's entry ends 19 blocks before the new breakpoint: inside the window (the breakpoint's block + 19).
    const near = cache.apply(request([text(BIG)], [{ role: "user", content: blocks(19) }]));
    expect(near.cacheReadTokens).toBeGreaterThan(ANTHROPIC_MIN_CACHEABLE_TOKENS);
    const farCache = new AnthropicCache(clock().now);
    farCache.apply(request(head, []));
    const far = farCache.apply(request([text(BIG)], [{ role: "user", content: blocks(20) }]));
    expect(far.cacheReadTokens).toBe(0);
  });

  it("reads the longest live entry over all breakpoints and writes only from there to the last breakpoint", () => {
    const cache = new AnthropicCache(clock().now);
    cache.apply(request([text(BIG, true), text(BIG, true)], []));
    const next = cache.apply(
      request([text(BIG, true), text(BIG, true)], [{ role: "user", content: [text(BIG, true), text("tail")] }]),
    );
    const twoSystem = estimateTokensOf(
      anthropicBlocks(request([text(BIG), text(BIG)], []))
        .map((b) => b.json)
        .join(""),
    );
    expect(next.cacheReadTokens).toBe(twoSystem);
    expect(next.cacheWriteTokens).toBeGreaterThan(1000);
    expect(next.inputTokens - next.cacheReadTokens - next.cacheWriteTokens).toBeGreaterThan(0);
  });

  it("writes nothing below the minimum cacheable length", () => {
    const cache = new AnthropicCache(clock().now);
    const small = cache.apply(request([text("short system", true)], [{ role: "user", content: [text("hi", true)] }]));
    expect(small.cacheWriteTokens).toBe(0);
    expect(cache.apply(request([text("short system", true)], [])).cacheReadTokens).toBe(0);
  });

  it("treats a top-level cache_control as a breakpoint on the last block (automatic caching)", () => {
    const cache = new AnthropicCache(clock().now);
    const body = {
      ...request([text(BIG)], [{ role: "user", content: [text("q")] }]),
      cache_control: MARK.cache_control,
    };
    expect(cache.apply(body).cacheWriteTokens).toBeGreaterThan(ANTHROPIC_MIN_CACHEABLE_TOKENS);
    expect(cache.apply(body).cacheReadTokens).toBe(cache.apply(body).inputTokens);
  });

  it("refuses more than 4 breakpoints", () => {
    const cache = new AnthropicCache(clock().now);
    const five = Array.from({ length: 5 }, (_, i) => text(`s${i}`, true));
    expect(() => cache.apply(request(five, []))).toThrow(CacheRuleError);
    expect(() => cache.apply(request(five.slice(0, 4), []))).not.toThrow();
  });

  it("forgets an entry 5 minutes after its last use, and a read renews it", () => {
    const time = clock();
    const cache = new AnthropicCache(time.now);
    const body = request([text(BIG, true)], []);
    cache.apply(body);
    time.advance(CACHE_TTL_MS - 1000);
    expect(cache.apply(body).cacheReadTokens).toBeGreaterThan(0); // renewed here
    time.advance(CACHE_TTL_MS - 1000);
    expect(cache.apply(body).cacheReadTokens).toBeGreaterThan(0);
    time.advance(CACHE_TTL_MS + 1);
    expect(cache.apply(body).cacheReadTokens).toBe(0);
  });
});

describe("OpenAI-compatible prefix caching", () => {
  const system = { role: "system", content: BIG };

  it("caches the longest common prefix with an earlier prompt, from 1,024 tokens in 128-token steps", () => {
    const cache = new OpenAiPrefixCache(clock().now);
    expect(cache.apply({ model: "m", messages: [system, { role: "user", content: "one" }] }).cacheReadTokens).toBe(0);
    const second = cache.apply({ model: "m", messages: [system, { role: "user", content: "two" }] });
    expect(second.cacheReadTokens).toBeGreaterThanOrEqual(1024);
    expect(second.cacheReadTokens % 128).toBe(0);
    expect(second.inputTokens - second.cacheReadTokens).toBeLessThan(128 + 10);
    expect(second.cacheWriteTokens).toBe(0);
  });

  it("caches nothing under 1,024 common tokens", () => {
    const cache = new OpenAiPrefixCache(clock().now);
    const short = { role: "system", content: "s".repeat(3000) }; // ~860 tokens
    cache.apply({ model: "m", messages: [short, { role: "user", content: "one" }] });
    expect(cache.apply({ model: "m", messages: [short, { role: "user", content: "two" }] }).cacheReadTokens).toBe(0);
  });

  it("expires prompts after 5 minutes unused", () => {
    const time = clock();
    const cache = new OpenAiPrefixCache(time.now);
    cache.apply({ model: "m", messages: [system] });
    time.advance(CACHE_TTL_MS + 1);
    expect(cache.apply({ model: "m", messages: [system] }).cacheReadTokens).toBe(0);
  });

  it("measures common prefixes exactly across its chunked comparison", () => {
    const a = `${"x".repeat(10_000)}a`;
    expect(commonPrefixLength(a, `${"x".repeat(10_000)}b`)).toBe(10_000);
    expect(commonPrefixLength(a, a)).toBe(a.length);
    expect(commonPrefixLength("", a)).toBe(0);
  });
});
