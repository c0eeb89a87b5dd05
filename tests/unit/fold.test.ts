import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  appendWithoutFit,
  applyFoldEvent,
  EMPTY_FOLD,
  type FoldEvent,
  type FoldParams,
  type FoldState,
  type NodeBytes,
  PLACEHOLDER_BYTES,
  project,
  tilingProblem,
  viewBytes,
} from "../../src/core/fold.js";
import { endOf, type NodeAddress, startOf } from "../../src/core/tree.js";

const key = (node: NodeAddress): string => `${node.level}:${node.index}`;

/** A random history: leaves appended in order and nodes built once both children exist, with summary sizes. */
interface History {
  events: FoldEvent[];
  bytes: Map<string, number>;
  params: FoldParams;
}

const historyArb = fc
  .record({
    steps: fc.array(fc.nat(99), { minLength: 1, maxLength: 160 }),
    leafBytes: fc.array(fc.integer({ min: 20, max: 600 }), { minLength: 160, maxLength: 160 }),
    shrink: fc.array(fc.double({ min: 0.3, max: 0.99, noNaN: true }), { minLength: 400, maxLength: 400 }),
    upper: fc.integer({ min: 800, max: 6000 }),
    lowerShare: fc.double({ min: 0.5, max: 1, noNaN: true }),
  })
  .map(({ steps, leafBytes, shrink, upper, lowerShare }): History => {
    const bytes = new Map<string, number>();
    const built = new Set<string>();
    const events: FoldEvent[] = [];
    let leafCount = 0;
    let s = 0;
    const buildable = (): NodeAddress[] => {
      const out: NodeAddress[] = [];
      for (let i = 0; i < leafCount; i++) if (!built.has(`0:${i}`)) out.push({ level: 0, index: i });
      for (let level = 1; 2 ** level <= leafCount; level++) {
        for (let index = 0; (index + 1) * 2 ** level <= leafCount; index++) {
          const key = `${level}:${index}`;
          if (!built.has(key) && built.has(`${level - 1}:${2 * index}`) && built.has(`${level - 1}:${2 * index + 1}`)) {
            out.push({ level, index });
          }
        }
      }
      return out;
    };
    for (const step of steps) {
      const candidates = buildable();
      if (step < 45 || candidates.length === 0) {
        events.push({ type: "append", index: leafCount });
        leafCount += 1;
      } else {
        const node = candidates[step % candidates.length] as NodeAddress;
        const size =
          node.level === 0
            ? (leafBytes[node.index % leafBytes.length] as number)
            : Math.max(
                1,
                Math.floor(
                  ((bytes.get(`${node.level - 1}:${2 * node.index}`) as number) +
                    (bytes.get(`${node.level - 1}:${2 * node.index + 1}`) as number)) *
                    (shrink[s++ % shrink.length] as number),
                ),
              );
        bytes.set(key(node), Math.min(size, 600));
        built.add(key(node));
        events.push({ type: "built", node });
      }
    }
    return { events, bytes, params: { upperBytes: upper, lowerBytes: Math.floor(upper * lowerShare) } };
  });

/** Node sizes as they were when event `upTo` had been applied. */
function sizesAt(history: History, upTo: number): NodeBytes {
  const built = new Set<string>();
  for (const event of history.events.slice(0, upTo + 1)) if (event.type === "built") built.add(key(event.node));
  return (node) => (built.has(key(node)) ? history.bytes.get(key(node)) : undefined);
}

/** Every k where cover[k] and cover[k + 1] are siblings whose parent is built, with that parent, in order. */
function mergeablePairs(
  cover: readonly NodeAddress[],
  bytesOf: NodeBytes,
): { k: number; a: NodeAddress; b: NodeAddress; parent: NodeAddress }[] {
  const pairs: { k: number; a: NodeAddress; b: NodeAddress; parent: NodeAddress }[] = [];
  for (let k = 0; k + 1 < cover.length; k++) {
    const a = cover[k] as NodeAddress;
    const b = cover[k + 1] as NodeAddress;
    if (a.level !== b.level || a.index % 2 !== 0 || b.index !== a.index + 1) continue;
    const parent = { level: a.level + 1, index: a.index / 2 };
    if (bytesOf(parent) === undefined) continue;
    pairs.push({ k, a, b, parent });
  }
  return pairs;
}

