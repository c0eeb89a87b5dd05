/**
 * The ingest's one writing statement (store/ingest-commit.ts plans it): blobs, records, the generations' counters, the
 * staged copies the records replace and every touched tree's fold, guarded by a check that each touched generation
 * and tree is still in the state the plan was made from.
 *
 * The guard is what lets an ingest plan without holding any lock (memory/ingest.ts): the statement locks the
 * generation and tree rows itself (the same rows, in the same order, as the locking lookup), re-reads them at their
 * newest version once it holds them (READ COMMITTED re-checks a locked row's conditions against its newest version),
 * and writes nothing at all unless every one still has the counters the plan started from. Those counters only grow
 * (every writer of a tree advances event_count; every sealed record advances next_seq), and tree ids are never reused,
 * so equal counters mean the same state: the plan is exactly the one a writer holding the locks would have made. On
 * its own (autocommit) the statement is one atomic transaction: BEGIN, the locking lookup and COMMIT are three round
 * trips an ingest of plain appends no longer pays (issue 9 item 6). Under the locks (the fallback path) the guard
 * always holds.
 */

import type { Queryable } from "./db.js";
import {
  type FreshRecord,
  groupKey,
  INLINE_BLOB_BYTES,
  type LockedTargets,
  RECORD_INSERT_COLUMNS,
} from "./ingest-rows.js";
import { writeOneSealed } from "./ingest-write-one.js";
import type { RecordToSeal } from "./records.js";
import { TREE_WRITE_PARAMS, type TreeChangePlan, treesWritten, treeWriteCtes, treeWriteValues } from "./tree-writes.js";
import type { Tree, TreeRow } from "./trees.js";

/** The number of parameters of the sealing CTEs in writeSealed; the trees' write and the guard follow them. */
const SEAL_PARAMS = 26;
/** The guard's parameters, after the trees' write. */
const GUARD_PARAMS = 9;

/**
 * Writes a plan in one statement. Returns the updated trees by id, or undefined, having written nothing, when a
 * touched generation or tree changed since the plan's lookup or a generation the batch took as its session's current
 * one no longer is. When one of the batch's keys was sealed meanwhile (a twin of a re-delivery, committed after the
 * lookup), the statement fails on records.event_key (unique_violation of EVENT_KEY_CONSTRAINT) having written
 * nothing; the caller runs the ingest again and its lookup sees the twin (retryOnTwinInsert in memory/ingest.ts, as for
 * a twin the locked way meets). The guard used to look the keys up itself, and its cached generic plan scanned the
 * whole records table (planned while the table was small; 98 pages per ingest after 1,000 records, a third of the
 * statement's time in the bench): the unique index makes the same check on insert at no extra cost.
 * Large payloads are written first, one statement each: only in a transaction (unlockedWriteAllowed leaves such
 * batches to the locked way), since on their own they would commit before the guard is checked.
 */
