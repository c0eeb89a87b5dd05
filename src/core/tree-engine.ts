/**
 * The tree engine (seed 002 §4-§5): what a batch of events does to one tree — leaves appended, nodes built (explicitly,
 * or inline because they are free), the view folded after every event, readiness of the nodes that can be built next
 * — decided here, without I/O. It is fed by loaders (`TreeEngineIo`): the store reads the latest view's parts and node
 * sizes, stores built nodes, and supplies the inputs of a node that may be free (src/store/tree-changes.ts). The plan
 * it returns is what one statement then writes.
 */
import {
  appendWithoutFit,
  applyFoldEvent,
  EMPTY_FOLD,
  type FoldEvent,
  type FoldParams,
  type FoldState,
  type FoldSummary,
  type NodeBytes,
  viewBytes,
} from "./fold.js";
import { freeLeafText, freeParentText, utf8Bytes } from "./summary.js";
import { endOf, leafReady, type NodeAddress, nodeKey, parentOf, parentReady, siblingOf } from "./tree.js";
import { candidateParents, wantedParents } from "./wanted.js";

/** How many free nodes one commit builds inline at most: the tree row stays locked meanwhile. */
export const MAX_INLINE_BUILDS = 64;

/** The tree's counters and the latest view revision's summary, as its locked row holds them. */
export interface EngineTree {
  readonly treeId: number;
  readonly leafCount: number;
  readonly builtLeaves: number;
  readonly eventCount: number;
  readonly viewRevision: number;
  /** The latest revision's size, mode and placeholder count, kept on the locked row. */
  readonly viewBytes: number;
  readonly viewShrinking: boolean;
  readonly viewUnbuilt: number;
}

/** A built node as the engine needs it: its address and text (the store's node row carries more). */
export interface BuiltNode extends NodeAddress {
  readonly text: string;
}

/**
 * A leaf appended, a node built for the first time, or a new revision of a built node (`rebuilt`: `optchat rebuild`,
 * src/memory/rebuild.ts). The fold sees a revision as a built event at a new event number (its size may differ); it
 * changes neither the built prefix nor readiness, since the address was built already.
 */
export type EngineChange<N extends BuiltNode> =
  | { readonly type: "append"; readonly index: number }
  | { readonly type: "built"; readonly node: N }
  | { readonly type: "rebuilt"; readonly node: N };

/** What may make a ready node free: a leaf's record (its kind and rendered text) or the texts of its two children. */
export type FreeInputs<H> =
  | { readonly type: "leaf"; readonly kind: string; readonly text: string; readonly hashes: () => H[] }
  | { readonly type: "parent"; readonly left: string; readonly right: string; readonly hashes: () => H[] };

/** The engine's I/O, supplied by the store (all reads and writes of the tree happen through these). */
export interface TreeEngineIo<N extends BuiltNode, H> {
  /** The latest view revision's parts in order; sizes of the parts and of left parts' parents go into `known`. */
  loadFrontier(known: Map<number, number | undefined>): Promise<NodeAddress[]>;
  /** Text sizes of nodes, undefined for one not built. */
  loadSizes(addresses: readonly NodeAddress[]): Promise<Map<number, number | undefined>>;
  /** Stores a built node at event number `eventNo` (before the fold sees it). */
  storeNode(node: N, eventNo: number): Promise<void>;
  /** What may make `node` free, undefined when it cannot be (a shared leaf, a payload too large, a missing child). */
  freeInputs(node: NodeAddress): Promise<FreeInputs<H> | undefined>;
  /** The node built for free from `text` and the hashes of its inputs. */
  freeNode(node: NodeAddress, text: string, inputHashes: H[]): N;
}

/** What the events decided for one tree. */
export interface EnginePlan {
  readonly leafCount: number;
  readonly builtLeaves: number;
  readonly eventNo: number;
  /** The view revision after the changes; a new one when `newRevision`. */
  readonly revision: number;
  readonly newRevision: boolean;
  readonly left: readonly NodeAddress[];
  readonly entered: readonly NodeAddress[];
  readonly bytes: number;
  readonly shrinking: boolean;
  readonly unbuilt: number;
  /** How many nodes were built (explicitly or inline). */
  readonly built: number;
  /** Nodes that became ready to build and were not built here: enqueue exactly these. */
  readonly ready: readonly NodeAddress[];
}

