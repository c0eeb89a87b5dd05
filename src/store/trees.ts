import type { FoldEvent, FoldParams } from "../core/fold.js";
import { type NodeAddress, nodeKey } from "../core/tree.js";
import type { Queryable } from "./db.js";
import { NODE_JOB_KEY_SQL, NODE_QUEUE, openJobExists } from "./job-queue.js";

export type TreeKind = "session" | "shared";

export interface TreeRow {
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

export function toTree(row: TreeRow): Tree {
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

export const TREE_COLUMNS =
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

export const VIEW_COLUMNS =
  "tree_id, revision, event_no, leaf_count, bytes, shrinking, unbuilt, upper_bytes, lower_bytes, created_at";

export interface ViewRow {
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

export function toViewRevision(row: ViewRow, parts: readonly NodeAddress[]): ViewRevision {
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
export function partsInOrder(
  levels: readonly number[] | null,
  idxs: readonly (number | string)[] | null,
): NodeAddress[] {
  if (!levels || !idxs) return [];
  return levels
    .map((level, k) => ({ level, index: Number(idxs[k]) }))
    .sort((a, b) => a.index * 2 ** a.level - b.index * 2 ** b.level);
}

/** The parts valid at revision `r` (a SQL expression) of tree $1, as two arrays, for a LATERAL join. */
export const PARTS_AT = (r: string) => `(
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
      WHERE NOT ${openJobExists(NODE_QUEUE, NODE_JOB_KEY_SQL("r.tree_id", "r.level", "r.idx"))}
      LIMIT $1::int`,
    [limit],
  );
  return result.rows.map((row) => ({
    treeId: Number(row.tree_id),
    node: { level: row.level, index: Number(row.idx) },
  }));
}
