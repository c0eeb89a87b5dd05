import { createHash } from "node:crypto";
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
} from "../core/fold.js";
import { payloadAsText } from "../core/payload.js";
import { freeLeafText, freeParentText, leafSourceText, NODE_BYTES } from "../core/summary.js";
import { tokenize, toTsvectorLiteral } from "../core/tokenize.js";
import {
  childrenOf,
  endOf,
  leafReady,
  type NodeAddress,
  nodeKey,
  parentOf,
  parentReady,
  siblingOf,
} from "../core/tree.js";
import type { Queryable } from "./db.js";
import { TREE_CHANNEL } from "./notifications.js";
import { readRecordWithPayload } from "./records.js";

export type TreeKind = "session" | "shared";

interface TreeRow {
  tree_id: number;
  kind: TreeKind;
  session_id: string | null;
  generation: number | null;
  scope_id: string | null;
  leaf_count: number;
  built_leaves: number;
  event_count: number;
  view_revision: number;
  view_bytes: number;
  view_shrinking: boolean;
  view_unbuilt: number;
}

export interface Tree {
  readonly treeId: number;
  readonly kind: TreeKind;
  readonly sessionId: string | null;
  readonly generation: number | null;
  readonly scopeId: string | null;
  readonly leafCount: number;
  readonly builtLeaves: number;
  readonly eventCount: number;
  readonly viewRevision: number;
  /** The latest revision's size, mode and placeholder count, kept on the locked row (see applyTreeChanges). */
  readonly viewBytes: number;
  readonly viewShrinking: boolean;
  readonly viewUnbuilt: number;
}

function toTree(row: TreeRow): Tree {
  return {
    treeId: row.tree_id,
    kind: row.kind,
    sessionId: row.session_id,
    generation: row.generation,
    scopeId: row.scope_id,
    leafCount: row.leaf_count,
    builtLeaves: row.built_leaves,
    eventCount: row.event_count,
    viewRevision: row.view_revision,
    viewBytes: row.view_bytes,
    viewShrinking: row.view_shrinking,
    viewUnbuilt: row.view_unbuilt,
  };
}

const TREE_COLUMNS =
  "tree_id, kind, session_id, generation, scope_id, leaf_count, built_leaves, event_count, view_revision, view_bytes, view_shrinking, view_unbuilt";

export async function findSessionTree(
  db: Queryable,
  sessionId: string,
  generation: number,
  lock = false,
): Promise<Tree | undefined> {
  const result = await db.query<TreeRow>(
    `SELECT ${TREE_COLUMNS} FROM optchat.trees WHERE kind = 'session' AND session_id = $1::text AND generation = $2::int
     ${lock ? "FOR UPDATE" : ""}`,
    [sessionId, generation],
  );
  return result.rows[0] ? toTree(result.rows[0]) : undefined;
}

export async function findTree(db: Queryable, treeId: number): Promise<Tree | undefined> {
  const result = await db.query<TreeRow>(`SELECT ${TREE_COLUMNS} FROM optchat.trees WHERE tree_id = $1::bigint`, [
    treeId,
  ]);
  return result.rows[0] ? toTree(result.rows[0]) : undefined;
}

export async function findSharedTreeOfScope(db: Queryable, scopeId: string): Promise<Tree | undefined> {
  const result = await db.query<TreeRow>(
    `SELECT ${TREE_COLUMNS} FROM optchat.trees WHERE kind = 'shared' AND scope_id = $1::text`,
    [scopeId],
  );
  return result.rows[0] ? toTree(result.rows[0]) : undefined;
}

// ---------------------------------------------------------------------------------------------------------------
// Nodes

export interface NodeRecord {
  readonly level: number;
  readonly index: number;
  readonly revision: number;
  readonly text: string;
  readonly byteLength: number;
  readonly summarizer: string;
  readonly promptVersion: string | null;
  readonly attempts: number;
  readonly overshoot: boolean;
  readonly treeEvent: number;
  readonly builtAt: Date;
}

interface NodeRow {
  level: number;
  idx: number;
  revision: number;
  text: string;
  byte_length: number;
  summarizer: string;
  prompt_version: string | null;
  attempts: number;
  overshoot: boolean;
  tree_event: number;
  built_at: Date;
}

/**
 * The nodes at `addresses` as a view at `atEvent` sees them: for each, the newest revision committed at or before that
 * event (all events when omitted). Absent addresses are not built (yet, or at that point).
 */