/** The state of one `planTreeEvents` call as the events go. */
interface Progress {
  summary: FoldSummary;
  unbuilt: number;
  /** The latest revision's parts, read when an event first needs the full fold; `state` continues from them. */
  frontier: readonly NodeAddress[] | undefined;
  state: FoldState;
  readonly appendedWithoutParts: NodeAddress[];
  leafCount: number;
  builtLeaves: number;
  eventNo: number;
  changedView: boolean;
  readonly ready: NodeAddress[];
  /** Node text sizes known so far (undefined: not built): one lookup round serves a whole batch of appends. */
  readonly known: Map<number, number | undefined>;
  readonly builtHere: Set<number>;
  readonly checkedForFree: Set<number>;
}

/**
 * Plans `changes` on `tree` (locked by the caller): explicit changes first; then, with `buildFreeInline` (the
 * compactor's commits, a host's per-message ingestion), every node that became ready and is free (a short message, or
 * two children that fit together) is built in the same commit, with no job and no model call, at most
 * MAX_INLINE_BUILDS of them. A backlog of short messages then takes one job, not one job hop per message (~100 ms
 * each, measured); bulk ingestion does not do it (measured: a batch of 100 records went from ~5,000 to ~300
 * records/s). Appends that cannot merge anything (appendWithoutFit: the common case of an ingest) never read the
 * view's parts; the first event that needs the full fold reads them once.
 */
export async function planTreeEvents<N extends BuiltNode, H>(
  tree: EngineTree,
  changes: readonly EngineChange<N>[],
  params: FoldParams,
  io: TreeEngineIo<N, H>,
  options: { readonly buildFreeInline?: boolean } = {},
): Promise<EnginePlan> {
  const run: Progress = {
    summary: { leafCount: tree.leafCount, bytes: tree.viewBytes, shrinking: tree.viewShrinking },
    unbuilt: tree.viewUnbuilt,
    frontier: undefined,
    state: EMPTY_FOLD,
    appendedWithoutParts: [],
    leafCount: tree.leafCount,
    builtLeaves: tree.builtLeaves,
    eventNo: tree.eventCount,
    changedView: false,
    ready: [],
    known: new Map(),
    builtHere: new Set(),
    checkedForFree: new Set(),
  };
  const pending: EngineChange<N>[] = [...changes];
  let inlineBuilds = 0;
  for (;;) {
    let change = pending.shift();
    if (!change) {
      // Whatever is still ready after the cap becomes jobs, which continue the cascade.
      if (!options.buildFreeInline || inlineBuilds >= MAX_INLINE_BUILDS) break;
      const free = await nextFreeNode(run, io);
      if (!free) break;
      inlineBuilds += 1;
      change = { type: "built", node: free };
    }
    await applyChange(tree, run, change, params, io);
  }
  const wanted = params.merges === "all" ? undefined : await parentsWanted(run, params, io);
  return finishPlan(tree, run, wanted);
}

/**
 * With merges on demand (the default): the parents the view's fold needs next (src/core/wanted.ts), when this call
 * folded the whole view; none when every event was an append that could not merge (the view is under its upper
 * threshold, or waits for parents wanted at an earlier event).
 */
async function parentsWanted<N extends BuiltNode, H>(
  run: Progress,
  params: FoldParams,
  io: TreeEngineIo<N, H>,
): Promise<NodeAddress[]> {
  if (run.frontier === undefined) return [];
  const bytesOf: NodeBytes = (node) => run.known.get(nodeKey(node));
  const unknown = candidateParents(run.state.parts, bytesOf).filter((p) => !run.known.has(nodeKey(p)));
  if (unknown.length > 0) {
    const found = await io.loadSizes(unknown);
    for (const parent of unknown) run.known.set(nodeKey(parent), found.get(nodeKey(parent)));
  }
  return wantedParents(run.state, bytesOf, params);
}

