/**
 * The ingest's guarded write for a batch of one fresh record (every host ingest: the plugin seals each message on its
 * own): the same rows, guard and lock order as writeSealed (store/ingest-write.ts), as a statement with scalar
 * parameters that holds only the parts its plan writes.
 *
 * Why a statement of its own (issue 9 item 6; 8 clients on their own sessions, one record per call, a private cluster
 * with pg_stat_statements, auto_explain and perf on the same machine): the batch statement's cost was its shape, not
 * its rows. Its generic plan joined every array parameter through unnest (function scans, hash and merge joins, and,
 * planned while the tables were small and never analyzed, sequential scans of generations, trees and sessions), with
 * about 60 parameters parsed as array literals; executor start-up alone (ExecInitNode) was 17% of the server's CPU,
 * array input 6%, and dropping the GIN index, the other three secondary indexes of records, every check constraint or
 * the foreign keys each gained 0-3%. With scalars every table is reached through its key, and a plan that merges
 * nothing does not name view_parts' update at all: 1,380 -> 1,800 records/s on that cluster, the same six rows.
 */
import type { Queryable } from "./db.js";
import { type FreshRecord, groupKey, type LockedTargets, RECORD_INSERT_COLUMNS } from "./ingest-rows.js";
import { TREE_CHANNEL } from "./notifications.js";
import type { TreeChangePlan } from "./tree-writes.js";
import { TREE_COLUMNS, type Tree, type TreeRow, toTree } from "./trees.js";

/** Numbered, typed parameters of one statement, in the order they are first used. */
interface Parameters {
  readonly values: unknown[];
  add(value: unknown, type: string): string;
}

function parameters(): Parameters {
  const values: unknown[] = [];
  return {
    values,
    add: (value, type) => {
      values.push(value);
      return `$${values.length}::${type}`;
    },
  };
}

/** Nothing is written unless the guard held (it returns its one row). */
const GATE = "EXISTS (SELECT 1 FROM guard)";

/**
 * Writes one fresh record and its tree's plan in one statement. Returns the updated tree by id, or undefined, having
 * written nothing, when the guard failed (as writeSealed does; a twin fails the insert on records.event_key alike).
 * The statement's text depends only on whether the plan merges parts (closes any), so each connection prepares at
 * most two of them.
 */
export async function writeOneSealed(
  db: Queryable,
  record: FreshRecord,
  targets: LockedTargets,
  plan: TreeChangePlan,
): Promise<Map<number, Tree> | undefined> {
  const key = groupKey(record.item.sessionId, record.generation);
  const tree = targets.trees.get(key);
  if (!tree || tree.treeId !== plan.treeId || targets.readSeq.get(key) !== record.seq)
    throw new Error(`writeOneSealed: ${key} was not looked up as planned`);
  const p = parameters();
  const text = `WITH ${recordCtes(p, record, tree)}, ${treeCtes(p, plan)} SELECT * FROM tree_update`;
  const result = await db.query<TreeRow>({
    // Prepared once per connection and shape.
    name: `optchat.ingest.seal_one${plan.left.length > 0 ? "_merging" : ""}`,
    text,
    values: p.values,
  });
  const row = result.rows[0];
  return row ? new Map([[Number(row.tree_id), toTree(row)]]) : undefined;
}

/**
 * The guard (locks the generation and tree rows, in that order, and returns a row only when they are as the plan's
 * lookup read them and, for a record that named no generation, the generation is still its session's current one),
 * then the blob, the record, the staged copy it replaces and the generation's counter.
 */
