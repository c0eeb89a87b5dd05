import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { FoldParams } from "../../src/core/fold.js";
import { type LoggedEvent, type LoggedSize, refoldLog } from "../../src/core/refold.js";
import { NODE_BYTES } from "../../src/core/summary.js";
import { childrenOf, type NodeAddress, nodeKey } from "../../src/core/tree.js";
import {
  type BuiltNode,
  type EngineChange,
  type EngineTree,
  MAX_INLINE_BUILDS,
  planTreeEvents,
  type TreeEngineIo,
} from "../../src/core/tree-engine.js";

/**
 * The tree engine (src/core/tree-engine.ts) over an in-memory store: batches of appends and builds, with and without
 * inline free builds, against the invariants the SQL store relies on — the view it keeps incrementally equals the
 * fold replayed from the event log (what the refold audit checks), nothing is ready that cannot be built or was
 * built, and every node a batch made buildable is either built in it or listed as ready.
 */

interface MemoryTree {
  tree: EngineTree;
  parts: NodeAddress[];
  nodes: Map<number, BuiltNode & { eventNo: number }>;
  leafTexts: string[];
  log: LoggedEvent[];
  ready: Set<number>;
  /** Every node revision stored, with its size and event (a rebuilt address has several). */
  history: LoggedSize[];
}

function memoryTree(): MemoryTree {
  const tree = {
    treeId: 1,
    leafCount: 0,
    builtLeaves: 0,
    eventCount: 0,
    viewRevision: 0,
    viewBytes: 0,
    viewShrinking: false,
    viewUnbuilt: 0,
  };
  return { tree, parts: [], nodes: new Map(), leafTexts: [], log: [], ready: new Set(), history: [] };
}

function io(store: MemoryTree): TreeEngineIo<BuiltNode, string> {
  const size = (node: NodeAddress) => {
    const built = store.nodes.get(nodeKey(node));
    return built ? new TextEncoder().encode(built.text).length : undefined;
  };
  return {
    loadFrontier: async (known) => {
      for (const part of store.parts) if (!known.has(nodeKey(part))) known.set(nodeKey(part), size(part));
      return [...store.parts];
    },
    loadSizes: async (addresses) => new Map(addresses.map((a) => [nodeKey(a), size(a)])),
    storeNode: async (node, eventNo) => {
      store.nodes.set(nodeKey(node), { ...node, eventNo });
      const bytes = new TextEncoder().encode(node.text).length;
      store.history.push({ level: node.level, index: node.index, bytes, treeEvent: eventNo });
    },
    freeInputs: async (node) => {
      if (node.level === 0) {
        const text = store.leafTexts[node.index];
        return text === undefined ? undefined : { type: "leaf", kind: "user", text, hashes: () => [text] };
      }
      const [left, right] = childrenOf(node).map((c) => store.nodes.get(nodeKey(c)));
      return left && right ? { type: "parent", left: left.text, right: right.text, hashes: () => [] } : undefined;
    },
    freeNode: (node, text) => ({ level: node.level, index: node.index, text }),
  };
}

/** Runs one batch and applies its plan to the in-memory store as the SQL write would. */
async function runBatch(
  store: MemoryTree,
  changes: EngineChange<BuiltNode>[],
  params: FoldParams,
  buildFreeInline: boolean,
) {
  const before = store.tree.eventCount;
  const plan = await planTreeEvents(store.tree, changes, params, io(store), { buildFreeInline });
  const left = new Set(plan.left.map(nodeKey));
  store.parts = [...store.parts.filter((p) => !left.has(nodeKey(p))), ...plan.entered].sort(
    (a, b) => a.index * 2 ** a.level - b.index * 2 ** b.level,
  );
  // The log: appends by index, builds by the event number stored with the node.
  let appended = store.tree.leafCount;
  for (let eventNo = before + 1; eventNo <= plan.eventNo; eventNo++) {
    const built = store.history.find((n) => n.treeEvent === eventNo);
    store.log.push({
      eventNo,
      event: built
        ? { type: "built", node: { level: built.level, index: built.index } }
        : { type: "append", index: appended++ },
    });
  }
  for (const node of plan.ready) store.ready.add(nodeKey(node));
  for (const node of store.nodes.values()) store.ready.delete(nodeKey(node));
  store.tree = {
    ...store.tree,
    leafCount: plan.leafCount,
    builtLeaves: plan.builtLeaves,
    eventCount: plan.eventNo,
    viewRevision: plan.revision,
    viewBytes: plan.bytes,
    viewShrinking: plan.shrinking,
    viewUnbuilt: plan.unbuilt,
  };
  return plan;
}

function buildable(store: MemoryTree, node: NodeAddress): boolean {
  if (store.nodes.has(nodeKey(node))) return false;
  if (node.level === 0) return node.index === store.tree.builtLeaves && node.index < store.tree.leafCount;
  return childrenOf(node).every((c) => store.nodes.has(nodeKey(c)));
}

