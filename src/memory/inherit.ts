/**
 * Forks (seed 000 §12, issue 15 item 3): when a host forks a session, the child's copies of the parent's messages are
 * matched to the parent's records, and the child's generation takes them over by reference (store/inherit.ts): no
 * payload is stored again, nothing inherited is published again, the parent's summaries of whole inherited ranges are
 * reused, and the child's session memory covers the inherited prefix from its first request. The parent's later
 * turns stay the parent's: the child sees them only as shared memory, under the normal rules.
 */

import { enqueueNodeJobs, type JobInserter } from "../compactor/queue.js";
import { InputInvalidError, OptchatError } from "../core/errors.js";
import type { FoldParams } from "../core/fold.js";
import { endOf } from "../core/tree.js";
import type { PoolClient } from "../store/db.js";
import { withTransaction } from "../store/db.js";
import { bumpRetentionEpochs, lockForDeletion } from "../store/deletion.js";
import {
  findInheritanceSource,
  findRewindPoint,
  type InheritanceSource,
  type InheritedKey,
  listInheritedNodes,
  listInheritedRecords,
  lockGenerationForInheritance,
  startNextGeneration,
  writeInheritedRecords,
} from "../store/inherit.js";
import type { NewNode } from "../store/nodes.js";
import type { RecordToSeal } from "../store/records.js";
import { findSession } from "../store/sessions.js";
import { applyTreeChanges, type TreeChange } from "../store/tree-changes.js";
import { lockTree } from "../store/tree-lock.js";
import { findSessionTree } from "../store/trees.js";
import { retireFromScope } from "./forget.js";
import type { IngestDeps } from "./ingest.js";
import { prepareEvents } from "./ingest-prep.js";
import type { IngestEvent } from "./schemas.js";

export type InheritResult =
  | {
      readonly status: "inherited";
      readonly from: { readonly sessionId: string; readonly generation: number };
      readonly records: number;
      /** Summary nodes taken over from the parent (not summarized again). */
      readonly nodes: number;
    }
  /** The child already holds records: nothing is inherited (a second call, or a session with its own history). */
  | { readonly status: "has_history" }
  /** No session of the scope holds exactly these records first: the copies stay the host's alone. */
  | { readonly status: "no_match" };

/**
 * Takes over the history a fork copied from its parent. `copies` are the child's copies as ingest events (the same
 * mapping and finalization keys the host uses for live messages), oldest first. Idempotent: once the child holds
 * records it answers `has_history`.
 */
export async function inheritHistory(
  deps: IngestDeps,
  childSessionId: string,
  copies: readonly IngestEvent[],
): Promise<InheritResult> {
  if (copies.length === 0) return { status: "no_match" };
  const { prepared } = await prepareEvents(copies, "inheritHistory");
  const strangers = prepared.filter((record) => record.sessionId !== childSessionId);
  if (strangers.length > 0) {
    throw new InputInvalidError("inheritHistory", [
      { field: "copies[].sessionId", problem: `must all be the child session ${childSessionId}` },
    ]);
  }
  const boss = await deps.jobQueue();
  return await withTransaction(deps.pool, async (client) => {
    const child = await findSession(client, childSessionId);
    if (!child) {
      throw new OptchatError("SESSION_NOT_FOUND", `inheritHistory: no session ${childSessionId}`, {
        sessionId: childSessionId,
      });
    }
    const generation = child.currentGeneration;
    // Every writer of the generation takes these rows (ingest-commit.ts): no record can be sealed into the child
    // between this check and the commit.
    const held = await lockGenerationForInheritance(client, child.sessionId, generation);
    if (held === undefined) throw new Error(`inheritHistory: session ${childSessionId} has no tree`);
    if (held > 0) return { status: "has_history" };
    const first = prepared[0] as RecordToSeal;
    const source = await findInheritanceSource(client, {
      scopeId: child.scopeId,
      childSessionId,
      kinds: prepared.map((record) => record.kind),
      hashes: prepared.map((record) => record.payloadHash),
      firstHash: first.payloadHash,
    });
    if (!source) return { status: "no_match" };
    const parentRecords = await listInheritedRecords(client, source, prepared.length);
    const keys = matchCopies(parentRecords, prepared);
    const nodes = await takeOver(client, deps.fold, boss, { sessionId: childSessionId, generation }, source, keys);
    return { status: "inherited", from: source, records: keys.length, nodes };
  });
}

export type RewindResult =
  | {
      readonly status: "rewound";
      /** The new current generation, and how many records of the previous one it keeps. */
      readonly generation: number;
      readonly kept: number;
      readonly superseded: number;
      /** Publications of superseded turns taken out of the shared memory. */
      readonly publicationsRetired: number;
    }
  /** No stored record came from the removed messages: the history optchat holds is unchanged. */
  | { readonly status: "unchanged" };

/**
 * A rewind of the host's history (OpenCode's revert, committed by `message.removed`): a new generation of the session
 * starts with the records before the first removed message (the retained prefix, taken over by reference with its
 * summaries) and becomes current, so the superseded records are no longer the session's history through any read of
 * the session (its view, its search, its previous exchange, its next turns' boundaries). The previous generation's
 * turns that are still open end as interrupted and its unpublished turns past the prefix are never published.
 * Idempotent: a removed message no longer in the current generation changes nothing.
 */
