import { describe, expect, it } from "vitest";
import { medianInterval, seededRandom } from "../../scripts/bench/common.js";

/** The confidence interval `npm run bench` reports beside a median of paired differences (bench plugin, case run). */
describe("medianInterval", () => {
  it("takes the order statistics the binomial(n, 1/2) tail allows, and none for too few values", () => {
    const ranks = (n: number) => Array.from({ length: n }, (_, i) => n - i); // unsorted on purpose
    expect(medianInterval(ranks(5))).toBeNull(); // 2 * (1/2)^5 = 0.0625 > 0.05
    expect(medianInterval(ranks(6))).toEqual([1, 6]); // 2/64 = 0.031
    expect(medianInterval(ranks(9))).toEqual([2, 8]); // 2 * 10/512 = 0.039
    expect(medianInterval(ranks(15))).toEqual([4, 12]); // 2 * 0.0176; k = 5 would be 2 * 0.059
    expect(medianInterval(ranks(15), 0.8)).toEqual([5, 11]); // 2 * 0.059 = 0.118 <= 0.2
  });

  it("covers the true median at least as often as promised", () => {
    const random = seededRandom(7);
    const trials = 4_000;
    let covered = 0;
    for (let t = 0; t < trials; t++) {
      // A skewed distribution (exponential, median ln 2), as wall-time differences are.
      const sample = Array.from({ length: 15 }, () => -Math.log(1 - random()));
      const interval = medianInterval(sample) as [number, number];
      if (interval[0] <= Math.LN2 && Math.LN2 <= interval[1]) covered += 1;
    }
    // The exact coverage for n = 15 is 1 - 2 * 0.0176 = 0.965; 4,000 trials put the rate within about ±0.01 of it.
    expect(covered / trials).toBeGreaterThan(0.95);
    expect(covered / trials).toBeLessThan(0.98);
  });
});