describe("the tree engine", () => {
  it.each([
    "all",
    "needed",
  ] as const)("keeps the view the event log's replay gives, and readiness exact, over random batches (merges: %s)", async (merges) => {
    const step = fc.record({
      appends: fc.integer({ min: 0, max: 6 }),
      builds: fc.integer({ min: 0, max: 4 }),
      inline: fc.boolean(),
      long: fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.array(step, { minLength: 1, maxLength: 25 }),
        fc.integer({ min: 600, max: 4_000 }),
        async (steps, upper) => {
          const params = { upperBytes: upper, lowerBytes: Math.floor(upper * 0.6), merges };
          const store = memoryTree();
          for (const { appends, builds, inline, long } of steps) {
            const changes: EngineChange<BuiltNode>[] = [];
            for (let k = 0; k < appends; k++) {
              const index = store.tree.leafCount + k;
              // A long text is never free; a short one is.
              store.leafTexts[index] = long[k] ? "x".repeat(NODE_BYTES + 10) : `short message ${index}`;
              changes.push({ type: "append", index });
            }
            // Build one of what is ready (as a compactor job commits one node), with a summary's text.
            const taken = builds > 0 ? readyNodes(store).find((node) => buildable(store, node)) : undefined;
            if (taken)
              changes.unshift({ type: "built", node: { ...taken, text: `summary of ${taken.level}/${taken.index}` } });
            const plan = await runBatch(store, changes, params, inline);
            expect(plan.built).toBeLessThanOrEqual((taken ? 1 : 0) + (inline ? MAX_INLINE_BUILDS : 0));
            for (const node of plan.ready) expect(buildable(store, node)).toBe(true);
          }
          const replay = refoldLog(store.log, store.history, params);
          expect(store.parts).toEqual([...replay.state.parts]);
          // Every node that can be built now is waiting as ready (none is forgotten between batches); with merges on
          // demand every leaf that can, and every parent the view wants (src/core/wanted.ts) when the last batch
          // folded the whole view.
          for (const node of allAddresses(store.tree.leafCount))
            if (buildable(store, node) && (merges === "all" || node.level === 0))
              expect(store.ready.has(nodeKey(node))).toBe(true);
        },
      ),
      { numRuns: 150 },
    );
  });

  // Every merge built (merges: all): a rebuild then changes neither the built prefix nor what is ready. With merges on
  // demand a rebuilt size may make the view want a merge, which is the point of building merges on demand.
  it("folds a rebuilt node as a built event at a new event number: the replay agrees, nothing becomes ready", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 4, max: 40 }),
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 1, max: 700 })), { minLength: 1, maxLength: 12 }),
        fc.integer({ min: 600, max: 4_000 }),
        async (leaves, rebuilds, upper) => {
          const params = { upperBytes: upper, lowerBytes: Math.floor(upper * 0.6), merges: "all" as const };
          const store = memoryTree();
          store.leafTexts = Array.from({ length: leaves }, (_, k) => `message ${k} `.repeat(1 + (k % 5)));
          const appends = store.leafTexts.map((_, index) => ({ type: "append" as const, index }));
          await runBatch(store, appends, params, true);
          // Build what is left (long leaves are not free), one commit each, as jobs would.
          for (let taken = readyNodes(store)[0]; taken; taken = readyNodes(store)[0])
            await runBatch(
              store,
              [{ type: "built", node: { ...taken, text: `summary ${nodeKey(taken)}` } }],
              params,
              true,
            );
          const built = [...store.nodes.values()].sort((a, b) => a.level - b.level || a.index - b.index);
          const counters = { leafCount: store.tree.leafCount, builtLeaves: store.tree.builtLeaves };
          // New revisions of some built nodes, children before parents, texts of other sizes.
          const chosen = [...new Set(rebuilds.map(([k]) => k % built.length))].sort((a, b) => a - b);
          const changes: EngineChange<BuiltNode>[] = chosen.map((k) => {
            const node = built[k] as BuiltNode;
            return {
              type: "rebuilt",
              node: { level: node.level, index: node.index, text: "r".repeat(rebuilds[0]?.[1] ?? 1) },
            };
          });
          const plan = await runBatch(store, changes, params, true);
          expect(plan.ready).toEqual([]);
          expect({ leafCount: plan.leafCount, builtLeaves: plan.builtLeaves }).toEqual(counters);
          expect(plan.built).toBe(chosen.length);
          expect(store.parts).toEqual([...refoldLog(store.log, store.history, params).state.parts]);
        },
      ),
      { numRuns: 100 },
    );
  });

  it("builds a backlog of short messages inline in one commit, and leaves a long one to a job", async () => {
    const store = memoryTree();
    const params = { upperBytes: 100_000, lowerBytes: 60_000 };
    store.leafTexts = ["one", "two", "three", "x".repeat(NODE_BYTES + 10)];
    const plan = await runBatch(
      store,
      [0, 1, 2, 3].map((index) => ({ type: "append" as const, index })),
      params,
      true,
    );
    // Leaves 0-2 and their parent (0-1) are free; leaf 3 is long: it is ready for a job, not built.
    expect([...store.nodes.keys()].sort()).toEqual(
      [
        { level: 0, index: 0 },
        { level: 0, index: 1 },
        { level: 0, index: 2 },
        { level: 1, index: 0 },
      ]
        .map(nodeKey)
        .sort(),
    );
    expect(plan.ready).toEqual([{ level: 0, index: 3 }]);
    expect(plan.built).toBe(4);
  });
});

function readyNodes(store: MemoryTree): NodeAddress[] {
  return allAddresses(store.tree.leafCount).filter((n) => store.ready.has(nodeKey(n)));
}

function allAddresses(leafCount: number): NodeAddress[] {
  const out: NodeAddress[] = [];
  for (let level = 0; 2 ** level <= Math.max(1, leafCount); level++)
    for (let index = 0; (index + 1) * 2 ** level <= leafCount; index++) out.push({ level, index });
  return out;
}