export async function rewindSession(
  deps: IngestDeps,
  sessionId: string,
  removedHostMessageIds: readonly string[],
): Promise<RewindResult> {
  if (removedHostMessageIds.length === 0) return { status: "unchanged" };
  const boss = await deps.jobQueue();
  return await withTransaction(deps.pool, async (client) => {
    const session = await findSession(client, sessionId);
    if (!session) throw new OptchatError("SESSION_NOT_FOUND", `rewindSession: no session ${sessionId}`, { sessionId });
    // The locks a deletion takes, in its order (scope, session, session trees), before the shared tree's.
    await lockForDeletion(client, [session.scopeId], [sessionId]);
    const point = await findRewindPoint(client, sessionId, removedHostMessageIds);
    if (!point) return { status: "unchanged" };
    const previous = { sessionId, generation: point.generation };
    const held = await lockGenerationForInheritance(client, sessionId, point.generation);
    if (held === undefined) throw new Error(`rewindSession: session ${sessionId} has no current generation`);
    // Other sessions must not read the superseded turns any more: their publications are retired like a deleted
    // session's (marker leaves, the shared summaries over them rebuilt), and snapshots pinned before are re-pinned.
    const retired = await retireFromScope(
      deps,
      boss,
      client,
      session.scopeId,
      { superseded: { sessionId, generation: point.generation, from: point.keep } },
      "reverted",
    );
    if (retired.publications > 0) await bumpRetentionEpochs(client, [session.scopeId]);
    const generation = await startNextGeneration(client, sessionId, point.generation, point.keep);
    // The retained records keep their host coordinates (the adapter still sees OpenCode's messages as held) under
    // keys of their own: a finalization key names one record, and the previous generation's rows stay as they were.
    const keys = (await listInheritedRecords(client, previous, point.keep)).map((record) => ({
      seq: record.seq,
      eventKey: `${record.eventKey}@g${generation}`,
      stageKey: `${record.stageKey}@g${generation}`,
      attributes: {},
    }));
    await takeOver(client, deps.fold, boss, { sessionId, generation }, previous, keys);
    return {
      status: "rewound",
      generation,
      kept: point.keep,
      superseded: held - point.keep,
      publicationsRetired: retired.publications,
    };
  });
}

/**
 * Writes the taken-over records into the target generation (empty, its rows locked by the caller), then its tree:
 * the leaves appended and the source's nodes over whole inherited ranges committed, through the ordinary fold, with
 * the jobs that became ready. Answers the number of nodes taken over.
 */
async function takeOver(
  client: PoolClient,
  fold: FoldParams,
  boss: JobInserter,
  target: { sessionId: string; generation: number },
  source: InheritanceSource,
  keys: readonly InheritedKey[],
): Promise<number> {
  await writeInheritedRecords(client, target, source, keys);
  const locked = await lockTree(client, target);
  if (!locked) throw new Error(`inherit: session ${target.sessionId} generation ${target.generation} has no tree`);
  const sourceTree = await findSessionTree(client, source.sessionId, source.generation);
  const nodes = sourceTree ? await listInheritedNodes(client, sourceTree.treeId, keys.length) : [];
  const applied = await applyTreeChanges(client, locked, inheritedChanges(keys.length, nodes), fold, {
    buildFreeInline: true,
  });
  await enqueueNodeJobs(boss, client, locked.tree.treeId, applied.ready);
  return nodes.length;
}

/**
 * Each parent record gets the child's coordinates of one copy with the same kind and payload (the first unused, in
 * the copies' order): their finalization keys, and the host attributes that let the adapter see the copy as held.
 */
function matchCopies(
  parent: readonly { seq: number; kind: string; payloadHash: Buffer }[],
  copies: readonly RecordToSeal[],
): InheritedKey[] {
  const unused = new Map<string, RecordToSeal[]>();
  for (const copy of copies) {
    const key = `${copy.kind}:${copy.payloadHash.toString("hex")}`;
    const list = unused.get(key) ?? [];
    list.push(copy);
    unused.set(key, list);
  }
  return parent.map((record) => {
    const copy = unused.get(`${record.kind}:${record.payloadHash.toString("hex")}`)?.shift();
    // findInheritanceSource compared the multisets in the same transaction: a miss is a bug, not bad input.
    if (!copy) throw new Error(`inheritHistory: parent record ${record.seq} matches no copy`);
    return { seq: record.seq, eventKey: copy.eventKey, stageKey: copy.stageKey, attributes: copy.attributes };
  });
}

/** The inherited leaves appended in order, each taken-over node committed once the leaf that completes it is in. */
function inheritedChanges(leafCount: number, nodes: readonly NewNode[]): TreeChange[] {
  const changes: TreeChange[] = [];
  let next = 0;
  for (let leaf = 0; leaf < leafCount; leaf++) {
    changes.push({ type: "append", index: leaf });
    for (let node = nodes[next]; node && endOf(node) <= leaf + 1; node = nodes[next]) {
      changes.push({ type: "built", node });
      next += 1;
    }
  }
  return changes;
}