export async function findNodes(
  db: Queryable,
  treeId: number,
  addresses: readonly NodeAddress[],
  atEvent?: number,
): Promise<Map<number, NodeRecord>> {
  if (addresses.length === 0) return new Map();
  const result = await db.query<NodeRow>(
    `SELECT DISTINCT ON (n.level, n.idx) n.level, n.idx, n.revision, n.text, n.byte_length, n.summarizer,
            n.prompt_version, n.attempts, n.overshoot, n.tree_event, n.built_at
       FROM unnest($2::int[], $3::bigint[]) AS a(level, idx)
       JOIN optchat.nodes n ON n.tree_id = $1::bigint AND n.level = a.level AND n.idx = a.idx
      WHERE $4::bigint IS NULL OR n.tree_event <= $4::bigint
      ORDER BY n.level, n.idx, n.revision DESC`,
    [treeId, addresses.map((a) => a.level), addresses.map((a) => a.index), atEvent ?? null],
  );
  return new Map(
    result.rows.map((row) => [
      nodeKey({ level: row.level, index: row.idx }),
      {
        level: row.level,
        index: row.idx,
        revision: row.revision,
        text: row.text,
        byteLength: row.byte_length,
        summarizer: row.summarizer,
        promptVersion: row.prompt_version,
        attempts: row.attempts,
        overshoot: row.overshoot,
        treeEvent: row.tree_event,
        builtAt: row.built_at,
      },
    ]),
  );
}

/** Byte lengths only, for folds: a commit holding the tree lock must not read 128 KB of texts to learn sizes. */
export async function findNodeSizes(
  db: Queryable,
  treeId: number,
  addresses: readonly NodeAddress[],
): Promise<Map<number, number>> {
  if (addresses.length === 0) return new Map();
  const result = await db.query<{ level: number; idx: number; byte_length: number }>(
    `SELECT DISTINCT ON (n.level, n.idx) n.level, n.idx, n.byte_length
       FROM unnest($2::int[], $3::bigint[]) AS a(level, idx)
       JOIN optchat.nodes n ON n.tree_id = $1::bigint AND n.level = a.level AND n.idx = a.idx
      ORDER BY n.level, n.idx, n.revision DESC`,
    [treeId, addresses.map((a) => a.level), addresses.map((a) => a.index)],
  );
  return new Map(result.rows.map((row) => [nodeKey({ level: row.level, index: Number(row.idx) }), row.byte_length]));
}

export interface NewNode {
  readonly level: number;
  readonly index: number;
  readonly text: string;
  readonly inputHashes: readonly Buffer[];
  readonly summarizer: string;
  readonly promptVersion: string | null;
  readonly attempts: number;
  readonly overshoot: boolean;
  readonly jobId: string | null;
  readonly jobAttempt: number | null;
  readonly chunks: readonly NodeChunk[];
}

export interface NodeChunk {
  readonly chunkLevel: number;
  readonly chunkIndex: number;
  readonly charStart: number;
  readonly charEnd: number;
  readonly text: string;
}

// ---------------------------------------------------------------------------------------------------------------
// Views
//
// A revision's parts are the view_parts rows valid at it (from_revision <= R < until_revision, migration 005): a part
// is written once when it enters the view and closed once when it is merged, so revisions cost their changes, not
// their whole frontier, and every revision, pinned or not, reads back exactly as it was folded.

export interface ViewRevision {
  readonly treeId: number;
  readonly revision: number;
  readonly eventNo: number;
  readonly leafCount: number;
  readonly parts: readonly NodeAddress[];
  readonly bytes: number;
  readonly shrinking: boolean;
  readonly unbuilt: number;
  readonly params: FoldParams;
  readonly createdAt: Date;
}

const VIEW_COLUMNS =
  "tree_id, revision, event_no, leaf_count, bytes, shrinking, unbuilt, upper_bytes, lower_bytes, created_at";

interface ViewRow {
  tree_id: number;
  revision: number;
  event_no: number;
  leaf_count: number;
  bytes: number;
  shrinking: boolean;
  unbuilt: number;
  upper_bytes: number;
  lower_bytes: number;
  created_at: Date;
}

