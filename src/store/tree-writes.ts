/**
 * Writing what planTreeChanges (store/tree-changes.ts) decided: view parts closed and opened, new view revisions, the
 * trees' counters and fold state, in one statement for any number of trees.
 */
import type { NodeAddress } from "../core/tree.js";
import type { EnginePlan } from "../core/tree-engine.js";
import type { Queryable } from "./db.js";
import { TREE_CHANNEL } from "./notifications.js";
import { TREE_COLUMNS, type Tree, type TreeRow, toTree } from "./trees.js";

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

/** The parameters of {@link treeWriteCtes}, by name: one array each, in the order they are bound. */
const TREE_WRITE_KEYS = [
  "closedTreeIds",
  "closedLevels",
  "closedIdxs",
  "closedRevisions",
  "openedTreeIds",
  "openedLevels",
  "openedIdxs",
  "openedRevisions",
  "revTreeIds",
  "revRevisions",
  "revEventNos",
  "revLeafCounts",
  "revBytes",
  "revShrinking",
  "revUnbuilt",
  "revUpperBytes",
  "revLowerBytes",
  "treeIds",
  "leafCounts",
  "builtLeaves",
  "eventCounts",
  "viewRevisions",
  "viewBytes",
  "viewShrinking",
  "viewUnbuilt",
  "notify",
] as const;

type TreeWriteKey = (typeof TREE_WRITE_KEYS)[number];

/** The values of {@link treeWriteCtes}'s parameters, by name. */
export type TreeWriteValues = Readonly<Record<TreeWriteKey, readonly unknown[]>>;

/** The number of parameters {@link treeWriteCtes} takes. */
export const TREE_WRITE_PARAMS = TREE_WRITE_KEYS.length;

/**
 * The data-modifying CTEs that write any number of plans (parameters $first .. $first+25, values from
 * treeWriteValues, bound in TREE_WRITE_KEYS' order): view parts closed and opened, new view revisions, the trees'
 * counters and fold state. The last, `tree_updates`, returns the updated tree rows. One statement for a whole batch: a
 * batch over many sessions costs the same round trips as one session. `gate`, an SQL condition, writes nothing unless
 * it holds (the ingest's check that the trees are still as planned, store/ingest-write.ts).
 */
export function treeWriteCtes(first: number, gate = "true"): string {
  const p = (key: TreeWriteKey) => `$${first + TREE_WRITE_KEYS.indexOf(key)}`;
  return `tree_parts_closed AS (
       UPDATE optchat.view_parts p SET until_revision = c.revision
         FROM unnest(${p("closedTreeIds")}::bigint[], ${p("closedLevels")}::int[], ${p("closedIdxs")}::bigint[],
                     ${p("closedRevisions")}::int[]) AS c(tree_id, level, idx, revision)
        WHERE p.tree_id = c.tree_id AND p.level = c.level AND p.idx = c.idx AND p.until_revision IS NULL AND ${gate}
     ), tree_parts_opened AS (
       INSERT INTO optchat.view_parts (tree_id, level, idx, from_revision)
       SELECT * FROM unnest(${p("openedTreeIds")}::bigint[], ${p("openedLevels")}::int[], ${p("openedIdxs")}::bigint[],
                            ${p("openedRevisions")}::int[]) WHERE ${gate}
     ), tree_revisions AS (
       INSERT INTO optchat.view_revisions (tree_id, revision, event_no, leaf_count, bytes, shrinking, unbuilt, upper_bytes,
                                           lower_bytes)
       SELECT * FROM unnest(${p("revTreeIds")}::bigint[], ${p("revRevisions")}::int[], ${p("revEventNos")}::bigint[],
                            ${p("revLeafCounts")}::bigint[], ${p("revBytes")}::int[], ${p("revShrinking")}::boolean[],
                            ${p("revUnbuilt")}::int[], ${p("revUpperBytes")}::int[], ${p("revLowerBytes")}::int[])
                WHERE ${gate}
     ), tree_updates AS (
       UPDATE optchat.trees t SET leaf_count = u.leaf_count, built_leaves = u.built_leaves, event_count = u.event_count,
                                  view_revision = u.view_revision, view_bytes = u.view_bytes,
                                  view_shrinking = u.view_shrinking, view_unbuilt = u.view_unbuilt
         FROM unnest(${p("treeIds")}::bigint[], ${p("leafCounts")}::bigint[], ${p("builtLeaves")}::bigint[],
                     ${p("eventCounts")}::bigint[], ${p("viewRevisions")}::int[], ${p("viewBytes")}::int[],
                     ${p("viewShrinking")}::boolean[], ${p("viewUnbuilt")}::int[], ${p("notify")}::boolean[])
              AS u(tree_id, leaf_count, built_leaves, event_count, view_revision, view_bytes, view_shrinking, view_unbuilt,
                   notify)
        WHERE t.tree_id = u.tree_id AND ${gate}
       RETURNING ${TREE_COLUMNS.split(", ")
         .map((c) => `t.${c}`)
         .join(", ")}, CASE WHEN u.notify THEN pg_notify('${TREE_CHANNEL}', t.tree_id::text) END AS notified
     )`;
}

