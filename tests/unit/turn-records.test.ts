import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { endOf, startOf } from "../../src/core/tree.js";
import { coverOfRuns, formatRuns, runsOfCover } from "../../src/core/turn-records.js";

/** Disjoint, ordered, non-adjacent runs from a list of (gap, length) pairs. */
const runsArbitrary = fc
  .array(fc.tuple(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1, max: 40 })), { maxLength: 8 })
  .chain((pairs) =>
    fc.integer({ min: 0, max: 100 }).map((first) => {
      let at = first;
      return pairs.map(([gap, length], k) => {
        const start = k === 0 ? at : at + gap;
        at = start + length;
        return { start, end: at };
      });
    }),
  );

describe("a turn's records as runs", () => {
  it("covers exactly the runs' records, each node inside one run, and gives the runs back", () => {
    fc.assert(
      fc.property(runsArbitrary, (runs) => {
        const cover = coverOfRuns(runs);
        const covered = cover.flatMap((node) =>
          Array.from({ length: endOf(node) - startOf(node) }, (_, k) => startOf(node) + k),
        );
        const records = runs.flatMap((run) => Array.from({ length: run.end - run.start }, (_, k) => run.start + k));
        expect(covered).toEqual(records);
        for (const node of cover)
          expect(runs.some((run) => run.start <= startOf(node) && endOf(node) <= run.end)).toBe(true);
        expect(runsOfCover(cover)).toEqual(runs);
      }),
    );
  });

  it("reads as inclusive message numbers", () => {
    expect(formatRuns([{ start: 0, end: 3 }])).toBe("0..2");
    expect(
      formatRuns([
        { start: 0, end: 1 },
        { start: 2, end: 4 },
      ]),
    ).toBe("0..0, 2..3");
  });
});