/** One event: counters and readiness, the node stored when built, the view folded. */
async function applyChange<N extends BuiltNode, H>(
  tree: EngineTree,
  run: Progress,
  change: EngineChange<N>,
  params: FoldParams,
  io: TreeEngineIo<N, H>,
): Promise<void> {
  run.eventNo += 1;
  let event: FoldEvent;
  if (change.type === "append") {
    if (change.index !== run.leafCount)
      throw new Error(`tree ${tree.treeId}: leaf ${change.index} appended after ${run.leafCount} leaves`);
    run.leafCount += 1;
    event = { type: "append", index: change.index };
    // A leaf appended now cannot be built yet, nor can the parent it completes.
    run.known.set(nodeKey({ level: 0, index: change.index }), undefined);
    if (change.index % 2 === 1) run.known.set(nodeKey(parentOf({ level: 0, index: change.index })), undefined);
    if (leafReady(change.index, run.leafCount, run.builtLeaves)) run.ready.push({ level: 0, index: change.index });
    const appended = run.frontier === undefined ? appendWithoutFit(run.summary, change.index, params) : undefined;
    if (appended) {
      run.summary = appended;
      run.unbuilt += 1;
      run.appendedWithoutParts.push({ level: 0, index: change.index });
      run.changedView = true; // an append always adds a part
      return;
    }
  } else {
    const node = { level: change.node.level, index: change.node.index };
    await io.storeNode(change.node, run.eventNo);
    run.builtHere.add(nodeKey(node));
    run.known.set(nodeKey(node), utf8Bytes(change.node.text));
    event = { type: "built", node };
    if (node.level === 0 && change.type === "built") {
      if (node.index !== run.builtLeaves)
        throw new Error(`tree ${tree.treeId}: leaf ${node.index} built before leaf ${run.builtLeaves}`);
      run.builtLeaves += 1;
      if (leafReady(run.builtLeaves, run.leafCount, run.builtLeaves))
        run.ready.push({ level: 0, index: run.builtLeaves });
    }
  }
  if (run.frontier === undefined) {
    run.frontier = await io.loadFrontier(run.known);
    run.state = {
      parts: [...run.frontier, ...run.appendedWithoutParts],
      leafCount: run.summary.leafCount,
      shrinking: run.summary.shrinking,
    };
  }
  const before = run.state;
  // A built node's sibling decides whether their parent is ready: load it with the fold's first round.
  const sibling = event.type === "built" ? siblingOf(event.node) : undefined;
  run.state = (await foldWithLoadedSizes(run, event, params, io, sibling ? [sibling] : [])).state;
  if (event.type === "built" && sibling && change.type === "built") {
    const parent = parentOf(event.node);
    const siblingBuilt = run.known.get(nodeKey(sibling)) !== undefined;
    if (endOf(parent) <= run.leafCount && parentReady(parent, siblingBuilt, run.builtLeaves)) run.ready.push(parent);
  }
  const showsBuiltPart =
    event.type === "built" && run.state.parts.some((p) => p.level === event.node.level && p.index === event.node.index);
  if (run.state.parts !== before.parts || run.state.shrinking !== before.shrinking || showsBuiltPart)
    run.changedView = true;
}

