import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  EPOCH_LIMITS,
  epochDecision,
  sharedLineRange,
  sharedThrough,
  sharedUpdate,
} from "../../plugin/request/cache-epoch.js";

const line = (start: number, count: number, text = "x") => `pub:${start}+${count}|${text}`;

describe("cache epochs (plugin/request/cache-epoch.ts)", () => {
  const fresh = { turns: 1, keptTokens: 0, sharedLines: 5, sharedLinesAtStart: 5 };

  it("continues an epoch within its limits and names the limit that ends it", () => {
    expect(epochDecision(fresh)).toBe("continue");
    expect(epochDecision({ ...fresh, turns: EPOCH_LIMITS.turns - 1 })).toBe("continue");
    expect(epochDecision({ ...fresh, turns: EPOCH_LIMITS.turns })).toMatch(/turns/);
    expect(epochDecision({ ...fresh, keptTokens: EPOCH_LIMITS.keptTokens })).toBe("continue");
    expect(epochDecision({ ...fresh, keptTokens: EPOCH_LIMITS.keptTokens + 1 })).toMatch(/native history kept/);
    expect(epochDecision({ ...fresh, sharedLines: 5 + EPOCH_LIMITS.sharedLinesGained - 1 })).toBe("continue");
    expect(epochDecision({ ...fresh, sharedLines: 5 + EPOCH_LIMITS.sharedLinesGained })).toMatch(/gained/);
    expect(epochDecision({ ...fresh, sharedLines: 4 })).toMatch(/folded/);
  });

  it("keeps an epoch's shared lines within Anthropic's 20-block lookback of its first entry", () => {
    expect(EPOCH_LIMITS.sharedLinesGained).toBeLessThan(20);
  });

  it("reads a shared line's publications from its ref, and nothing else as a shared line", () => {
    expect(sharedLineRange(line(3, 2))).toEqual({ start: 3, end: 5 });
    expect(sharedLineRange("0+8|a session line")).toBeUndefined();
    expect(sharedLineRange("text mentioning pub:1+1|")).toBeUndefined();
    expect(sharedThrough([line(0, 4), line(4, 1), "not a line"])).toBe(5);
    expect(sharedThrough([])).toBe(0);
  });

  it("appends only lines past what was shown that hold another session's publication", () => {
    const lines = [line(0, 4), line(4, 1, "own"), line(5, 1, "other"), line(6, 2, "own+other")];
    const own = new Set([4, 6]);
    const update = sharedUpdate(lines, 4, own);
    expect(update.lines).toEqual([line(5, 1, "other"), line(6, 2, "own+other")]);
    expect(update.through).toBe(8);
    // Nothing new: nothing appended, the mark stays.
    expect(sharedUpdate(lines, 8, own)).toEqual({ lines: [], through: 8 });
    // A line merged across the mark counts only its publications past it.
    expect(sharedUpdate([line(2, 4)], 4, new Set([4, 5])).lines).toEqual([]);
    expect(sharedUpdate([line(2, 4)], 4, new Set([4])).lines).toEqual([line(2, 4)]);
  });

  it("never appends a publication twice, nor one of the session's own (property)", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 1, maxLength: 30 }),
        fc.array(fc.boolean(), { minLength: 90, maxLength: 90 }),
        fc.integer({ min: 1, max: 5 }),
        (sizes, ownFlags, steps) => {
          const own = new Set(ownFlags.flatMap((o, k) => (o ? [k] : [])));
          const all: string[] = [];
          let start = 0;
          for (const size of sizes) {
            all.push(line(start, size));
            start += size;
          }
          let shown = 0;
          const appended: string[] = [];
          for (let step = 1; step <= steps; step++) {
            const visible = all.slice(0, Math.ceil((all.length * step) / steps));
            const update = sharedUpdate(visible, shown, own);
            appended.push(...update.lines);
            expect(update.through).toBeGreaterThanOrEqual(shown);
            shown = update.through;
          }
          expect(new Set(appended).size).toBe(appended.length);
          for (const text of appended) {
            const range = sharedLineRange(text) as { start: number; end: number };
            const seqs = Array.from({ length: range.end - range.start }, (_, k) => range.start + k);
            expect(seqs.some((seq) => !own.has(seq))).toBe(true);
          }
          // Every other session's publication is shown once the whole view was visible.
          const expected = all.filter((text) => {
            const range = sharedLineRange(text) as { start: number; end: number };
            return Array.from({ length: range.end - range.start }, (_, k) => range.start + k).some((s) => !own.has(s));
          });
          expect(appended).toEqual(expected);
        },
      ),
    );
  });
});
