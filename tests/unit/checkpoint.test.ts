import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type CutStep, cutLimit, LOW_WATER, liveBudget, liveTokens, planCut } from "../../src/core/checkpoint-cut.js";
import {
  type CheckpointStep,
  checkpointLines,
  expandFolded,
  expandFoldedRef,
  foldAlike,
  growCheckpoint,
  renderCheckpoint,
  renderCheckpointAt,
} from "../../src/core/checkpoint-lines.js";
import { estimateTokens } from "../../src/core/context.js";

const expand = expandFolded;

const step: fc.Arbitrary<CutStep> = fc.record({
  tokens: fc.integer({ min: 1, max: 3000 }),
  complete: fc.boolean(),
  stored: fc.boolean(),
});

describe("where a checkpoint cuts the live turn (issue 36)", () => {
  it("never cuts past an incomplete or unstored step, never moves back, and fits whenever it says so", () => {
    fc.assert(
      fc.property(
        fc.array(step, { maxLength: 60 }),
        fc.integer({ min: 0, max: 60 }),
        fc.integer({ min: 0, max: 40_000 }),
        fc.integer({ min: 0, max: 40 }),
        (steps, previousCut, budget, perLine) => {
          const checkpointTokens = (cut: number) => (cut === 0 ? 0 : 50 + perLine * cut);
          const plan = planCut({ steps, previousCut, budget, checkpointTokens });
          const previous = Math.min(previousCut, steps.length);
          expect(plan.cut).toBeGreaterThanOrEqual(previous);
          if (plan.cut > previous) expect(plan.cut).toBeLessThanOrEqual(cutLimit(steps));
          for (let i = previous; i < plan.cut; i++) {
            expect(steps[i]?.complete && steps[i]?.stored).toBe(true);
          }
          // The latest step's results, which the model has not seen yet, are never replaced by a line.
          if (plan.cut > previous) expect(plan.cut).toBeLessThan(steps.length);
          expect(plan.tokens).toBe(liveTokens({ steps, checkpointTokens }, plan.cut));
          if (plan.fits) expect(plan.tokens).toBeLessThanOrEqual(budget);
          if (liveTokens({ steps, checkpointTokens }, previous) <= budget) {
            expect(plan).toMatchObject({ cut: previous, moved: false, fits: true });
          }
          if (!plan.fits) {
            // Nothing allowed would have fitted.
            for (let cut = previous; cut <= Math.max(previous, cutLimit(steps)); cut++) {
              expect(liveTokens({ steps, checkpointTokens }, cut)).toBeGreaterThan(budget);
            }
          }
        },
      ),
    );
  });

  it("cuts the latest step only when allowed and when no cut that keeps it verbatim fits", () => {
    const steps = [800, 800, 3000].map((tokens) => ({ tokens, complete: true, stored: true }));
    const checkpointTokens = (cut: number) => (cut === 0 ? 0 : 50 * cut);
    expect(planCut({ steps, previousCut: 0, budget: 2000, checkpointTokens })).toMatchObject({ cut: 2, fits: false });
    expect(planCut({ steps, previousCut: 0, budget: 2000, checkpointTokens, latestCuttable: true })).toMatchObject({
      cut: 3,
      fits: true,
    });
    // A verbatim latest step that fits is kept, allowed or not.
    expect(planCut({ steps, previousCut: 0, budget: 3200, checkpointTokens, latestCuttable: true })).toMatchObject({
      cut: 2,
      fits: true,
    });
  });

  it("a moved cut is the smallest whose verbatim steps reach the low-water mark (or, failing that, the budget)", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 3000 }), { minLength: 1, maxLength: 80 }),
        fc.integer({ min: 100, max: 40_000 }),
        (sizes, budget) => {
          const steps = sizes.map((tokens) => ({ tokens, complete: true, stored: true }));
          const checkpointTokens = (cut: number) => (cut === 0 ? 0 : 40 + 12 * cut);
          const plan = planCut({ steps, previousCut: 0, budget, checkpointTokens });
          if (!plan.moved || !plan.fits) return;
          const at = (cut: number) => liveTokens({ steps, checkpointTokens }, cut);
          const verbatim = (cut: number) => sizes.slice(cut).reduce((a, b) => a + b, 0);
          const low = Math.floor(budget * LOW_WATER);
          if (verbatim(plan.cut) <= low) {
            // No smaller cut reaches the mark and fits.
            for (let cut = 1; cut < plan.cut; cut++) expect(verbatim(cut) > low || at(cut) > budget).toBe(true);
          } else if (plan.cut < cutLimit(steps)) {
            // The mark is out of reach: the smallest cut that fits.
            for (let cut = 1; cut < plan.cut; cut++) expect(at(cut)).toBeGreaterThan(budget);
          }
        },
      ),
    );
  });

  it("a checkpoint near its share does not make the cut creep: it moves in chunks still", () => {
    // Every step costs 1,000 verbatim and 100 as a line, and the checkpoint stops growing just under half the budget:
    // alone with the latest step it is above a low-water mark of half the budget on the whole live part.
    const budget = 10_000;
    const cap = 4_800;
    const checkpointTokens = (cut: number) => (cut === 0 ? 0 : Math.min(cap, 100 * cut));
    let cut = 0;
    let moves = 0;
    const steps: CutStep[] = [];
    for (let n = 0; n < 200; n++) {
      steps.push({ tokens: 1_000, complete: true, stored: true });
      const plan = planCut({ steps, previousCut: cut, budget, checkpointTokens });
      expect(plan.fits).toBe(true);
      if (plan.moved) moves += 1;
      cut = plan.cut;
    }
    // A move leaves the checkpoint and at most the low-water mark verbatim (at least the latest step): the steps that
    // follow fill the rest of the budget before the next move.
    const left = cap + Math.max(1_000, Math.floor(budget * LOW_WATER));
    const between = Math.floor((budget - left) / 1_000);
    expect(between).toBeGreaterThanOrEqual(2);
    expect(moves).toBeLessThanOrEqual(Math.ceil(200 / between) + 1);
  });

  it("moves in chunks: along a growing turn every request fits and the cut moves rarely", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 500 }), { minLength: 1, maxLength: 300 }),
        fc.integer({ min: 8000, max: 40_000 }),
        (sizes, budget) => {
          const checkpointTokens = (cut: number) => (cut === 0 ? 0 : 60 + 3 * cut);
          let cut = 0;
          let moves = 0;
          const steps: CutStep[] = [];
          for (const tokens of sizes) {
            steps.push({ tokens, complete: true, stored: true });
            const plan = planCut({ steps, previousCut: cut, budget, checkpointTokens });
            expect(plan.fits).toBe(true);
            if (plan.moved) moves += 1;
            cut = plan.cut;
          }
          // Each move leaves the verbatim steps at most at the low-water mark (or the latest step alone, ≤ 500) beside
          // the checkpoint (≤ 60 + 3 per step), so the next move comes after at least the rest of the budget.
          const total = sizes.reduce((a, b) => a + b, 0);
          const freed = budget * (1 - LOW_WATER) - 500 - 60 - 3 * sizes.length;
          expect(freed).toBeGreaterThan(0);
          expect(moves).toBeLessThanOrEqual(Math.ceil(total / freed) + 1);
        },
      ),
    );
  });
});