function toViewRevision(row: ViewRow, parts: readonly NodeAddress[]): ViewRevision {
  return {
    treeId: row.tree_id,
    revision: row.revision,
    eventNo: row.event_no,
    leafCount: row.leaf_count,
    parts,
    bytes: row.bytes,
    shrinking: row.shrinking,
    unbuilt: row.unbuilt,
    params: { upperBytes: row.upper_bytes, lowerBytes: row.lower_bytes },
    createdAt: row.created_at,
  };
}

/** Parts in view order (by first leaf; a view's parts never overlap). */
function partsInOrder(levels: readonly number[] | null, idxs: readonly (number | string)[] | null): NodeAddress[] {
  if (!levels || !idxs) return [];
  return levels
    .map((level, k) => ({ level, index: Number(idxs[k]) }))
    .sort((a, b) => a.index * 2 ** a.level - b.index * 2 ** b.level);
}

/** The parts valid at revision `r` (a SQL expression) of tree $1, as two arrays, for a LATERAL join. */
const PARTS_AT = (r: string) => `(
  SELECT array_agg(p.level) AS levels, array_agg(p.idx) AS idxs
    FROM optchat.view_parts p
   WHERE p.tree_id = $1::bigint AND p.from_revision <= ${r} AND (p.until_revision IS NULL OR p.until_revision > ${r}))`;

/** A revision of a tree's view; the latest when `revision` is omitted. One statement: one snapshot. */
export async function findViewRevision(
  db: Queryable,
  treeId: number,
  revision?: number,
): Promise<ViewRevision | undefined> {
  const result = await db.query<ViewRow & { levels: number[] | null; idxs: string[] | null }>(
    `SELECT v.*, parts.levels, parts.idxs
       FROM (SELECT ${VIEW_COLUMNS} FROM optchat.view_revisions
              WHERE tree_id = $1::bigint AND ($2::int IS NULL OR revision = $2::int)
              ORDER BY revision DESC LIMIT 1) v
       CROSS JOIN LATERAL ${PARTS_AT("v.revision")} parts`,
    [treeId, revision ?? null],
  );
  const row = result.rows[0];
  return row ? toViewRevision(row, partsInOrder(row.levels, row.idxs)) : undefined;
}

/** Every persisted revision of a tree with its parts, oldest first (audits: reads the tree's whole history). */
export async function listViewRevisions(db: Queryable, treeId: number): Promise<ViewRevision[]> {
  const [revisions, parts] = await Promise.all([
    db.query<ViewRow>(
      `SELECT ${VIEW_COLUMNS} FROM optchat.view_revisions WHERE tree_id = $1::bigint ORDER BY revision`,
      [treeId],
    ),
    db.query<{ level: number; idx: string; from_revision: number; until_revision: number | null }>(
      "SELECT level, idx, from_revision, until_revision FROM optchat.view_parts WHERE tree_id = $1::bigint ORDER BY from_revision",
      [treeId],
    ),
  ]);
  // One sweep over the revisions: parts enter at from_revision and leave at until_revision.
  const alive = new Map<string, NodeAddress & { until: number | null }>();
  let next = 0;
  return revisions.rows.map((row) => {
    while (next < parts.rows.length && (parts.rows[next]?.from_revision as number) <= row.revision) {
      const part = parts.rows[next] as (typeof parts.rows)[number];
      alive.set(`${part.level}:${part.idx}`, {
        level: part.level,
        index: Number(part.idx),
        until: part.until_revision,
      });
      next += 1;
    }
    for (const [key, part] of alive) if (part.until !== null && part.until <= row.revision) alive.delete(key);
    const at = [...alive.values()].map(({ level, index }) => ({ level, index }));
    return toViewRevision(
      row,
      at.sort((a, b) => a.index * 2 ** a.level - b.index * 2 ** b.level),
    );
  });
}

export interface CachedProjection {
  readonly fits: boolean;
  readonly parts: readonly NodeAddress[];
  readonly bytes: number;
}

export async function findProjection(
  db: Queryable,
  treeId: number,
  revision: number,
  budget: number,
): Promise<CachedProjection | undefined> {
  const result = await db.query<{ fits: boolean; levels: number[]; idxs: number[]; bytes: number }>(
    "SELECT fits, levels, idxs, bytes FROM optchat.view_projections WHERE tree_id = $1::bigint AND revision = $2::int AND budget = $3::int",
    [treeId, revision, budget],
  );
  const row = result.rows[0];
  return row
    ? { fits: row.fits, parts: row.levels.map((level, k) => ({ level, index: Number(row.idxs[k]) })), bytes: row.bytes }
    : undefined;
}