/** What entered and left the view, the new revision (if any), and what is left ready for jobs. */
function finishPlan(tree: EngineTree, run: Progress, wanted: readonly NodeAddress[] | undefined): EnginePlan {
  // A part that entered and was merged within this call was never in a revision and is not written.
  let entered: readonly NodeAddress[] = run.appendedWithoutParts;
  let left: readonly NodeAddress[] = [];
  let { summary, unbuilt } = run;
  if (run.frontier !== undefined) {
    // Every part's size is known: the fold measured the whole view.
    const bytesOf: NodeBytes = (node) => run.known.get(nodeKey(node));
    const was = new Set(run.frontier.map(nodeKey));
    const is = new Set(run.state.parts.map(nodeKey));
    entered = run.state.parts.filter((part) => !was.has(nodeKey(part)));
    left = run.frontier.filter((part) => !is.has(nodeKey(part)));
    summary = {
      leafCount: run.state.leafCount,
      bytes: viewBytes(run.state.parts, bytesOf),
      shrinking: run.state.shrinking,
    };
    unbuilt = run.state.parts.filter((part) => bytesOf(part) === undefined).length;
  }
  const newRevision = run.changedView || tree.viewRevision === 0;
  if (!newRevision && (entered.length > 0 || left.length > 0))
    throw new Error(`tree ${tree.treeId}: the view's parts changed without a new revision`);
  return {
    leafCount: run.leafCount,
    builtLeaves: run.builtLeaves,
    eventNo: run.eventNo,
    revision: tree.viewRevision + (newRevision ? 1 : 0),
    newRevision,
    left,
    entered,
    bytes: summary.bytes,
    shrinking: summary.shrinking,
    unbuilt,
    built: run.builtHere.size,
    // Nodes built in this call (explicitly, or inline because free) are not waiting for a job; with merges on demand
    // a parent waits for one only when the view wants it.
    ready: readyForJobs(run, wanted),
  };
}

function readyForJobs(run: Progress, wanted: readonly NodeAddress[] | undefined): NodeAddress[] {
  const waiting = (node: NodeAddress) => !run.builtHere.has(nodeKey(node));
  if (wanted === undefined) return run.ready.filter(waiting);
  const seen = new Set<number>();
  const out: NodeAddress[] = [];
  for (const node of [...run.ready.filter((n) => n.level === 0), ...wanted]) {
    const key = nodeKey(node);
    if (seen.has(key) || !waiting(node)) continue;
    seen.add(key);
    out.push(node);
  }
  return out;
}

/**
 * The first ready node (in readiness order) that is free and not built yet; undefined when none. The one free-node
 * decision: a leaf is free when its record's text fits a line (`freeLeafText`), a parent when its two children joined
 * by a newline fit (`freeParentText`).
 */
async function nextFreeNode<N extends BuiltNode, H>(run: Progress, io: TreeEngineIo<N, H>): Promise<N | undefined> {
  for (const node of run.ready) {
    const key = nodeKey(node);
    if (run.builtHere.has(key) || run.checkedForFree.has(key)) continue;
    run.checkedForFree.add(key);
    const inputs = await io.freeInputs(node);
    if (!inputs) continue;
    const text =
      inputs.type === "leaf" ? freeLeafText(inputs.kind, inputs.text) : freeParentText(inputs.left, inputs.right);
    if (text !== undefined) return io.freeNode(node, text, inputs.hashes());
  }
  return undefined;
}

/** Folds one event, loading the sizes the fold asks for in rounds (one lookup per round, not per node). */
async function foldWithLoadedSizes<N extends BuiltNode, H>(
  run: Progress,
  event: FoldEvent,
  params: FoldParams,
  io: TreeEngineIo<N, H>,
  alsoLoad: readonly NodeAddress[],
) {
  const load = async (addresses: readonly NodeAddress[]) => {
    const missing = addresses.filter((address) => !run.known.has(nodeKey(address)));
    if (missing.length === 0) return;
    const found = await io.loadSizes(missing);
    for (const address of missing) run.known.set(nodeKey(address), found.get(nodeKey(address)));
  };
  const state = run.state;
  const initial = [...state.parts, ...(event.type === "append" ? [{ level: 0, index: event.index }] : [])];
  const pairParents: NodeAddress[] = [];
  for (let k = 0; k + 1 < initial.length; k++) {
    const a = initial[k] as NodeAddress;
    if (a.index % 2 === 0 && (initial[k + 1] as NodeAddress).level === a.level) pairParents.push(parentOf(a));
  }
  await load([...initial, ...pairParents, ...alsoLoad]);
  for (;;) {
    const asked: NodeAddress[] = [];
    const bytesOf: NodeBytes = (node) => {
      const key = nodeKey(node);
      if (!run.known.has(key)) {
        asked.push(node);
        return undefined;
      }
      return run.known.get(key);
    };
    const result = applyFoldEvent(state, event, bytesOf, params);
    if (asked.length === 0) return result;
    await load(asked);
  }
}