/** The fold written straight from seed 002 §5.2, recomputing everything: the reference for the real one. */
function referenceFold(history: History, upTo: number): FoldState {
  let parts: NodeAddress[] = [];
  let leafCount = 0;
  let shrinking = false;
  for (let e = 0; e <= upTo; e++) {
    const event = history.events[e] as FoldEvent;
    const bytesOf = sizesAt(history, e);
    if (event.type === "append") {
      parts.push({ level: 0, index: event.index });
      leafCount += 1;
    }
    const line = (p: NodeAddress) => (bytesOf(p) ?? PLACEHOLDER_BYTES) + `${startOf(p)}+${2 ** p.level}|\n`.length;
    const size = () => parts.reduce((sum, p) => sum + line(p), 0);
    if (size() > history.params.upperBytes) shrinking = true;
    while (shrinking && size() > history.params.lowerBytes) {
      let best: { k: number; due: number; start: number } | undefined;
      for (const { k, a, b, parent } of mergeablePairs(parts, bytesOf)) {
        if (line(parent) >= line(a) + line(b)) continue;
        const due = (leafCount - startOf(a)) / 2 ** (a.level + 2);
        if (!best || due > best.due || (due === best.due && startOf(a) < best.start))
          best = { k, due, start: startOf(a) };
      }
      if (!best) break;
      const a = parts[best.k] as NodeAddress;
      parts = [...parts.slice(0, best.k), { level: a.level + 1, index: a.index / 2 }, ...parts.slice(best.k + 2)];
    }
    if (size() <= history.params.lowerBytes) shrinking = false;
  }
  return { parts, leafCount, shrinking };
}

function runFold(
  history: History,
  onStep: (before: FoldState, after: FoldState, e: number, merged: readonly NodeAddress[]) => void,
) {
  let state = EMPTY_FOLD;
  history.events.forEach((event, e) => {
    const result = applyFoldEvent(state, event, sizesAt(history, e), history.params);
    onStep(state, result.state, e, result.merged);
    state = result.state;
  });
  return state;
}

function contains(outer: NodeAddress, inner: NodeAddress): boolean {
  return startOf(outer) <= startOf(inner) && endOf(inner) <= endOf(outer);
}

describe("view fold (property tests)", () => {
  it("tiles [0, T) after every event, never splits a part, and every merge reduces bytes", () => {
    fc.assert(
      fc.property(historyArb, (history) => {
        runFold(history, (before, after, e, merged) => {
          expect(tilingProblem(after.parts, after.leafCount)).toBeUndefined();
          for (const old of before.parts) expect(after.parts.some((p) => contains(p, old))).toBe(true);
          const bytesOf = sizesAt(history, e);
          for (const parent of merged) {
            const left = { level: parent.level - 1, index: parent.index * 2 };
            const right = { level: parent.level - 1, index: parent.index * 2 + 1 };
            expect(bytesOf(parent)).toBeLessThan(
              (bytesOf(left) ?? PLACEHOLDER_BYTES) + (bytesOf(right) ?? PLACEHOLDER_BYTES),
            );
          }
        });
      }),
      { numRuns: 300 },
    );
  });

  it("equals a refold from scratch written straight from the spec, at every revision", () => {
    fc.assert(
      fc.property(historyArb, (history) => {
        runFold(history, (_before, after, e) => {
          expect(after).toEqual(referenceFold(history, e));
        });
      }),
      { numRuns: 200 },
    );
  });

  it("appends without the parts exactly when the fold would merge nothing (appendWithoutFit)", () => {
    let decided = 0;
    let shrinkingDecided = 0;
    const check = () =>
      fc.assert(
        fc.property(historyArb, (history) => {
          runFold(history, (before, after, e) => {
            const event = history.events[e] as FoldEvent;
            if (event.type !== "append") return;
            // The summary a writer keeps: the size of the parts as the fold measured them before this event.
            const summary = {
              leafCount: before.leafCount,
              bytes: viewBytes(before.parts, sizesAt(history, e)),
              shrinking: before.shrinking,
            };
            const fast = appendWithoutFit(summary, event.index, history.params);
            if (!fast) return;
            decided += 1;
            if (before.shrinking) shrinkingDecided += 1;
            expect(after.parts).toEqual([...before.parts, { level: 0, index: event.index }]);
            expect(fast).toEqual({
              leafCount: after.leafCount,
              bytes: viewBytes(after.parts, sizesAt(history, e)),
              shrinking: after.shrinking,
            });
          });
        }),
        { numRuns: 300 },
      );
    // Both answers must be exercised (the histories build slowly enough to get stuck over budget). A run of 300
    // random histories reaches a view stuck in shrinking mode more than 10 times almost always, not always (6 once in
    // a full suite): more batches of new random histories, up to 4 in all, until it has, rather than a fixed seed.
    check();
    for (let batch = 1; batch < 4 && shrinkingDecided <= 10; batch++) check();
    expect(decided).toBeGreaterThan(1000);
    expect(shrinkingDecided).toBeGreaterThan(10);
  });

  it("is within budget once the needed parents are built", () => {
    fc.assert(
      fc.property(historyArb, (history) => {
        // Build every remaining node bottom-up (children first), as the compactor eventually does.
        const complete: History = { ...history, events: [...history.events], bytes: new Map(history.bytes) };
        const leafCount = history.events.filter((e) => e.type === "append").length;
        const built = new Set(history.events.flatMap((e) => (e.type === "built" ? [key(e.node)] : [])));
        for (let level = 0; 2 ** level <= leafCount; level++) {
          for (let index = 0; (index + 1) * 2 ** level <= leafCount; index++) {
            const key = `${level}:${index}`;
            if (built.has(key)) continue;
            const size =
              level === 0
                ? 300
                : Math.floor(
                    ((complete.bytes.get(`${level - 1}:${2 * index}`) as number) +
                      (complete.bytes.get(`${level - 1}:${2 * index + 1}`) as number)) *
                      0.6,
                  );
            complete.bytes.set(key, Math.min(size, 500));
            complete.events.push({ type: "built", node: { level, index } });
          }
        }
        const final = runFold(complete, () => {});
        const bytesOf = sizesAt(complete, complete.events.length - 1);
        // The coarsest cover has one node per set bit of T; when it fits the lower threshold, the fold must end
        // within the upper one and out of shrinking mode (which it leaves only at or below the lower one).
        const blocks = leafCount.toString(2).replace(/0/g, "").length;
        if (blocks * (600 + 16) <= complete.params.lowerBytes) {
          expect(viewBytes(final.parts, bytesOf)).toBeLessThanOrEqual(complete.params.upperBytes);
          expect(final.shrinking).toBe(false);
        }
      }),
      { numRuns: 200 },
    );
  });
});