const call = fc.record({
  ref: fc.option(
    fc.nat({ max: 100_000 }).map((n) => `${n}+1`),
    { nil: undefined },
  ),
  tool: fc.constantFrom("bash", "read", "grep"),
  args: fc.string({ maxLength: 300 }),
  result: fc.string({ maxLength: 600 }),
  failed: fc.boolean(),
});

describe("what a checkpoint says (issue 36)", () => {
  it("a folded ref opens into the refs it stands for; anything else is not a folded ref", () => {
    expect(expandFoldedRef("{10..16..3}+1")).toEqual(["10+1", "13+1", "16+1"]);
    expect(expandFoldedRef("{4..6}+1")).toEqual(["4+1", "5+1", "6+1"]);
    for (const ref of ["10+1", "{6..4}+1", "{4..9..2}+1", "{0..99999}+1", "{1..3}+2"]) {
      expect(expandFoldedRef(ref)).toBeUndefined();
    }
    const lines = checkpointLines(
      Array.from({ length: 9 }, (_, k) => [
        { ref: `${10 + 3 * k}+1`, tool: "bash", args: "", result: `STEP ${k + 1}/9 DONE`, failed: false },
      ]),
      3,
    );
    expect(lines).toHaveLength(1);
    expect(expandFoldedRef((lines[0] as string).split("|")[0] as string)).toEqual(
      expand(lines[0] as string).map((l) => l.split("|")[0]),
    );
  });

  it("folding alike lines loses nothing: expanding the folded lines gives back every line, in order", () => {
    const line = fc.tuple(
      fc.constantFrom("a", "b|x ", "bash → STEP "),
      fc.nat({ max: 50 }),
      fc.constantFrom("", "/40 DONE", " 007"),
    );
    fc.assert(
      fc.property(fc.array(line, { maxLength: 60 }), (parts) => {
        const lines = parts.map(([a, n, b]) => `${a}${n}${b}`);
        expect(foldAlike(lines).flatMap(expand)).toEqual(lines);
      }),
    );
  });

  it("a run of numbered steps folds into one line whose ranges name every step and every ref", () => {
    const steps: CheckpointStep[] = Array.from({ length: 37 }, (_, i) => [
      {
        ref: `${10 + 3 * i}+1`,
        tool: "bash",
        args: `{"command":"printf 'STEP %s/%s DONE\\n' ${i + 1} 40"}`,
        result: `STEP ${i + 1}/40 DONE\nfiller line 1\n`,
        failed: false,
      },
    ]);
    expect(checkpointLines(steps, 3)).toEqual(["{10..118..3}+1|bash → STEP {1..37}/40 DONE"]);
  });

  it("keeps one line per call with its ref at levels 0-2, picks the finest level that fits, escapes data", () => {
    fc.assert(
      fc.property(
        fc.array(fc.array(call, { maxLength: 3 }), { minLength: 1, maxLength: 20 }),
        fc.integer({ min: 0, max: 20_000 }),
        (steps, cap) => {
          const rendered = renderCheckpoint(steps, cap);
          const calls = steps.flat();
          for (let level = 0; level < 3; level++) {
            const lines = checkpointLines(steps, level);
            expect(lines).toHaveLength(calls.length);
            lines.forEach((l, i) => {
              expect(l.startsWith(`${calls[i]?.ref ?? "-"}|`)).toBe(true);
              expect(l).not.toMatch(/[\n<>]/);
            });
          }
          if (rendered.level > 0) expect(renderCheckpointAt(steps, rendered.level - 1).tokens).toBeGreaterThan(cap);
          if (rendered.level < 3) expect(rendered.tokens).toBeLessThanOrEqual(Math.max(cap, rendered.tokens));
          expect(rendered.text.startsWith("<turn_checkpoint>\n")).toBe(true);
          expect(rendered.text.endsWith("</turn_checkpoint>")).toBe(true);
        },
      ),
    );
  });

  it("a checkpoint whose cut moved at the same level only gained lines at its end", () => {
    fc.assert(
      fc.property(
        fc.array(fc.array(call, { maxLength: 2 }), { minLength: 2, maxLength: 20 }),
        fc.nat(2),
        (steps, level) => {
          const k = Math.floor(steps.length / 2);
          const before = checkpointLines(steps.slice(0, k), level);
          const after = checkpointLines(steps, level);
          expect(after.slice(0, before.length)).toEqual(before);
        },
      ),
    );
  });
});