function recordCtes(p: Parameters, { item, generation, seq }: FreshRecord, tree: Tree): string {
  const session = p.add(item.sessionId, "text");
  const gen = p.add(generation, "int");
  const seqNo = p.add(seq, "bigint");
  const hash = p.add(item.payloadHash, "bytea");
  const bytes = p.add(item.payload.length, "bigint");
  const stageKey = p.add(item.stageKey, "text");
  return `guard AS (
       SELECT s.scope_id
         FROM optchat.generations g
         JOIN optchat.trees t ON t.kind = 'session' AND t.session_id = g.session_id AND t.generation = g.generation
         JOIN optchat.sessions s ON s.session_id = g.session_id
        WHERE g.session_id = ${session} AND g.generation = ${gen} AND g.next_seq = ${seqNo}
          AND t.tree_id = ${p.add(tree.treeId, "bigint")} AND t.leaf_count = ${p.add(tree.leafCount, "bigint")}
          AND t.built_leaves = ${p.add(tree.builtLeaves, "bigint")} AND t.event_count = ${p.add(tree.eventCount, "bigint")}
          AND t.view_revision = ${p.add(tree.viewRevision, "int")}
          AND (NOT ${p.add(item.generation === undefined, "boolean")} OR s.current_generation = g.generation)
          FOR UPDATE OF g, t
     ), new_blob AS (
       INSERT INTO optchat.blobs (hash, byte_length, valid_utf8, content)
       SELECT ${hash}, ${bytes}, ${p.add(item.validUtf8, "boolean")}, ${p.add(item.payload, "bytea")} FROM guard
       ON CONFLICT DO NOTHING
     ), new_record AS (
       INSERT INTO optchat.records ${RECORD_INSERT_COLUMNS}
       -- scope_id: the session's (migrations/011), read by the guard.
       SELECT ${session}, ${gen}, ${seqNo}, ${p.add(item.eventKey, "text")}, ${stageKey}, ${p.add(item.turnId, "text")},
              ${p.add(item.kind, "text")}, ${p.add(item.occurredAt, "timestamptz")}, ${hash}, ${bytes},
              ${p.add(item.toolCallId, "text")}, ${p.add(item.toolName, "text")}, ${p.add(item.hostTruncated, "boolean")},
              ${p.add(item.hostOriginalBytes, "bigint")}, ${p.add(item.projectId, "text")},
              ${p.add(item.worktreeId, "text")}, ${p.add(item.commitId, "text")},
              ${p.add(JSON.stringify(item.attributes), "jsonb")}, ${p.add(item.search, "tsvector")}, guard.scope_id
         FROM guard
     ), unstaged AS (
       DELETE FROM optchat.staged_items WHERE stage_key = ${stageKey} AND ${GATE}
     ), counters AS (
       UPDATE optchat.generations SET next_seq = ${seqNo} + 1
        WHERE session_id = ${session} AND generation = ${gen} AND ${GATE}
     )`;
}

/** The tree's plan, as treeWriteCtes (store/tree-writes.ts) writes it for one tree; `tree_update` returns the row. */
function treeCtes(p: Parameters, plan: TreeChangePlan): string {
  const treeId = p.add(plan.treeId, "bigint");
  const revision = p.add(plan.revision, "int");
  const partsOf = (parts: TreeChangePlan["left"]) =>
    `unnest(${p.add(
      parts.map((part) => part.level),
      "int[]",
    )}, ${p.add(
      parts.map((part) => part.index),
      "bigint[]",
    )}) AS c(level, idx)`;
  // Closing parts joins them through the primary key; a plan that closes none leaves the update out altogether.
  const closed =
    plan.left.length === 0
      ? ""
      : `parts_closed AS (
       UPDATE optchat.view_parts p SET until_revision = ${revision} FROM ${partsOf(plan.left)}
        WHERE p.tree_id = ${treeId} AND p.level = c.level AND p.idx = c.idx AND p.until_revision IS NULL AND ${GATE}
     ), `;
  const leafCount = p.add(plan.leafCount, "bigint");
  const eventNo = p.add(plan.eventNo, "bigint");
  const bytes = p.add(plan.bytes, "int");
  const shrinking = p.add(plan.shrinking, "boolean");
  const unbuilt = p.add(plan.unbuilt, "int");
  return `${closed}parts_opened AS (
       INSERT INTO optchat.view_parts (tree_id, level, idx, from_revision)
       SELECT ${treeId}, c.level, c.idx, ${revision} FROM ${partsOf(plan.entered)} WHERE ${GATE}
     ), revision AS (
       INSERT INTO optchat.view_revisions (tree_id, revision, event_no, leaf_count, bytes, shrinking, unbuilt,
                                           upper_bytes, lower_bytes)
       SELECT ${treeId}, ${revision}, ${eventNo}, ${leafCount}, ${bytes}, ${shrinking}, ${unbuilt},
              ${p.add(plan.upperBytes, "int")}, ${p.add(plan.lowerBytes, "int")}
        WHERE ${p.add(plan.newRevision, "boolean")} AND ${GATE}
     ), tree_update AS (
       UPDATE optchat.trees t SET leaf_count = ${leafCount}, built_leaves = ${p.add(plan.builtLeaves, "bigint")},
              event_count = ${eventNo}, view_revision = ${revision}, view_bytes = ${bytes},
              view_shrinking = ${shrinking}, view_unbuilt = ${unbuilt}
        WHERE t.tree_id = ${treeId} AND ${GATE}
       RETURNING ${TREE_COLUMNS.split(", ")
         .map((c) => `t.${c}`)
         .join(", ")},
                 CASE WHEN ${p.add(plan.notify, "boolean")} THEN pg_notify('${TREE_CHANNEL}', t.tree_id::text) END AS notified
     )`;
}
