import { applyFoldEvent, EMPTY_FOLD, type FoldEvent, type FoldParams, type FoldState, type NodeBytes } from "./fold.js";
import { type NodeAddress, nodeKey } from "./tree.js";

/** One fold input of a tree's derived event log (store/tree-log.ts listTreeEvents). */
export interface LoggedEvent {
  readonly eventNo: number;
  readonly event: FoldEvent;
}

/** A node revision's size and the event that committed it. */
export interface LoggedSize {
  readonly level: number;
  readonly index: number;
  readonly bytes: number;
  readonly treeEvent: number;
}

/** The fold state after one event of a replay, with the node sizes as they were at that event. */
export interface ReplayStep {
  readonly eventNo: number;
  readonly state: FoldState;
  readonly bytesOf: NodeBytes;
}

/**
 * Replays a tree's event log through the pure fold, each node at the size its newest revision had at the event
 * (sizes sorted by treeEvent), yielding the state after every event. `paramsAt(eventNo)` gives the thresholds in
 * effect; undefined stops the replay (no persisted revision says which were). The audit (memory/audit.ts) checks
 * every persisted revision against these steps; a deletion (store/retire-publications.ts) persists the last step as
 * the tree's new base revision, so both agree by construction.
 */
export function* replayFold(
  events: readonly LoggedEvent[],
  sizes: readonly LoggedSize[],
  paramsAt: (eventNo: number) => FoldParams | undefined,
): Generator<ReplayStep> {
  const current = new Map<number, number>();
  const bytesOf: NodeBytes = (node: NodeAddress) => current.get(nodeKey(node));
  let nextSize = 0;
  let state: FoldState = EMPTY_FOLD;
  for (const { eventNo, event } of events) {
    while (nextSize < sizes.length && (sizes[nextSize] as LoggedSize).treeEvent <= eventNo) {
      const node = sizes[nextSize] as LoggedSize;
      current.set(nodeKey(node), node.bytes);
      nextSize += 1;
    }
    const params = paramsAt(eventNo);
    if (!params) return;
    state = applyFoldEvent(state, event, bytesOf, params).state;
    yield { eventNo, state, bytesOf };
  }
}

/** The final fold state of a whole log under one set of thresholds (EMPTY_FOLD for an empty log). */
export function refoldLog(
  events: readonly LoggedEvent[],
  sizes: readonly LoggedSize[],
  params: FoldParams,
): { state: FoldState; bytesOf: NodeBytes } {
  let last: { state: FoldState; bytesOf: NodeBytes } = { state: EMPTY_FOLD, bytesOf: () => undefined };
  for (const step of replayFold(events, sizes, () => params)) last = step;
  return last;
}
