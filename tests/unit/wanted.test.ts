import { describe, expect, it } from "vitest";
import { applyFoldEvent, type FoldState, type NodeBytes, viewBytes } from "../../src/core/fold.js";
import { type NodeAddress, nodeKey } from "../../src/core/tree.js";
import { MAX_WANTED, WANT_BATCH_BYTES, WANT_HEADROOM_BYTES, wantedParents } from "../../src/core/wanted.js";

/** A view of `leaves` leaves of `bytes` bytes each, every leaf built, no parent built. */
function leavesView(
  leaves: number,
  bytes: number,
): { state: FoldState; bytesOf: NodeBytes; sizes: Map<number, number> } {
  const sizes = new Map<number, number>();
  for (let i = 0; i < leaves; i++) sizes.set(nodeKey({ level: 0, index: i }), bytes);
  const bytesOf: NodeBytes = (node) => sizes.get(nodeKey(node));
  const parts: NodeAddress[] = Array.from({ length: leaves }, (_, index) => ({ level: 0, index }));
  return { state: { parts, leafCount: leaves, shrinking: false }, bytesOf, sizes };
}

describe("merges on demand (wantedParents)", () => {
  it("wants nothing while the view is under its budget by more than the headroom", () => {
    const { state, bytesOf } = leavesView(10, 300);
    const size = viewBytes(state.parts, bytesOf);
    expect(wantedParents(state, bytesOf, { upperBytes: size + WANT_HEADROOM_BYTES + 1, lowerBytes: size })).toEqual([]);
  });

  it("wants the most due pairs (the oldest first), enough to bring the view to its lower size", () => {
    const { state, bytesOf } = leavesView(40, 400);
    const size = viewBytes(state.parts, bytesOf);
    const params = { upperBytes: size - 100, lowerBytes: size - 1000 };
    const wanted = wantedParents(state, bytesOf, params);
    // Each merge of two 400-byte lines into at most 512 saves about 290 bytes: 1000 + headroom needs several.
    expect(wanted.length).toBeGreaterThan(3);
    expect(wanted.length).toBeLessThanOrEqual(MAX_WANTED);
    expect(wanted[0]).toEqual({ level: 1, index: 0 });
    // In the fold's own order: the oldest pairs first.
    expect(wanted.map((n) => n.index)).toEqual([...wanted.map((n) => n.index)].sort((a, b) => a - b));
  });

  it("is what the fold then merges: once those parents are built, the view fits its lower size", () => {
    const { state, bytesOf, sizes } = leavesView(40, 400);
    const size = viewBytes(state.parts, bytesOf);
    const params = { upperBytes: size - 100, lowerBytes: size - 1000 };
    const shrinking = applyFoldEvent(state, { type: "built", node: { level: 0, index: 39 } }, bytesOf, params).state;
    expect(shrinking.shrinking).toBe(true);
    const wanted = wantedParents(shrinking, bytesOf, params);
    for (const parent of wanted) sizes.set(nodeKey(parent), 512); // the longest line a merge may write
    const fitted = applyFoldEvent(shrinking, { type: "built", node: wanted.at(-1) as NodeAddress }, bytesOf, params);
    expect(fitted.merged.length).toBeGreaterThan(0);
    expect(fitted.bytes).toBeLessThanOrEqual(params.lowerBytes);
  });

  it("never wants a parent that is built, or one whose merge cannot shrink the view", () => {
    const { state, bytesOf, sizes } = leavesView(8, 20);
    sizes.set(nodeKey({ level: 1, index: 0 }), 41);
    const wanted = wantedParents({ ...state, shrinking: true }, bytesOf, { upperBytes: 10, lowerBytes: 10 });
    expect(wanted.map(nodeKey)).not.toContain(nodeKey({ level: 1, index: 0 }));
    expect(wanted.length).toBe(3);
  });

  it("asks for a batch at a time: nothing more while built parents cover the next appends, then a batch again", () => {
    // A session view at its budget, growing by one 400-byte line per append (issue 36: a long turn's tool calls).
    const { state, bytesOf, sizes } = leavesView(200, 400);
    const upperBytes = viewBytes(state.parts, bytesOf) + WANT_HEADROOM_BYTES - 1;
    const params = { upperBytes, lowerBytes: upperBytes };
    const first = wantedParents(state, bytesOf, params);
    expect(first).toHaveLength(MAX_WANTED);
    // Only what the next appends need, without the batch: far fewer.
    const needed = wantedParents(state, bytesOf, { ...params, batchBytes: 0 });
    expect(needed.length).toBeLessThan(first.length);
    expect(WANT_BATCH_BYTES).toBeGreaterThan(WANT_HEADROOM_BYTES);
    for (const parent of first) sizes.set(nodeKey(parent), 512);
    expect(wantedParents(state, bytesOf, params)).toEqual([]);
    // Appended lines use the built parents up; once they no longer cover the headroom, the next batch is wanted.
    let grown = state;
    let appended = 0;
    while (wantedParents(grown, bytesOf, params).length === 0) {
      const index = grown.leafCount;
      sizes.set(nodeKey({ level: 0, index }), 400);
      grown = { ...grown, parts: [...grown.parts, { level: 0, index }], leafCount: index + 1 };
      appended += 1;
    }
    expect(appended).toBeGreaterThan(1);
    expect(wantedParents(grown, bytesOf, params).length).toBeGreaterThan(1);
  });
});