describe("a checkpoint grown from the one sent before (issue 36)", () => {
  it("keeps the sent text as its prefix while it fits its cap, else is the fresh rendering", () => {
    fc.assert(
      fc.property(
        fc.array(fc.array(call, { minLength: 1, maxLength: 2 }), { minLength: 2, maxLength: 30 }),
        fc.integer({ min: 50, max: 3_000 }),
        fc.nat(),
        (steps, cap, split) => {
          const k = 1 + (split % (steps.length - 1));
          const stepsOf = (a: number, b: number) => steps.slice(a, b);
          const first = growCheckpoint(undefined, k, stepsOf, cap);
          expect(first).toEqual(renderCheckpoint(steps.slice(0, k), cap));
          const grown = growCheckpoint({ steps: k, level: first.level, data: first.data }, steps.length, stepsOf, cap);
          // The sent checkpoint with the new steps' lines added before its closing tag, at its level.
          const open = first.text.slice(0, first.text.length - "</turn_checkpoint>".length);
          const added = checkpointLines(steps.slice(k), first.level);
          const appended = `${open}${added.join("\n")}\n</turn_checkpoint>`;
          if (estimateTokens(appended) <= cap) {
            expect(grown.text).toBe(appended);
            expect(grown.level).toBe(first.level);
            expect(grown.data.slice(first.data.length).flatMap(expand)).toEqual(
              checkpointLines(steps.slice(k), Math.min(first.level, 2)),
            );
          } else expect(grown).toEqual(renderCheckpoint(steps, cap));
        },
      ),
    );
  });
});

describe("the live part's budget (issue 36)", () => {
  it("is the request's room, at most a quarter of the window but never capped below 16k tokens", () => {
    expect(liveBudget(9_000, 16_000)).toBe(9_000);
    expect(liveBudget(17_000, 32_000)).toBe(16_000);
    expect(liveBudget(180_000, 200_000)).toBe(50_000);
    expect(liveBudget(30_000, 200_000)).toBe(30_000);
  });
});
