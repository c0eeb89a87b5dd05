import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { renderCost, sinceOf } from "../../src/cli/commands/cost.js";
import { spendOf } from "../../src/compactor/budget.js";
import { stitchContext } from "../../src/compactor/context.js";
import { costOf, DEFAULT_PRICES, parsePriceOverrides, priceOf, priceTable } from "../../src/compactor/prices.js";
import { answerProblem } from "../../src/core/answer-checks.js";
import {
  FALLBACK_LABEL,
  fallbackLeafText,
  fallbackParentText,
  fallbackTurnText,
  isFallbackText,
} from "../../src/core/fallback.js";
import { endOf, type NodeAddress } from "../../src/core/tree.js";

describe("the price table", () => {
  it("prices a call from its uncached, cache-read, cache-written and output tokens", () => {
    const price = priceOf(DEFAULT_PRICES, "anthropic", "claude-haiku-4-5");
    expect(price).toEqual({ input: 1, cacheRead: 0.1, cacheWrite: 1.25, output: 5 });
    const tokens = {
      inputTokens: 1_000_000,
      cacheReadTokens: 800_000,
      cacheWriteTokens: 100_000,
      outputTokens: 10_000,
    };
    // 100k uncached at $1, 800k read at $0.10, 100k written at $1.25, 10k out at $5 per million.
    expect(costOf(price as NonNullable<typeof price>, tokens)).toBeCloseTo(0.1 + 0.08 + 0.125 + 0.05, 12);
  });

  it("matches dated ids and wildcards, and leaves unknown models unpriced", () => {
    expect(priceOf(DEFAULT_PRICES, "anthropic", "claude-haiku-4-5-20251001")).toEqual(
      DEFAULT_PRICES["anthropic:claude-haiku-4-5"],
    );
    expect(priceOf(DEFAULT_PRICES, "fake", "fake-extractive/1")?.input).toBe(0);
    expect(priceOf(DEFAULT_PRICES, "openai-compatible", "llama3.1:8b")).toBeUndefined();
  });

  it("takes overrides from OPTCHAT_PRICES and says which key is wrong", () => {
    const table = priceTable(
      parsePriceOverrides(
        '{"openai-compatible:*": {"input": 0.2, "output": 0.4}, "openai:gpt-4.1-mini": {"input": 9, "output": 9, "cacheRead": 1}}',
      ),
    );
    expect(priceOf(table, "openai-compatible", "llama3.1:8b")).toEqual({
      input: 0.2,
      cacheRead: 0.2,
      cacheWrite: 0.2,
      output: 0.4,
    });
    expect(priceOf(table, "openai", "gpt-4.1-mini")?.cacheRead).toBe(1);
    expect(() => parsePriceOverrides("{")).toThrow(/not JSON/);
    expect(() => parsePriceOverrides('{"haiku": {"input": 1, "output": 1}}')).toThrow(/'haiku' is not provider:model/);
    expect(() => parsePriceOverrides('{"a:b": {"input": -1, "output": 1}}')).toThrow(/'a:b' needs/);
  });

  it("counts the tokens of unpriced models apart, and at the conservative price against the caps", () => {
    const row = {
      calls: 2,
      failedCalls: 0,
      inputTokens: 1000,
      cacheReadTokens: 0,
      cacheWriteTokens: 0,
      outputTokens: 10,
    };
    const spend = spendOf(
      [
        { ...row, provider: "anthropic", model: "claude-haiku-4-5" },
        { ...row, provider: "openai-compatible", model: "llama" },
      ],
      DEFAULT_PRICES,
    );
    expect(spend).toMatchObject({ calls: 4, tokens: 2020, unpricedTokens: 1010 });
    // Issue 39: every token counts against the money cap; an unpriced model at UNPRICED_PRICE ($3 in, $15 out).
    expect(spend.unpricedUsd).toBeCloseTo((1000 * 3 + 10 * 15) / 1e6, 12);
    expect(spend.costUsd).toBeCloseTo((1000 * 1 + 10 * 5) / 1e6 + (1000 * 3 + 10 * 15) / 1e6, 12);
  });
});

