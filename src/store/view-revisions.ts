/** View revisions of a tree: their parts in order, and cached projections of a revision into a budget. */
import type { FoldParams } from "../core/fold.js";
import type { NodeAddress } from "../core/tree.js";
import type { Queryable } from "./db.js";

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