export async function writeSealed(
  db: Queryable,
  fresh: readonly FreshRecord[],
  targets: LockedTargets,
  plans: readonly TreeChangePlan[],
): Promise<Map<number, Tree> | undefined> {
  const [only] = fresh;
  const [plan] = plans;
  // One fresh record (every host ingest): its own statement with scalar parameters (see store/ingest-write-one.ts).
  if (fresh.length === 1 && only && plans.length === 1 && plan && only.item.payload.length <= INLINE_BLOB_BYTES)
    return await writeOneSealed(db, only, targets, plan);
  // Blobs in hash order: two batches sharing payloads (common tool outputs) then lock the same keys in the same order
  // and cannot deadlock on the blobs primary key (reproduced: 25 deadlocks in 200 rounds of reversed batches).
  const blobs = new Map<string, RecordToSeal>();
  for (const { item } of fresh) blobs.set(item.payloadHash.toString("hex"), item);
  const sortedBlobs = [...blobs.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, item]) => item);
  // Large payloads go first, one statement each, as a plain bytea parameter (sent in binary): inside the bytea[]
  // array below a payload travels as hex text built in one task (a 64 MiB record stalled the host's event loop for
  // seconds, issue 9 item 3). Size decides the order once per hash, so (large first, then by hash) is one total order
  // for every batch and the deadlock argument above still holds.
  const blobItems: RecordToSeal[] = [];
  for (const blob of sortedBlobs) {
    if (blob.payload.length <= INLINE_BLOB_BYTES) {
      blobItems.push(blob);
      continue;
    }
    await db.query(
      // No conflict target (the hash is the only unique key): naming one needs SELECT on it, and under row-level
      // security a team member's new blob is not readable before its record exists (migrations/016).
      `INSERT INTO optchat.blobs (hash, byte_length, valid_utf8, content)
       VALUES ($1::bytea, $2::bigint, $3::boolean, $4::bytea) ON CONFLICT DO NOTHING`,
      [blob.payloadHash, blob.payload.length, blob.validUtf8, blob.payload],
    );
  }
  // implicit: some record of the group named no generation, so the group must still be its session's current one.
  const touched = new Map<string, { sessionId: string; generation: number; implicit: boolean }>();
  for (const e of fresh) {
    const key = groupKey(e.item.sessionId, e.generation);
    const implicit = e.item.generation === undefined || touched.get(key)?.implicit === true;
    touched.set(key, { sessionId: e.item.sessionId, generation: e.generation, implicit });
  }
  const counters = [...touched.entries()];
  const column = <T>(pick: (entry: FreshRecord) => T): T[] => fresh.map(pick);

  const sealValues = [
    blobItems.map((b) => b.payloadHash),
    blobItems.map((b) => b.payload.length),
    blobItems.map((b) => b.validUtf8),
    blobItems.map((b) => b.payload),
    column((e) => e.item.sessionId),
    column((e) => e.generation),
    column((e) => e.seq),
    column((e) => e.item.eventKey),
    column((e) => e.item.stageKey),
    column((e) => e.item.turnId),
    column((e) => e.item.kind),
    column((e) => e.item.occurredAt),
    column((e) => e.item.payloadHash),
    column((e) => e.item.payload.length),
    column((e) => e.item.toolCallId),
    column((e) => e.item.toolName),
    column((e) => e.item.hostTruncated),
    column((e) => e.item.hostOriginalBytes),
    column((e) => e.item.projectId),
    column((e) => e.item.worktreeId),
    column((e) => e.item.commitId),
    column((e) => JSON.stringify(e.item.attributes)),
    counters.map(([, v]) => v.sessionId),
    counters.map(([, v]) => v.generation),
    counters.map(([key]) => targets.nextSeq.get(key) as number),
    column((e) => e.item.search),
  ];
  if (sealValues.length !== SEAL_PARAMS) throw new Error("writeSealed: parameter count drifted from SEAL_PARAMS");
  const treeValues = treeWriteValues(plans);
  if (treeValues.length !== TREE_WRITE_PARAMS) throw new Error("writeSealed: tree parameter count drifted");
  // The state each touched (session, generation) was planned from: its counter as read and its tree's counters.
  const planned = counters.map(([key]) => {
    const tree = targets.trees.get(key);
    const readSeq = targets.readSeq.get(key);
    if (!tree || readSeq === undefined) throw new Error(`writeSealed: ${key} was not looked up`);
    return { tree, readSeq };
  });
  const guardValues = [
    counters.map(([, v]) => v.sessionId),
    counters.map(([, v]) => v.generation),
    planned.map((p) => p.readSeq),
    planned.map((p) => p.tree.treeId),
    planned.map((p) => p.tree.leafCount),
    planned.map((p) => p.tree.builtLeaves),
    planned.map((p) => p.tree.eventCount),
    planned.map((p) => p.tree.viewRevision),
    counters.map(([, v]) => v.implicit),
  ];
  if (guardValues.length !== GUARD_PARAMS) throw new Error("writeSealed: guard parameter count drifted");
  const g = (k: number) => `$${SEAL_PARAMS + TREE_WRITE_PARAMS + 1 + k}`;
  const gate = "(SELECT held FROM guard_held)";

  // One statement: the guard, then blobs, records, the generations' counters, the staged copies the records replace,
  // and the trees, each written only when the guard held for every touched tree.
  const result = await db.query<TreeRow>({
    name: "optchat.ingest.seal_and_append",
    text: `WITH guard AS (
       SELECT g.session_id
         FROM optchat.generations g
         JOIN optchat.trees t ON t.kind = 'session' AND t.session_id = g.session_id AND t.generation = g.generation
         JOIN unnest(${g(0)}::text[], ${g(1)}::int[], ${g(2)}::bigint[], ${g(3)}::bigint[], ${g(4)}::bigint[],
                     ${g(5)}::bigint[], ${g(6)}::bigint[], ${g(7)}::int[], ${g(8)}::boolean[])
              AS v(session_id, generation, next_seq, tree_id, leaf_count, built_leaves, event_count, view_revision,
                   implicit)
           ON v.session_id = g.session_id AND v.generation = g.generation
        WHERE g.next_seq = v.next_seq AND t.tree_id = v.tree_id AND t.leaf_count = v.leaf_count
          AND t.built_leaves = v.built_leaves AND t.event_count = v.event_count AND t.view_revision = v.view_revision
          AND (NOT v.implicit OR EXISTS (SELECT 1 FROM optchat.sessions s
                                          WHERE s.session_id = g.session_id AND s.current_generation = g.generation))
        ORDER BY g.session_id, g.generation
          FOR UPDATE OF g, t
     ), guard_held AS (
       -- Every touched generation as planned. A key of the batch sealed since the lookup (a twin) is not looked for:
       -- inserting it fails on records.event_key and the statement writes nothing (see writeSealed).
       SELECT count(*) = cardinality(${g(0)}::text[]) AS held FROM guard
     ), new_blobs AS (
       INSERT INTO optchat.blobs (hash, byte_length, valid_utf8, content)
       SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::boolean[], $4::bytea[]) WHERE ${gate}
       ON CONFLICT DO NOTHING
     ), new_records AS (
       INSERT INTO optchat.records ${RECORD_INSERT_COLUMNS}
       -- scope_id: the session's (migrations/011; a session never changes scope), for the search index.
       SELECT u.*, s.scope_id
         FROM unnest($5::text[], $6::int[], $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[],
                     $12::timestamptz[], $13::bytea[], $14::bigint[], $15::text[], $16::text[], $17::boolean[],
                     $18::bigint[], $19::text[], $20::text[], $21::text[], $22::jsonb[], $26::tsvector[])
              AS u(session_id, generation, seq, event_key, stage_key, turn_id, kind, occurred_at, payload_hash,
                   payload_bytes, tool_call_id, tool_name, host_truncated, host_original_bytes, project_id,
                   worktree_id, commit_id, attributes, search)
         JOIN optchat.sessions s ON s.session_id = u.session_id
        WHERE ${gate}
     ), unstaged AS (
       DELETE FROM optchat.staged_items WHERE stage_key = ANY($9::text[]) AND ${gate}
     ), counters AS (
       UPDATE optchat.generations g SET next_seq = u.next_seq
         FROM unnest($23::text[], $24::int[], $25::bigint[]) AS u(session_id, generation, next_seq)
        WHERE g.session_id = u.session_id AND g.generation = u.generation AND ${gate}
     ), ${treeWriteCtes(SEAL_PARAMS + 1, gate)}
     SELECT * FROM tree_updates`,
    values: [...sealValues, ...treeValues, ...guardValues],
  });
  const written = treesWritten(result.rows);
  if (written.size === 0) return undefined;
  for (const plan of plans)
    if (!written.has(plan.treeId)) throw new Error(`tree ${plan.treeId}: the ingest updated no tree row`);
  return written;
}
