/**
 * Applying events to a tree: the one place where leaves are appended, nodes committed and the view folded. The
 * decisions are src/core/tree-engine.ts; this module plans and applies a tree's changes under the lock of
 * tree-lock.ts, with the engine's reads in tree-reads.ts, node inserts in node-insert.ts and the plan's write in
 * tree-writes.ts (the rows themselves: trees.ts, nodes.ts, view-revisions.ts, tree-log.ts).
 */
import { type FoldParams, foldParamsFor } from "../core/fold.js";
import type { NodeAddress } from "../core/tree.js";
import { type EngineChange, planTreeEvents, type TreeEngineIo } from "../core/tree-engine.js";
import type { Queryable } from "./db.js";
import { insertNode } from "./node-insert.js";
import { findNodeSizes, type NewNode } from "./nodes.js";
import type { LockedTree } from "./tree-lock.js";
import { freeInputs, freeNode, type LeafSource, loadFrontier } from "./tree-reads.js";
import { type TreeChangePlan, writeTreeChanges } from "./tree-writes.js";
import type { Tree } from "./trees.js";

/**
 * One event for the fold: a leaf appended, a node built for the first time, or a new revision of a built node
 * (`rebuilt`, src/memory/rebuild.ts; core/tree-engine.ts).
 */
export type TreeChange = EngineChange<NewNode>;

export interface AppliedChanges {
  readonly tree: Tree;
  /** Nodes that became ready to build: enqueue exactly these (seed 002 §4.1 readiness, seed 000 §10 scheduling). */
  readonly ready: readonly NodeAddress[];
  /** The view revision after the changes (a new one when the view changed). */
  readonly viewRevision: number;
}

export interface PlanOptions {
  /** Build the nodes that became ready and are free in the same transaction (see planTreeChanges). */
  readonly buildFreeInline?: boolean;
  /**
   * A leaf's record and payload when the caller holds them: the ingest plans the fold of records it has not written
   * yet (they are written by the same statement as the fold), so a free leaf among them is read from here.
   */
  readonly leafSource?: (index: number) => LeafSource | undefined;
  /**
   * Plan without holding the tree's lock (the ingest's unlocked plan, memory/ingest.ts): reads only. Building a node
   * would write before the plan is known to hold, so it throws NeedsTreeLock and the caller plans again under the lock.
   */
  readonly readOnly?: boolean;
}

/** An unlocked plan would build a node (see PlanOptions.readOnly): plan again with the tree locked. */
export class NeedsTreeLock extends Error {
  constructor(treeId: number) {
    super(`tree ${treeId}: building a node needs the tree's lock`);
    this.name = "NeedsTreeLock";
  }
}

/**
 * Plans changes to a tree locked by `lockTree` in this transaction: inserts built nodes, folds the view with every
 * event, and returns what one statement then writes (writeTreeChanges, or the ingest's commit statement): the parts
 * that entered and left the view, a new view revision when the view changed, the tree's counters and fold state and,
 * when a node was built, an announcement (NOTIFY, delivered on commit) to the callers waiting for readiness
 * (settleTree). Appends alone do not notify: they make
 * nothing more ready, and a notifying transaction takes PostgreSQL's cluster-wide notification lock at pre-commit and
 * holds it to the end of its commit, which serializes notifying commits (8 ingesting clients scaled 2.4x over one
 * while pgbench scaled 8.3x in the same run; on the loaded 2-core machine of issue 9 the gain from dropping it was
 * within the run-to-run noise). Returns the nodes that became ready.
 *
 * Events are not stored: a built event is its node row (nodes.tree_event), every other event number is an append of
 * the next leaf (listTreeEvents). Appends that cannot merge anything (appendWithoutFit: the common case of an ingest)
 * never read the view's parts; the first event that needs the full fold reads them once (loadFrontier).
 */
export async function planTreeChanges(
  db: Queryable,
  { tree }: LockedTree,
  changes: readonly TreeChange[],
  params: FoldParams,
  options: PlanOptions = {},
): Promise<TreeChangePlan> {
  const fold = foldParamsFor(tree.kind, params);
  const io = treeEngineIo(db, tree, options.leafSource);
  if (options.readOnly) {
    io.storeNode = () => {
      throw new NeedsTreeLock(tree.treeId);
    };
  }
  const plan = await planTreeEvents(tree, changes, fold, io, {
    buildFreeInline: options.buildFreeInline ?? false,
  });
  const { built, ...decided } = plan;
  return {
    ...decided,
    treeId: tree.treeId,
    upperBytes: fold.upperBytes,
    lowerBytes: fold.lowerBytes,
    notify: built > 0,
  };
}

/** The tree engine's reads and writes of one locked tree (src/core/tree-engine.ts). */
function treeEngineIo(db: Queryable, tree: Tree, leafSource: PlanOptions["leafSource"]): TreeEngineIo<NewNode, Buffer> {
  return {
    loadFrontier: (known) => loadFrontier(db, tree.treeId, known),
    loadSizes: (addresses) => findNodeSizes(db, tree.treeId, addresses),
    storeNode: (node, eventNo) => insertNode(db, tree.treeId, node, eventNo),
    freeInputs: (node) => freeInputs(db, tree, node, leafSource),
    freeNode,
  };
}

/** planTreeChanges and writeTreeChanges for one tree, for callers with nothing else to write in the same statement. */
export async function applyTreeChanges(
  db: Queryable,
  locked: LockedTree,
  changes: readonly TreeChange[],
  params: FoldParams,
  options: PlanOptions = {},
): Promise<AppliedChanges> {
  const plan = await planTreeChanges(db, locked, changes, params, options);
  const written = await writeTreeChanges(db, [plan]);
  const tree = written.get(plan.treeId);
  if (!tree) throw new Error(`tree ${plan.treeId}: the write updated no tree row`);
  return { tree, ready: plan.ready, viewRevision: plan.revision };
}
