/**
 * Applying events to a tree: the one place where leaves are appended, nodes committed and the view folded. The
 * decisions are src/core/tree-engine.ts; this module locks the tree, supplies the engine's reads and writes, and
 * writes its plan (the rows themselves: trees.ts, nodes.ts, view-revisions.ts, tree-log.ts).
 */
import { createHash } from "node:crypto";
import { type FoldParams, foldParamsFor } from "../core/fold.js";
import { payloadAsText } from "../core/payload.js";
import { type LeafSourceRecord, leafSourceText, NODE_BYTES } from "../core/summary.js";
import { tokenize, toTsvectorLiteral } from "../core/tokenize.js";
import { childrenOf, type NodeAddress, nodeKey, parentOf } from "../core/tree.js";
import {
  type EngineChange,
  type EnginePlan,
  type FreeInputs,
  planTreeEvents,
  type TreeEngineIo,
} from "../core/tree-engine.js";
import type { Queryable } from "./db.js";
import { findNodeSizes, findNodes, type NewNode } from "./nodes.js";
import { TREE_CHANNEL } from "./notifications.js";
import { readRecordWithPayload } from "./records.js";
import { TREE_COLUMNS, type Tree, type TreeRow, toTree } from "./trees.js";
import {
  PARTS_AT,
  partsInOrder,
  toViewRevision,
  VIEW_COLUMNS,
  type ViewRevision,
  type ViewRow,
} from "./view-revisions.js";

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

/** What a free leaf is built from. */
export interface LeafSource {
  readonly record: LeafSourceRecord & { readonly payloadHash: Buffer };
  /** null: larger than a free leaf can be (not transferred). */
  readonly payload: Buffer | null;
}

/** A tree locked for change in the caller's transaction. */
export interface LockedTree {
  readonly tree: Tree;
}

/**
 * Locks a tree's row (FOR UPDATE). Every writer of a tree (sealing leaves, committing nodes) goes through here, so
 * readiness decisions and folds see each other's commits.
 *
 * The fold state a writer continues from (counters, the latest revision's size and mode) is on the locked row itself:
 * under READ COMMITTED, a statement that waited for a row lock re-reads that row at its newest version, but anything
 * joined from another table in the same statement comes from the snapshot taken before the wait, i.e. the state the
 * previous lock holder just replaced (the refold audit caught exactly that once, with the revision in a join). The
 * parts, when a fold needs them, are read by a later statement (loadFrontier), after the lock is held.
 */
export async function lockTree(
  db: Queryable,
  where: { treeId: number } | { sessionId: string; generation: number },
): Promise<LockedTree | undefined> {
  const byId = "treeId" in where;
  const result = await db.query<TreeRow>({
    name: byId ? "optchat.trees.lock_by_id" : "optchat.trees.lock_session",
    text: `SELECT ${TREE_COLUMNS} FROM optchat.trees
      WHERE ${byId ? "tree_id = $1::bigint" : "kind = 'session' AND session_id = $1::text AND generation = $2::int"}
        FOR UPDATE`,
    values: byId ? [where.treeId] : [where.sessionId, where.generation],
  });
  const row = result.rows[0];
  return row ? { tree: toTree(row) } : undefined;
}

export interface NodeJobState extends LockedTree {
  readonly latest: ViewRevision | undefined;
  readonly built: boolean;
  readonly failing: boolean;
}