/** The parameters of {@link treeWriteCtes} for these plans, by name. */
export function treeWriteNamedValues(plans: readonly TreeChangePlan[]): TreeWriteValues {
  const parts = (pick: (plan: TreeChangePlan) => readonly NodeAddress[]) => {
    const rows = plans.flatMap((plan) => pick(plan).map((part) => ({ plan, part })));
    return {
      treeIds: rows.map((r) => r.plan.treeId),
      levels: rows.map((r) => r.part.level),
      idxs: rows.map((r) => r.part.index),
      revisions: rows.map((r) => r.plan.revision),
    };
  };
  const closed = parts((plan) => plan.left);
  const opened = parts((plan) => plan.entered);
  const revised = plans.filter((plan) => plan.newRevision);
  return {
    closedTreeIds: closed.treeIds,
    closedLevels: closed.levels,
    closedIdxs: closed.idxs,
    closedRevisions: closed.revisions,
    openedTreeIds: opened.treeIds,
    openedLevels: opened.levels,
    openedIdxs: opened.idxs,
    openedRevisions: opened.revisions,
    revTreeIds: revised.map((plan) => plan.treeId),
    revRevisions: revised.map((plan) => plan.revision),
    revEventNos: revised.map((plan) => plan.eventNo),
    revLeafCounts: revised.map((plan) => plan.leafCount),
    revBytes: revised.map((plan) => plan.bytes),
    revShrinking: revised.map((plan) => plan.shrinking),
    revUnbuilt: revised.map((plan) => plan.unbuilt),
    revUpperBytes: revised.map((plan) => plan.upperBytes),
    revLowerBytes: revised.map((plan) => plan.lowerBytes),
    treeIds: plans.map((plan) => plan.treeId),
    leafCounts: plans.map((plan) => plan.leafCount),
    builtLeaves: plans.map((plan) => plan.builtLeaves),
    eventCounts: plans.map((plan) => plan.eventNo),
    viewRevisions: plans.map((plan) => plan.revision),
    viewBytes: plans.map((plan) => plan.bytes),
    viewShrinking: plans.map((plan) => plan.shrinking),
    viewUnbuilt: plans.map((plan) => plan.unbuilt),
    notify: plans.map((plan) => plan.notify),
  };
}

/** The parameters of {@link treeWriteCtes} for these plans, in binding order (after the caller's own, at `first`). */
export function treeWriteValues(plans: readonly TreeChangePlan[]): unknown[] {
  const named = treeWriteNamedValues(plans);
  return TREE_WRITE_KEYS.map((key) => named[key]);
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
