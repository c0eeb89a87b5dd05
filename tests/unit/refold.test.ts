import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { applyFoldEvent, EMPTY_FOLD, type FoldEvent, type FoldState, tilingProblem } from "../../src/core/fold.js";
import { type LoggedEvent, type LoggedSize, refoldLog, replayFold } from "../../src/core/refold.js";
import { parentOf } from "../../src/core/tree.js";

// The replay that the audit checks persisted views against and that a deletion persists as the shared tree's new base
// revision (src/core/refold.ts, src/store/retire-publications.ts).

/** A random log: leaves appended in order, every leaf then built in order, parents built once both children are. */
const logArb = fc
  .record({
    leaves: fc.integer({ min: 1, max: 90 }),
    sizes: fc.array(fc.integer({ min: 10, max: 600 }), { minLength: 400, maxLength: 400 }),
    upper: fc.integer({ min: 300, max: 5000 }),
    removed: fc.array(fc.nat(89), { maxLength: 6 }),
  })
  .map(({ leaves, sizes, upper, removed }) => {
    const events: LoggedEvent[] = [];
    const logged: LoggedSize[] = [];
    const built = new Set<string>();
    let n = 0;
    const build = (level: number, index: number) => {
      n += 1;
      built.add(`${level}:${index}`);
      events.push({ eventNo: n, event: { type: "built", node: { level, index } } });
      logged.push({ level, index, bytes: sizes[n % sizes.length] as number, treeEvent: n });
      // A parent is built as soon as both its children are (readiness, seed 002 §4.1).
      if (index % 2 === 1 && built.has(`${level}:${index - 1}`)) build(level + 1, index >> 1);
    };
    for (let i = 0; i < leaves; i++) {
      n += 1;
      events.push({ eventNo: n, event: { type: "append", index: i } });
    }
    for (let i = 0; i < leaves; i++) build(0, i);
    return {
      events,
      logged,
      params: { upperBytes: upper, lowerBytes: upper },
      leaves,
      removed: removed.filter((r) => r < leaves),
    };
  });

describe("replayFold", () => {
  it("is the fold applied event by event with each node's size as of that event", () => {
    fc.assert(
      fc.property(logArb, ({ events, logged, params }) => {
        const sizes = new Map<string, number>();
        let state: FoldState = EMPTY_FOLD;
        const steps = [...replayFold(events, logged, () => params)];
        expect(steps).toHaveLength(events.length);
        for (const [k, { event, eventNo }] of events.entries()) {
          for (const s of logged) if (s.treeEvent === eventNo) sizes.set(`${s.level}:${s.index}`, s.bytes);
          state = applyFoldEvent(
            state,
            event as FoldEvent,
            (node) => sizes.get(`${node.level}:${node.index}`),
            params,
          ).state;
          expect(steps[k]?.state).toEqual(state);
        }
      }),
      { numRuns: 150 },
    );
  });

  it("after a deletion's removal of every ancestor of some leaves, refolds to a built tiling without them", () => {
    fc.assert(
      fc.property(logArb, ({ events, logged, params, leaves, removed }) => {
        const doomed = new Set<string>();
        for (const leaf of removed) {
          let node = { level: 0, index: leaf };
          while (2 ** node.level < leaves) {
            node = parentOf(node);
            doomed.add(`${node.level}:${node.index}`);
          }
        }
        // The deletion's log: the doomed nodes' build events taken out, later events renumbered.
        const kept = events.filter(
          (e) => e.event.type !== "built" || !doomed.has(`${e.event.node.level}:${e.event.node.index}`),
        );
        const renumber = new Map(kept.map((e, k) => [e.eventNo, k + 1]));
        const log = kept.map((e) => ({ ...e, eventNo: renumber.get(e.eventNo) as number }));
        const sizes = logged
          .filter((s) => !doomed.has(`${s.level}:${s.index}`))
          .map((s) => ({ ...s, treeEvent: renumber.get(s.treeEvent) as number }));
        const { state, bytesOf } = refoldLog(log, sizes, params);
        expect(tilingProblem(state.parts, leaves)).toBeUndefined();
        for (const part of state.parts) {
          expect(doomed.has(`${part.level}:${part.index}`)).toBe(false);
          expect(bytesOf(part)).toBeDefined();
        }
      }),
      { numRuns: 150 },
    );
  });
});