/** Every cover of the parts' range made of the parts and their built ancestors (small cases only). */
function allCovers(parts: readonly NodeAddress[], bytesOf: NodeBytes): NodeAddress[][] {
  let covers: NodeAddress[][] = [[...parts]];
  const seen = new Set(covers.map((c) => c.map(key).join(",")));
  for (let i = 0; i < covers.length; i++) {
    const cover = covers[i] as NodeAddress[];
    for (const { k, parent } of mergeablePairs(cover, bytesOf)) {
      const next = [...cover.slice(0, k), parent, ...cover.slice(k + 2)];
      const coverKey = next.map(key).join(",");
      if (!seen.has(coverKey)) {
        seen.add(coverKey);
        covers = [...covers, next];
      }
    }
  }
  return covers;
}

describe("projection (property tests)", () => {
  it("returns a coarser valid cover within the budget, or the true minimum when none fits", () => {
    fc.assert(
      fc.property(historyArb, fc.integer({ min: 50, max: 5000 }), (history, budget) => {
        const short: History = { ...history, events: history.events.slice(0, 60) };
        const state = runFold(short, () => {});
        const bytesOf = sizesAt(short, short.events.length - 1);
        const projection = project(state.parts, state.leafCount, bytesOf, budget);
        expect(tilingProblem(projection.parts, state.leafCount)).toBeUndefined();
        for (const part of state.parts) expect(projection.parts.some((p) => contains(p, part))).toBe(true);
        for (const part of projection.parts) {
          const isOriginal = state.parts.some((p) => key(p) === key(part));
          expect(isOriginal || bytesOf(part) !== undefined).toBe(true);
        }
        const covers = state.parts.length <= 14 ? allCovers(state.parts, bytesOf) : undefined;
        const minimum = covers ? Math.min(...covers.map((c) => viewBytes(c, bytesOf))) : undefined;
        if (projection.fits) {
          expect(projection.bytes).toBe(viewBytes(projection.parts, bytesOf));
          expect(projection.bytes).toBeLessThanOrEqual(budget);
        } else {
          expect(projection.minimalBytes).toBeGreaterThan(budget);
          expect(projection.minimalBytes).toBe(viewBytes(projection.parts, bytesOf));
          if (minimum !== undefined) expect(projection.minimalBytes).toBe(minimum);
        }
        if (minimum !== undefined && minimum <= budget) expect(projection.fits).toBe(true);
      }),
      { numRuns: 300 },
    );
  });
});