export async function saveProjection(
  db: Queryable,
  treeId: number,
  revision: number,
  budget: number,
  projection: CachedProjection,
): Promise<void> {
  await db.query(
    `INSERT INTO optchat.view_projections (tree_id, revision, budget, fits, levels, idxs, bytes)
     VALUES ($1::bigint, $2::int, $3::int, $4::boolean, $5::int[], $6::bigint[], $7::int) ON CONFLICT DO NOTHING`,
    [
      treeId,
      revision,
      budget,
      projection.fits,
      projection.parts.map((p) => p.level),
      projection.parts.map((p) => p.index),
      projection.bytes,
    ],
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Applying events: the one place where leaves are appended, nodes committed and the view folded.

export type TreeChange =
  | { readonly type: "append"; readonly index: number }
  | { readonly type: "built"; readonly node: NewNode };

export interface AppliedChanges {
  readonly tree: Tree;
  /** Nodes that became ready to build: enqueue exactly these (seed 002 §4.1 readiness, seed 000 §10 scheduling). */
  readonly ready: readonly NodeAddress[];
  /** The view revision after the changes (a new one when the view changed). */
  readonly viewRevision: number;
}

/** How many free nodes one compactor commit builds inline at most (see applyTreeChanges). */
const MAX_INLINE_BUILDS = 64;

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
 * Applies changes to a tree locked by `lockTree` in this transaction: inserts built nodes, folds the view with every
 * event, and in one final statement writes the parts that entered and left the view, persists a new view revision
 * when the view changed, updates the tree's counters and fold state and, when a node was built, announces it (NOTIFY,
 * delivered on commit) to the callers waiting for readiness (settleTree). Appends alone do not notify: they make
 * nothing more ready, and a notifying transaction takes PostgreSQL's cluster-wide notification lock at pre-commit and
 * holds it to the end of its commit, which serializes notifying commits (8 ingesting clients scaled 2.4x over one
 * while pgbench scaled 8.3x in the same run; on the loaded 2-core machine of issue 9 the gain from dropping it was
 * within the run-to-run noise). Returns the nodes that became ready.
 *
 * Events are not stored: a built event is its node row (nodes.tree_event), every other event number is an append of
 * the next leaf (listTreeEvents). Appends that cannot merge anything (appendWithoutFit: the common case of an ingest)
 * never read the view's parts; the first event that needs the full fold reads them once (loadFrontier).
 */
export async function applyTreeChanges(
  db: Queryable,
  { tree }: LockedTree,
  changes: readonly TreeChange[],
  params: FoldParams,
  options: { buildFreeInline?: boolean } = {},
): Promise<AppliedChanges> {
  let summary: FoldSummary = { leafCount: tree.leafCount, bytes: tree.viewBytes, shrinking: tree.viewShrinking };
  let unbuilt = tree.viewUnbuilt;
  // The latest revision's parts, read when an event first needs the full fold; `state` continues from them.
  let frontier: readonly NodeAddress[] | undefined;
  let state: FoldState = EMPTY_FOLD;
  const appendedWithoutParts: NodeAddress[] = [];
  let leafCount = tree.leafCount;
  let builtLeaves = tree.builtLeaves;
  let eventNo = tree.eventCount;
  let changedView = false;
  const ready: NodeAddress[] = [];
  // Node text sizes known so far (undefined: not built), shared by every event of this call: one lookup round serves
  // a whole batch of appends.
  const known = new Map<number, number | undefined>();

  // Explicit changes first; then, with `buildFreeInline` (the compactor's commits), every node that became ready and is
  // free (a short message, or two children that fit together) is built here, in the same transaction, with no job and
  // no model call. A backlog of short messages then takes one job, not one job hop per message (~100 ms each,
  // measured). Bulk ingestion does not do it (measured: a batch of 100 records went from ~5,000 to ~300 records/s);
  // a host's per-message ingestion opts in (IngestOptions.buildFreeInline), so its next request need not wait for a
  // job hop to see a short message summarized.
  const pending: TreeChange[] = [...changes];
  const builtHere = new Set<number>();
  const checkedForFree = new Set<number>();
  let inlineBuilds = 0;
  for (;;) {
    let change = pending.shift();
    if (!change) {
      // At most MAX_INLINE_BUILDS per commit: the tree row stays locked meanwhile, and ingestion into this session
      // waits for it. Whatever is still ready afterwards becomes jobs, which continue the cascade.
      if (!options.buildFreeInline || inlineBuilds >= MAX_INLINE_BUILDS) break;
      const free = await nextFreeNode(db, tree, ready, builtHere, checkedForFree);
      if (!free) break;
      inlineBuilds += 1;
      change = { type: "built", node: free };
    }
    eventNo += 1;
    let event: FoldEvent;
    if (change.type === "append") {
      if (change.index !== leafCount)
        throw new Error(`tree ${tree.treeId}: leaf ${change.index} appended after ${leafCount} leaves`);
      leafCount += 1;
      event = { type: "append", index: change.index };
      // A leaf appended now cannot be built yet, nor can the parent it completes.
      known.set(nodeKey({ level: 0, index: change.index }), undefined);
      if (change.index % 2 === 1) known.set(nodeKey(parentOf({ level: 0, index: change.index })), undefined);
      if (leafReady(change.index, leafCount, builtLeaves)) ready.push({ level: 0, index: change.index });
      const appended = frontier === undefined ? appendWithoutFit(summary, change.index, params) : undefined;
      if (appended) {
        summary = appended;
        unbuilt += 1;
        appendedWithoutParts.push({ level: 0, index: change.index });
        changedView = true; // an append always adds a part
        continue;
      }
    } else {
      const node = { level: change.node.level, index: change.node.index };
      await insertNode(db, tree.treeId, change.node, eventNo);
      builtHere.add(nodeKey(node));
      known.set(nodeKey(node), Buffer.byteLength(change.node.text, "utf8"));
      event = { type: "built", node };
      if (node.level === 0) {
        if (node.index !== builtLeaves)
          throw new Error(`tree ${tree.treeId}: leaf ${node.index} built before leaf ${builtLeaves}`);
        builtLeaves += 1;
        if (leafReady(builtLeaves, leafCount, builtLeaves)) ready.push({ level: 0, index: builtLeaves });
      }
    }
    if (frontier === undefined) {
      frontier = await loadFrontier(db, tree.treeId, known);
      state = {
        parts: [...frontier, ...appendedWithoutParts],
        leafCount: summary.leafCount,
        shrinking: summary.shrinking,
      };
    }
    const before = state;
    // A built node's sibling decides whether their parent is ready: load it with the fold's first round.
    const sibling = event.type === "built" ? siblingOf(event.node) : undefined;
    state = (await foldWithLoadedSizes(db, tree.treeId, state, event, params, known, sibling ? [sibling] : [])).state;
    if (event.type === "built" && sibling) {
      const parent = parentOf(event.node);
      const siblingBuilt = known.get(nodeKey(sibling)) !== undefined;
      if (endOf(parent) <= leafCount && parentReady(parent, siblingBuilt, builtLeaves)) ready.push(parent);
    }
    const showsBuiltPart =
      event.type === "built" && state.parts.some((p) => p.level === event.node.level && p.index === event.node.index);
    if (state.parts !== before.parts || state.shrinking !== before.shrinking || showsBuiltPart) changedView = true;
  }

  // What entered and left the view in this call (a part that entered and was merged within it was never in a
  // revision and is not written).
  let entered: readonly NodeAddress[] = appendedWithoutParts;
  let left: readonly NodeAddress[] = [];
  if (frontier !== undefined) {
    // Every part's size is in `known`: the fold measured the whole view.
    const bytesOf: NodeBytes = (node) => known.get(nodeKey(node));
    const was = new Set(frontier.map(nodeKey));
    const is = new Set(state.parts.map(nodeKey));
    entered = state.parts.filter((part) => !was.has(nodeKey(part)));
    left = frontier.filter((part) => !is.has(nodeKey(part)));
    summary = { leafCount: state.leafCount, bytes: viewBytes(state.parts, bytesOf), shrinking: state.shrinking };
    unbuilt = state.parts.filter((part) => bytesOf(part) === undefined).length;
  }
  // Nodes built in this call (explicitly, or inline because free) are not waiting for a job.
  const stillReady = ready.filter((node) => !builtHere.has(nodeKey(node)));
  const newRevision = changedView || tree.viewRevision === 0;
  if (!newRevision && (entered.length > 0 || left.length > 0))
    throw new Error(`tree ${tree.treeId}: the view's parts changed without a new revision`);
  const revisionNo = tree.viewRevision + (newRevision ? 1 : 0);
  const updated = await db.query<TreeRow>({
    // Prepared once per connection: every tree write (each ingest, each node commit) runs it.
    name: "optchat.trees.apply",
    text: `WITH closed AS (
       UPDATE optchat.view_parts p SET until_revision = $5::int
         FROM unnest($7::int[], $8::bigint[]) AS c(level, idx)
        WHERE p.tree_id = $1::bigint AND p.level = c.level AND p.idx = c.idx AND p.until_revision IS NULL
     ), opened AS (
       INSERT INTO optchat.view_parts (tree_id, level, idx, from_revision)
       SELECT $1::bigint, o.level, o.idx, $5::int FROM unnest($9::int[], $10::bigint[]) AS o(level, idx)
     ), revision AS (
       INSERT INTO optchat.view_revisions (tree_id, revision, event_no, leaf_count, bytes, shrinking, unbuilt, upper_bytes,
                                           lower_bytes)
       SELECT $1::bigint, $5::int, $4::bigint, $2::bigint, $11::int, $12::boolean, $13::int, $14::int, $15::int
        WHERE $6::boolean
     )
     UPDATE optchat.trees SET leaf_count = $2::bigint, built_leaves = $3::bigint, event_count = $4::bigint,
                              view_revision = $5::int, view_bytes = $11::int, view_shrinking = $12::boolean,
                              view_unbuilt = $13::int
      WHERE tree_id = $1::bigint
     RETURNING ${TREE_COLUMNS}, CASE WHEN $16::boolean THEN pg_notify('${TREE_CHANNEL}', tree_id::text) END`,
    values: [
      tree.treeId,
      leafCount,
      builtLeaves,
      eventNo,
      revisionNo,
      newRevision,
      left.map((p) => p.level),
      left.map((p) => p.index),
      entered.map((p) => p.level),
      entered.map((p) => p.index),
      summary.bytes,
      summary.shrinking,
      unbuilt,
      params.upperBytes,
      params.lowerBytes,
      builtHere.size > 0,
    ],
  });
  return { tree: toTree(updated.rows[0] as TreeRow), ready: stillReady, viewRevision: revisionNo };
}

/**
 * The latest revision's parts in order, with the size of each and, for each left sibling, of its parent (the pairs
 * the fold may merge first) put into `known`, in one statement.
 */
async function loadFrontier(
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
 * The first ready node (in readiness order) that is free and not built yet, with its free text; undefined when none.
 * A session leaf is free when `kind: text` of its record fits; a parent when its two children joined by a newline fit.
 * Shared leaves are built by their publication, never here.
 */
async function nextFreeNode(
  db: Queryable,
  tree: Tree,
  ready: readonly NodeAddress[],
  builtHere: ReadonlySet<number>,
  checked: Set<number>,
): Promise<NewNode | undefined> {
  for (const node of ready) {
    const key = nodeKey(node);
    if (builtHere.has(key) || checked.has(key)) continue;
    checked.add(key);
    if (node.level === 0) {
      if (tree.kind !== "session" || tree.sessionId === null || tree.generation === null) continue;
      // A free leaf's line is at most NODE_BYTES, and its text has at least the payload's bytes less 3 (a dropped
      // BOM; invalid bytes and NUL only grow when rendered): a larger payload is never free, and is not read here,
      // inside the ingest transaction (a 64 MiB record was read back whole just to learn that).
      const found = await readRecordWithPayload(db, tree.sessionId, tree.generation, node.index, NODE_BYTES + 3);
      if (!found?.payload) continue;
      const text = freeLeafText(found.record.kind, leafSourceText(found.record, payloadAsText(found.payload)));
      if (text !== undefined) return freeNode(node, text, [found.record.payloadHash]);
    } else {
      const [left, right] = childrenOf(node);
      const children = await findNodes(db, tree.treeId, [left, right]);
      const a = children.get(nodeKey(left));
      const b = children.get(nodeKey(right));
      if (!a || !b) continue;
      const text = freeParentText(a.text, b.text);
      if (text !== undefined) return freeNode(node, text, [sha256(a.text), sha256(b.text)]);
    }
  }
  return undefined;
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

async function loadSizes(
  db: Queryable,
  treeId: number,
  known: Map<number, number | undefined>,
  addresses: readonly NodeAddress[],
): Promise<void> {
  const missing = addresses.filter((address) => !known.has(nodeKey(address)));
  if (missing.length === 0) return;
  const found = await findNodeSizes(db, treeId, missing);
  for (const address of missing) known.set(nodeKey(address), found.get(nodeKey(address)));
}

async function foldWithLoadedSizes(
  db: Queryable,
  treeId: number,
  state: FoldState,
  event: FoldEvent,
  params: FoldParams,
  known: Map<number, number | undefined>,
  alsoLoad: readonly NodeAddress[],
) {
  const load = (addresses: readonly NodeAddress[]) => loadSizes(db, treeId, known, addresses);
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
      if (!known.has(key)) {
        asked.push(node);
        return undefined;
      }
      return known.get(key);
    };
    const result = applyFoldEvent(state, event, bytesOf, params);
    if (asked.length === 0) return result;
    await load(asked);
  }
}

async function insertNode(db: Queryable, treeId: number, node: NewNode, eventNo: number): Promise<void> {
  await db.query(
    `INSERT INTO optchat.nodes (tree_id, level, idx, revision, text, byte_length, input_hashes, summarizer, prompt_version,
                                attempts, overshoot, tree_event, job_id, job_attempt, search)
     VALUES ($1::bigint, $2::int, $3::bigint,
             coalesce((SELECT max(revision) + 1 FROM optchat.nodes WHERE tree_id = $1::bigint AND level = $2::int AND idx = $3::bigint), 0),
             $4::text, octet_length($4::text), $5::bytea[], $6::text, $7::text, $8::int, $9::boolean, $10::bigint, $11::uuid, $12::int,
             $13::tsvector)`,
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

// ---------------------------------------------------------------------------------------------------------------
// Failures and audits

export async function recordNodeFailure(
  db: Queryable,
  treeId: number,
  node: NodeAddress,
  error: string,
): Promise<{ failures: number }> {
  const result = await db.query<{ failures: number }>(
    `INSERT INTO optchat.node_failures (tree_id, level, idx, failures, last_error) VALUES ($1::bigint, $2::int, $3::bigint, 1, $4::text)
     ON CONFLICT (tree_id, level, idx) DO UPDATE
       SET failures = optchat.node_failures.failures + 1, last_failed_at = now(), last_error = excluded.last_error
     RETURNING failures`,
    [treeId, node.level, node.index, error.slice(0, 2000)],
  );
  return { failures: result.rows[0]?.failures ?? 1 };
}

export async function clearNodeFailure(db: Queryable, treeId: number, node: NodeAddress): Promise<void> {
  await db.query(
    "DELETE FROM optchat.node_failures WHERE tree_id = $1::bigint AND level = $2::int AND idx = $3::bigint",
    [treeId, node.level, node.index],
  );
}

export interface NodeFailure {
  readonly level: number;
  readonly index: number;
  readonly failures: number;
  readonly firstFailedAt: Date;
  readonly lastFailedAt: Date;
  readonly lastError: string;
}

export async function listNodeFailures(db: Queryable, treeId: number): Promise<NodeFailure[]> {
  const result = await db.query<{
    level: number;
    idx: number;
    failures: number;
    first_failed_at: Date;
    last_failed_at: Date;
    last_error: string;
  }>(
    "SELECT level, idx, failures, first_failed_at, last_failed_at, last_error FROM optchat.node_failures WHERE tree_id = $1::bigint ORDER BY idx, level",
    [treeId],
  );
  return result.rows.map((r) => ({
    level: r.level,
    index: r.idx,
    failures: r.failures,
    firstFailedAt: r.first_failed_at,
    lastFailedAt: r.last_failed_at,
    lastError: r.last_error,
  }));
}

export interface TreeEventRow {
  readonly eventNo: number;
  readonly event: FoldEvent;
}

/**
 * A tree's fold events in order, derived (migration 005): event n is the build of the node row committed at n
 * (nodes.tree_event), and every other event number up to the tree's event count appends the next leaf, because leaves
 * are appended strictly in order. The audit checks that the appends come out to the tree's leaf count.
 */
export async function listTreeEvents(
  db: Queryable,
  treeId: number,
): Promise<{ events: TreeEventRow[]; problems: string[] }> {
  const [built, tree] = await Promise.all([
    db.query<{ tree_event: string; level: number; idx: string }>(
      "SELECT tree_event, level, idx FROM optchat.nodes WHERE tree_id = $1::bigint ORDER BY tree_event",
      [treeId],
    ),
    db.query<{ event_count: string; leaf_count: string }>(
      "SELECT event_count, leaf_count FROM optchat.trees WHERE tree_id = $1::bigint",
      [treeId],
    ),
  ]);
  const eventCount = Number(tree.rows[0]?.event_count ?? 0);
  const leafCount = Number(tree.rows[0]?.leaf_count ?? 0);
  const events: TreeEventRow[] = [];
  const problems: string[] = [];
  let nextLeaf = 0;
  let k = 0;
  for (let eventNo = 1; eventNo <= eventCount; eventNo++) {
    const node = built.rows[k];
    if (node && Number(node.tree_event) === eventNo) {
      events.push({ eventNo, event: { type: "built", node: { level: node.level, index: Number(node.idx) } } });
      k += 1;
      const twin = built.rows[k];
      if (twin && Number(twin.tree_event) === eventNo) problems.push(`two nodes are committed at event ${eventNo}`);
    } else {
      events.push({ eventNo, event: { type: "append", index: nextLeaf } });
      nextLeaf += 1;
    }
  }
  if (k < built.rows.length)
    problems.push(`${built.rows.length - k} node(s) committed at events beyond the tree's ${eventCount}`);
  if (nextLeaf !== leafCount) problems.push(`the events append ${nextLeaf} leaves, the tree counts ${leafCount}`);
  return { events, problems };
}

/** Byte sizes of every node of a tree with the event that committed each revision (for audits and refolds). */
export async function listNodeSizes(
  db: Queryable,
  treeId: number,
): Promise<{ level: number; index: number; revision: number; bytes: number; treeEvent: number }[]> {
  const result = await db.query<{
    level: number;
    idx: number;
    revision: number;
    byte_length: number;
    tree_event: number;
  }>(
    "SELECT level, idx, revision, byte_length, tree_event FROM optchat.nodes WHERE tree_id = $1::bigint ORDER BY tree_event",
    [treeId],
  );
  return result.rows.map((r) => ({
    level: r.level,
    index: r.idx,
    revision: r.revision,
    bytes: r.byte_length,
    treeEvent: r.tree_event,
  }));
}

/**
 * Nodes that are ready but not built, over all trees: the next leaf of every session tree behind its records, and
 * every parent whose two children exist and whose end is within the built prefix. Scheduling is event-driven, so a
 * ready node is normally in the queue; this finds the ones whose job was lost (an operator deleted jobs, a job gave
 * up) so that a starting worker can schedule them again. Reads indexes only; run once per worker start.
 */
export async function findReadyUnbuiltNodes(
  db: Queryable,
  limit: number,
): Promise<{ treeId: number; node: NodeAddress }[]> {
  // Open jobs are recognised by pg-boss's singleton_key column (our node jobs carry "<tree>:<level>:<index>",
  // src/compactor/queue.ts), in pg-boss's own table: the one place our SQL reads pg-boss's schema.
  const result = await db.query<{ tree_id: number; level: number; idx: number }>(
    `WITH ready AS (
       SELECT t.tree_id, 0 AS level, t.built_leaves AS idx
         FROM optchat.trees t
        WHERE t.kind = 'session' AND t.built_leaves < t.leaf_count
       UNION ALL
       SELECT c.tree_id, c.level + 1, c.idx / 2
         FROM optchat.nodes c
         JOIN optchat.trees t ON t.tree_id = c.tree_id
        WHERE c.idx % 2 = 0 AND c.revision = 0
          AND (c.idx + 2) * (1::bigint << c.level) <= t.built_leaves
          AND EXISTS (SELECT 1 FROM optchat.nodes d WHERE d.tree_id = c.tree_id AND d.level = c.level AND d.idx = c.idx + 1)
          AND NOT EXISTS (SELECT 1 FROM optchat.nodes p WHERE p.tree_id = c.tree_id AND p.level = c.level + 1 AND p.idx = c.idx / 2)
     )
     SELECT r.tree_id, r.level, r.idx FROM ready r
      WHERE NOT EXISTS (SELECT 1 FROM pgboss.job j
                         WHERE j.name = 'optchat-node' AND j.state < 'completed'
                           AND j.singleton_key = r.tree_id || ':' || r.level || ':' || r.idx)
      LIMIT $1::int`,
    [limit],
  );
  return result.rows.map((row) => ({
    treeId: Number(row.tree_id),
    node: { level: row.level, index: Number(row.idx) },
  }));
}