/** What a node job needs to know before it starts, in one round trip (no lock). */
export async function inspectNodeJob(
  db: Queryable,
  treeId: number,
  node: NodeAddress,
): Promise<NodeJobState | undefined> {
  const result = await db.query<Record<string, unknown>>(
    `SELECT ${TREE_COLUMNS.split(", ")
      .map((c) => `t.${c}`)
      .join(", ")},
            ${VIEW_COLUMNS.split(", ")
              .map((c) => `v.${c} AS v_${c}`)
              .join(", ")}, parts.levels AS v_levels, parts.idxs AS v_idxs,
            EXISTS (SELECT 1 FROM optchat.nodes n WHERE n.tree_id = t.tree_id AND n.level = $2::int AND n.idx = $3::bigint) AS built,
            EXISTS (SELECT 1 FROM optchat.node_failures f WHERE f.tree_id = t.tree_id AND f.level = $2::int AND f.idx = $3::bigint) AS failing
       FROM optchat.trees t
       LEFT JOIN LATERAL (SELECT * FROM optchat.view_revisions r WHERE r.tree_id = t.tree_id ORDER BY r.revision DESC LIMIT 1) v ON true
       LEFT JOIN LATERAL ${PARTS_AT("v.revision")} parts ON true
      WHERE t.tree_id = $1::bigint`,
    [treeId, node.level, node.index],
  );
  const row = result.rows[0];
  if (!row) return undefined;
  const view = Object.fromEntries(VIEW_COLUMNS.split(", ").map((c) => [c, row[`v_${c}`]])) as unknown as ViewRow;
  return {
    tree: toTree(row as unknown as TreeRow),
    latest:
      view.revision === null
        ? undefined
        : toViewRevision(view, partsInOrder(row.v_levels as number[] | null, row.v_idxs as string[] | null)),
    built: row.built as boolean,
    failing: row.failing as boolean,
  };
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

/**
 * What planTreeChanges decided for one tree, written by one statement (writeTreeChanges, or the ingest's commit
 * statement in store/ingest-commit.ts, which writes the records and their trees' folds together).
 */
export interface TreeChangePlan extends Omit<EnginePlan, "built"> {
  readonly treeId: number;
  readonly upperBytes: number;
  readonly lowerBytes: number;
  /** A node was built: announce it on commit (see planTreeChanges). */
  readonly notify: boolean;
}

/** The number of parameters {@link treeWriteCtes} takes. */
export const TREE_WRITE_PARAMS = 26;

/**
 * The data-modifying CTEs that write any number of plans (parameters $first .. $first+25, values from
 * treeWriteValues): view parts closed and opened, new view revisions, the trees' counters and fold state. The last,
 * `tree_updates`, returns the updated tree rows. One statement for a whole batch: a batch over many sessions costs
 * the same round trips as one session. `gate`, an SQL condition, writes nothing unless it holds (the ingest's check
 * that the trees are still as planned, store/ingest-write.ts).
 */
export function treeWriteCtes(first: number, gate = "true"): string {
  const p = (k: number) => `$${first + k}`;
  return `tree_parts_closed AS (
       UPDATE optchat.view_parts p SET until_revision = c.revision
         FROM unnest(${p(0)}::bigint[], ${p(1)}::int[], ${p(2)}::bigint[], ${p(3)}::int[]) AS c(tree_id, level, idx, revision)
        WHERE p.tree_id = c.tree_id AND p.level = c.level AND p.idx = c.idx AND p.until_revision IS NULL AND ${gate}
     ), tree_parts_opened AS (
       INSERT INTO optchat.view_parts (tree_id, level, idx, from_revision)
       SELECT * FROM unnest(${p(4)}::bigint[], ${p(5)}::int[], ${p(6)}::bigint[], ${p(7)}::int[]) WHERE ${gate}
     ), tree_revisions AS (
       INSERT INTO optchat.view_revisions (tree_id, revision, event_no, leaf_count, bytes, shrinking, unbuilt, upper_bytes,
                                           lower_bytes)
       SELECT * FROM unnest(${p(8)}::bigint[], ${p(9)}::int[], ${p(10)}::bigint[], ${p(11)}::bigint[], ${p(12)}::int[],
                            ${p(13)}::boolean[], ${p(14)}::int[], ${p(15)}::int[], ${p(16)}::int[]) WHERE ${gate}
     ), tree_updates AS (
       UPDATE optchat.trees t SET leaf_count = u.leaf_count, built_leaves = u.built_leaves, event_count = u.event_count,
                                  view_revision = u.view_revision, view_bytes = u.view_bytes,
                                  view_shrinking = u.view_shrinking, view_unbuilt = u.view_unbuilt
         FROM unnest(${p(17)}::bigint[], ${p(18)}::bigint[], ${p(19)}::bigint[], ${p(20)}::bigint[], ${p(21)}::int[],
                     ${p(22)}::int[], ${p(23)}::boolean[], ${p(24)}::int[], ${p(25)}::boolean[])
              AS u(tree_id, leaf_count, built_leaves, event_count, view_revision, view_bytes, view_shrinking, view_unbuilt,
                   notify)
        WHERE t.tree_id = u.tree_id AND ${gate}
       RETURNING ${TREE_COLUMNS.split(", ")
         .map((c) => `t.${c}`)
         .join(", ")}, CASE WHEN u.notify THEN pg_notify('${TREE_CHANNEL}', t.tree_id::text) END AS notified
     )`;
}

/** The parameters of {@link treeWriteCtes} for these plans, in order. */
export function treeWriteValues(plans: readonly TreeChangePlan[]): unknown[] {
  const parts = (pick: (plan: TreeChangePlan) => readonly NodeAddress[]) => {
    const rows = plans.flatMap((plan) => pick(plan).map((part) => ({ plan, part })));
    return [
      rows.map((r) => r.plan.treeId),
      rows.map((r) => r.part.level),
      rows.map((r) => r.part.index),
      rows.map((r) => r.plan.revision),
    ];
  };
  const revised = plans.filter((plan) => plan.newRevision);
  return [
    ...parts((plan) => plan.left),
    ...parts((plan) => plan.entered),
    revised.map((plan) => plan.treeId),
    revised.map((plan) => plan.revision),
    revised.map((plan) => plan.eventNo),
    revised.map((plan) => plan.leafCount),
    revised.map((plan) => plan.bytes),
    revised.map((plan) => plan.shrinking),
    revised.map((plan) => plan.unbuilt),
    revised.map((plan) => plan.upperBytes),
    revised.map((plan) => plan.lowerBytes),
    plans.map((plan) => plan.treeId),
    plans.map((plan) => plan.leafCount),
    plans.map((plan) => plan.builtLeaves),
    plans.map((plan) => plan.eventNo),
    plans.map((plan) => plan.revision),
    plans.map((plan) => plan.bytes),
    plans.map((plan) => plan.shrinking),
    plans.map((plan) => plan.unbuilt),
    plans.map((plan) => plan.notify),
  ];
}

/** The updated trees of a write, by tree id. */
export function treesWritten(rows: readonly TreeRow[]): Map<number, Tree> {
  return new Map(rows.map((row) => [Number(row.tree_id), toTree(row)]));
}

/** Writes plans in one statement; returns the updated trees by id. */
export async function writeTreeChanges(db: Queryable, plans: readonly TreeChangePlan[]): Promise<Map<number, Tree>> {
  if (plans.length === 0) return new Map();
  const result = await db.query<TreeRow>({
    // Prepared once per connection: every node commit and publication runs it.
    name: "optchat.trees.write",
    text: `WITH ${treeWriteCtes(1)} SELECT * FROM tree_updates`,
    values: treeWriteValues(plans),
  });
  return treesWritten(result.rows);
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

/**
 * The latest revision's parts in order, with the size of each and, for each left sibling, of its parent (the pairs
 * the fold may merge first) put into `known`, in one statement.
 */
export async function loadFrontier(
  db: Queryable,
  treeId: number,
  known: Map<number, number | undefined>,
): Promise<NodeAddress[]> {
  const result = await db.query<{ level: number; idx: string; bytes: number | null; parent_bytes: number | null }>(
    `SELECT p.level, p.idx,
            (SELECT n.byte_length FROM optchat.nodes n WHERE n.tree_id = p.tree_id AND n.level = p.level AND n.idx = p.idx
              ORDER BY n.revision DESC LIMIT 1) AS bytes,
            CASE WHEN p.idx % 2 = 0 THEN
              (SELECT n.byte_length FROM optchat.nodes n
                WHERE n.tree_id = p.tree_id AND n.level = p.level + 1 AND n.idx = p.idx / 2
                ORDER BY n.revision DESC LIMIT 1) END AS parent_bytes
       FROM optchat.view_parts p WHERE p.tree_id = $1::bigint AND p.until_revision IS NULL`,
    [treeId],
  );
  const parts = partsInOrder(
    result.rows.map((row) => row.level),
    result.rows.map((row) => row.idx),
  );
  for (const row of result.rows) {
    const part = { level: row.level, index: Number(row.idx) };
    if (!known.has(nodeKey(part))) known.set(nodeKey(part), row.bytes ?? undefined);
    if (part.index % 2 === 0) {
      const parent = parentOf(part);
      if (!known.has(nodeKey(parent))) known.set(nodeKey(parent), row.parent_bytes ?? undefined);
    }
  }
  return parts;
}

/**
 * What may make a ready node free (src/core/tree-engine.ts decides): a session leaf's record and its text, or a
 * parent's two children. Shared leaves are built by their publication, never here.
 */
async function freeInputs(
  db: Queryable,
  tree: Tree,
  node: NodeAddress,
  leafSource: PlanOptions["leafSource"],
): Promise<FreeInputs<Buffer> | undefined> {
  if (node.level === 0) {
    if (tree.kind !== "session" || tree.sessionId === null || tree.generation === null) return undefined;
    // A free leaf's line is at most NODE_BYTES, and its text has at least the payload's bytes less 3 (a dropped BOM;
    // invalid bytes and NUL only grow when rendered): a larger payload is never free, and is not read here, inside the
    // ingest transaction (a 64 MiB record was read back whole just to learn that).
    const found =
      leafSource?.(node.index) ??
      (await readRecordWithPayload(db, tree.sessionId, tree.generation, node.index, NODE_BYTES + 3));
    if (!found?.payload) return undefined;
    const text = leafSourceText(found.record, payloadAsText(found.payload));
    return { type: "leaf", kind: found.record.kind, text, hashes: () => [found.record.payloadHash] };
  }
  const [left, right] = childrenOf(node);
  const children = await findNodes(db, tree.treeId, [left, right]);
  const a = children.get(nodeKey(left));
  const b = children.get(nodeKey(right));
  if (!a || !b) return undefined;
  return { type: "parent", left: a.text, right: b.text, hashes: () => [sha256(a.text), sha256(b.text)] };
}

function freeNode(node: NodeAddress, text: string, inputHashes: Buffer[]): NewNode {
  return {
    level: node.level,
    index: node.index,
    text,
    inputHashes,
    summarizer: "free",
    promptVersion: null,
    attempts: 0,
    overshoot: false,
    jobId: null,
    jobAttempt: null,
    chunks: [],
  };
}

function sha256(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}

async function insertNode(db: Queryable, treeId: number, node: NewNode, eventNo: number): Promise<void> {
  await db.query(
    // The tree's search statistics (migrations/007) in the same statement; the writer holds the tree row's lock. A
    // new revision of a built address (a rebuild) supersedes the previous one (migration 013): only the newest is
    // counted; both carry the revision clock a rebuild advanced (migration 014), so a snapshot pinned before it keeps
    // seeing, and searching, the previous one. A first build is epoch 0 (nothing to tell apart).
    `WITH previous AS (
       SELECT revision, length(search) AS terms FROM optchat.nodes
        WHERE tree_id = $1::bigint AND level = $2::int AND idx = $3::bigint AND NOT superseded
     ), epoch AS (
       SELECT CASE WHEN EXISTS (SELECT 1 FROM previous) THEN (SELECT epoch FROM optchat.revision_clock) ELSE 0 END AS epoch
     ), superseded AS (
       UPDATE optchat.nodes n SET superseded = true, superseded_epoch = (SELECT epoch FROM epoch) FROM previous p
        WHERE n.tree_id = $1::bigint AND n.level = $2::int AND n.idx = $3::bigint AND n.revision = p.revision
       RETURNING p.terms
     ), node AS (
       INSERT INTO optchat.nodes (tree_id, level, idx, revision, text, byte_length, input_hashes, summarizer, prompt_version,
                                  attempts, overshoot, tree_event, job_id, job_attempt, search, revision_epoch)
       VALUES ($1::bigint, $2::int, $3::bigint,
               coalesce((SELECT max(revision) + 1 FROM optchat.nodes WHERE tree_id = $1::bigint AND level = $2::int AND idx = $3::bigint), 0),
               $4::text, octet_length($4::text), $5::bytea[], $6::text, $7::text, $8::int, $9::boolean, $10::bigint, $11::uuid, $12::int,
               $13::tsvector, (SELECT epoch FROM epoch))
       RETURNING tree_id, length(search) AS terms
     )
     INSERT INTO optchat.search_tree_stats AS s (scope_id, tree_id, documents, total_length)
     SELECT coalesce(t.scope_id, ss.scope_id), node.tree_id, 1, node.terms
       FROM node JOIN optchat.trees t ON t.tree_id = node.tree_id
       LEFT JOIN optchat.sessions ss ON ss.session_id = t.session_id
     ON CONFLICT (scope_id, tree_id)
     -- A superseded revision leaves the counts here: the row exists then (its revision was counted), and the
     -- inserted values alone are checked against the constraints.
     DO UPDATE SET documents = s.documents + excluded.documents - (SELECT count(terms) FROM superseded),
                   total_length = s.total_length + excluded.total_length - (SELECT coalesce(sum(terms), 0) FROM superseded)`,
    [
      treeId,
      node.level,
      node.index,
      node.text,
      node.inputHashes,
      node.summarizer,
      node.promptVersion,
      node.attempts,
      node.overshoot,
      eventNo,
      node.jobId,
      node.jobAttempt,
      toTsvectorLiteral(tokenize(node.text)),
    ],
  );
  if (node.chunks.length > 0) {
    await db.query(
      `INSERT INTO optchat.node_chunks (tree_id, level, idx, revision, chunk_level, chunk_index, char_start, char_end, text)
       SELECT $1::bigint, $2::int, $3::bigint,
              (SELECT max(revision) FROM optchat.nodes WHERE tree_id = $1::bigint AND level = $2::int AND idx = $3::bigint),
              c.chunk_level, c.chunk_index, c.char_start, c.char_end, c.text
         FROM unnest($4::int[], $5::int[], $6::int[], $7::int[], $8::text[]) AS c(chunk_level, chunk_index, char_start, char_end, text)`,
      [
        treeId,
        node.level,
        node.index,
        node.chunks.map((c) => c.chunkLevel),
        node.chunks.map((c) => c.chunkIndex),
        node.chunks.map((c) => c.charStart),
        node.chunks.map((c) => c.charEnd),
        node.chunks.map((c) => c.text),
      ],
    );
  }
}