describe("optchat cost", () => {
  it("reads --since as Nd, a date or an ISO time", () => {
    const now = new Date("2026-03-10T15:00:00Z");
    expect(sinceOf("1d", now).toISOString()).toBe("2026-03-10T00:00:00.000Z");
    expect(sinceOf("7d", now).toISOString()).toBe("2026-03-04T00:00:00.000Z");
    expect(sinceOf("2026-01-31", now).toISOString()).toBe("2026-01-31T00:00:00.000Z");
    expect(() => sinceOf("last week", now)).toThrow(/--since/);
  });

  it("says so when there is nothing to total", () => {
    const empty = {
      since: "2026-03-04T00:00:00.000Z",
      scopeId: null,
      sessionId: null,
      lines: [],
      byDay: [],
      byScope: [],
      bySession: [],
      total: {
        calls: 0,
        failedCalls: 0,
        inputTokens: 0,
        cacheReadTokens: 0,
        cacheWriteTokens: 0,
        outputTokens: 0,
        costUsd: 0,
        unpricedTokens: 0,
        cacheReadShare: null,
      },
      fallbackNodes: 0,
    };
    expect(renderCost(empty, false)).toEqual([
      "compactor cost since 2026-03-04T00:00:00.000Z (UTC days; prices: built-in table, USD)",
      "no compactor calls in this period",
    ]);
  });
});

describe("fallback lines (seed 000 §10)", () => {
  it("say what they are first and carry no cut text", () => {
    for (const text of [fallbackLeafText("tool_result", 14213), fallbackParentText(8)]) {
      expect(text.startsWith(FALLBACK_LABEL)).toBe(true);
      expect(isFallbackText(text)).toBe(true);
    }
    expect(fallbackLeafText("tool_result", 14213)).toBe(`${FALLBACK_LABEL} tool_result: one message of 14,213 bytes`);
    expect(isFallbackText(fallbackTurnText("[turn completed]", 12))).toBe(true);
    expect(isFallbackText("user: a real summary")).toBe(false);
    // A fallback line is not mistaken for an answer problem (it is never sent to a model anyway).
    expect(answerProblem(fallbackParentText(2))).toBeUndefined();
  });
});

describe("the compactor's checkpointed context", () => {
  const leaf = (index: number): NodeAddress => ({ level: 0, index });
  const node = (level: number, index: number): NodeAddress => ({ level, index });
  const text = (part: NodeAddress) => `line ${part.level}/${part.index}`;

  it("is the checkpoint's lines while built, then the current lines that end after them (a straddler whole)", () => {
    // Checkpoint: 0+2, 2+1, 3+1 (not built), 4+1. Current: 0+4 (merged since), 4+1, 5+1.
    const checkpoint = [node(1, 0), leaf(2), leaf(3), leaf(4)];
    const current = [node(2, 0), leaf(4), leaf(5)];
    const stitched = stitchContext(checkpoint, current, (p) => (p.level === 0 && p.index === 3 ? undefined : text(p)));
    expect(stitched.map((e) => e.text)).toEqual(["line 1/0", "line 0/2", "line 2/0", "line 0/4", "line 0/5"]);
  });

  it("covers every message up to the bound exactly once or more, in order", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 64 }), fc.integer({ min: 0, max: 64 }), (cut, total) => {
        const checkpoint = Array.from({ length: cut }, (_, i) => leaf(i));
        const current = Array.from({ length: Math.max(cut, total) }, (_, i) => leaf(i));
        const stitched = stitchContext(checkpoint, current, text);
        const ends = stitched.map((e) => endOf(e.part));
        expect(ends).toEqual([...ends].sort((a, b) => a - b));
        expect(new Set(ends).size).toBe(ends.length);
        expect(ends.at(-1) ?? 0).toBe(Math.max(cut, total));
      }),
    );
  });
});
