import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  fitRequestSize,
  MAX_RATIO,
  MIN_RATIO,
  MIN_SPREAD_TOKENS,
  SIZE_SAMPLES,
  withSample,
} from "../../src/core/request-sizing.js";

describe("the request's real size from the provider's reports (issue 36)", () => {
  it("recovers the instructions and the tokens per estimated token from reports on a line", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 50_000 }),
        fc.double({ min: MIN_RATIO, max: MAX_RATIO, noNaN: true }),
        fc.array(fc.integer({ min: 0, max: 150_000 }), { minLength: 2, maxLength: SIZE_SAMPLES }),
        (overhead, ratio, estimates) => {
          fc.pre(Math.max(...estimates) - Math.min(...estimates) >= 2_000);
          const samples = estimates.map((estimated) => ({
            estimated,
            reported: Math.round(overhead + ratio * estimated),
          }));
          const fitted = fitRequestSize(samples);
          expect(fitted).toBeDefined();
          // Reports are whole tokens: the fit is off by rounding only.
          expect(Math.abs((fitted?.ratio ?? 0) - ratio)).toBeLessThan(0.01);
          const latest = estimates.at(-1) as number;
          expect(
            Math.abs((fitted?.overhead ?? 0) + (fitted?.ratio ?? 0) * latest - (overhead + ratio * latest)),
          ).toBeLessThan(2);
        },
      ),
    );
  });

  it("fits nothing from one report or from estimates too close together, and keeps the ratio within its bounds", () => {
    expect(fitRequestSize([{ estimated: 1_000, reported: 9_000 }])).toBeUndefined();
    expect(
      fitRequestSize([
        { estimated: 1_000, reported: 9_000 },
        { estimated: 1_000 + MIN_SPREAD_TOKENS - 1, reported: 9_300 },
      ]),
    ).toBeUndefined();
    const steep = fitRequestSize([
      { estimated: 1_000, reported: 1_000 },
      { estimated: 2_000, reported: 11_000 },
    ]);
    expect(steep?.ratio).toBe(MAX_RATIO);
    expect(steep?.overhead).toBe(11_000 - MAX_RATIO * 2_000);
    const flat = fitRequestSize([
      { estimated: 1_000, reported: 5_000 },
      { estimated: 3_000, reported: 5_000 },
    ]);
    expect(flat?.ratio).toBe(MIN_RATIO);
  });

  it("keeps the last SIZE_SAMPLES samples", () => {
    let samples: { estimated: number; reported: number }[] = [];
    for (let i = 0; i < SIZE_SAMPLES + 3; i++) samples = withSample(samples, { estimated: i, reported: i });
    expect(samples.map((s) => s.estimated)).toEqual(Array.from({ length: SIZE_SAMPLES }, (_, i) => i + 3));
  });
});
