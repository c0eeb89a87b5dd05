/**
 * Sealing final records and appending them to their trees, in the caller's transaction (READ COMMITTED), in as few
 * round trips as the work allows: one statement locks the generation and tree rows the batch writes to and looks its
 * keys up; the fold of the appends is planned in memory (it reads the view only when an append can merge, see
 * planTreeChanges); one statement writes the blobs, the records, the generations' counters, the staged copies the
 * records replace, and every touched tree's fold. With BEGIN and COMMIT that is four statements per ingest of any
 * size (issue 9 item 6: nine per record before, then six; each costs a round trip while the rows stay locked).
 *
 * The lookup sees the snapshot taken before the statement waited for the locks, so a twin of the same key sealed by
 * the writer we waited for is not seen; inserting it again then fails on records.event_key, and the caller runs the
 * transaction again (retryOnTwinInsert in src/memory/service.ts), which sees the twin and reports a duplicate. That
 * race is rare (two deliveries of one finalization at the same moment); a separate lookup after the lock would cost
 * every ingest a round trip. The generation and tree rows themselves are locked rows of the statement, so they are
 * re-read at their newest version after a wait (the fold state a writer continues from is on the tree row: see
 * lockTree).
 */
import { OptchatError } from "../core/errors.js";
import type { FoldParams } from "../core/fold.js";
import { NODE_BYTES } from "../core/summary.js";
import type { NodeAddress } from "../core/tree.js";
import type { Queryable } from "./db.js";
import type { RecordToSeal, SealOutcome } from "./records.js";
import {
  type LeafSource,
  planTreeChanges,
  TREE_WRITE_PARAMS,
  type TreeChangePlan,
  treesWritten,
  treeWriteCtes,
  treeWriteValues,
} from "./tree-changes.js";
import { type Tree, type TreeRow, toTree } from "./trees.js";

export interface SealAndAppendOptions {
  /** Build free nodes in the same transaction (a host's per-message ingestion; see planTreeChanges). */
  readonly buildFreeInline?: boolean;
}

export interface SealedAndAppended {
  readonly outcomes: SealOutcome[];
  /** Per tree, the nodes that became ready to build: enqueue exactly these. */
  readonly ready: readonly { readonly treeId: number; readonly nodes: readonly NodeAddress[] }[];
}

export async function sealAndAppend(
  db: Queryable,
  items: readonly RecordToSeal[],
  fold: FoldParams,
  options: SealAndAppendOptions = {},
): Promise<SealedAndAppended> {
  const outcomes: (SealOutcome | undefined)[] = new Array(items.length);
  const locked = await lockTargets(db, items);
  const fresh = allocate(items, locked);
  const plans = fresh.length > 0 ? await planAppends(db, fresh, locked, fold, options) : [];
  if (fresh.length > 0) await writeSealed(db, fresh, locked, plans);
  for (const e of fresh) {
    outcomes[e.index] = {
      status: "sealed",
      eventKey: e.item.eventKey,
      sessionId: e.item.sessionId,
      generation: e.generation,
      seq: e.seq,
    };
  }
  await resolveRedeliveries(db, items, locked.sealed, outcomes);
  return {
    outcomes: outcomes as SealOutcome[],
    ready: plans.filter((plan) => plan.ready.length > 0).map((plan) => ({ treeId: plan.treeId, nodes: plan.ready })),
  };
}

interface ExistingRow {
  event_key: string;
  session_id: string;
  generation: number;
  seq: number;
  payload_hash: Buffer;
  kind: string;
  turn_id: string;
  tool_call_id: string | null;
}

/** Same finalization, same content: a re-delivery. Anything else under the same key is a conflict. */
function sameContent(row: ExistingRow, item: RecordToSeal): boolean {
  return (
    row.payload_hash.equals(item.payloadHash) &&
    row.kind === item.kind &&
    row.session_id === item.sessionId &&
    row.turn_id === item.turnId &&
    row.tool_call_id === item.toolCallId
  );
}

function groupKey(sessionId: string, generation: number): string {
  return `${sessionId}\u0000${generation}`;
}

interface LockedTargets {
  /** Next free seq per (session, generation) group key; advanced as seqs are allocated. */
  readonly nextSeq: Map<string, number>;
  readonly currentGeneration: ReadonlyMap<string, number>;
  /** The session tree of each locked (session, generation), by group key. */
  readonly trees: ReadonlyMap<string, Tree>;
  /** The batch's keys that were already sealed (before the statement waited for its locks). */
  readonly sealed: ReadonlyMap<string, ExistingRow>;
}

interface SealedJson {
  event_key: string;
  session_id: string;
  generation: number;
  seq: number;
  payload_hash: string;
  kind: string;
  turn_id: string;
  tool_call_id: string | null;
}

/**
 * Locks, in one statement and sorted order, the generation row and the session tree row of every (session,
 * generation) the batch writes to: the explicit generations and each session's current one (so concurrent batches
 * cannot deadlock on them; a tree's other writers lock it alone, after any generation row); the same statement returns
 * the batch's keys that are already sealed.
 */
async function lockTargets(db: Queryable, items: readonly RecordToSeal[]): Promise<LockedTargets> {
  const explicit = items.filter((item) => item.generation !== undefined);
  const result = await db.query<{
    session_id: string;
    current_generation: number;
    generation: number;
    next_seq: number;
    tree: TreeRow;
    sealed: SealedJson[] | null;
  }>({
    // Prepared once per connection (named): the hot path of every ingest, planned once instead of per call.
    name: "optchat.ingest.lock_targets",
    text: `SELECT s.session_id, s.current_generation, g.generation, g.next_seq, to_json(t) AS tree,
            (SELECT json_agg(json_build_object('event_key', r.event_key, 'session_id', r.session_id,
                                               'generation', r.generation, 'seq', r.seq,
                                               'payload_hash', encode(r.payload_hash, 'hex'), 'kind', r.kind,
                                               'turn_id', r.turn_id, 'tool_call_id', r.tool_call_id))
               FROM optchat.records r WHERE r.event_key = ANY($4::text[])) AS sealed
       FROM optchat.sessions s
       JOIN optchat.generations g ON g.session_id = s.session_id
       JOIN optchat.trees t ON t.kind = 'session' AND t.session_id = g.session_id AND t.generation = g.generation
      WHERE s.session_id = ANY($1::text[])
        AND (g.generation = s.current_generation
             OR (g.session_id, g.generation) IN (SELECT * FROM unnest($2::text[], $3::int[])))
      ORDER BY g.session_id, g.generation
        FOR UPDATE OF g, t`,
    values: [
      [...new Set(items.map((item) => item.sessionId))],
      explicit.map((item) => item.sessionId),
      explicit.map((item) => item.generation),
      items.map((item) => item.eventKey),
    ],
  });
  const sealed = new Map<string, ExistingRow>(
    (result.rows[0]?.sealed ?? []).map((row) => [
      row.event_key,
      { ...row, seq: Number(row.seq), payload_hash: Buffer.from(row.payload_hash, "hex") },
    ]),
  );
  const nextSeq = new Map<string, number>();
  const currentGeneration = new Map<string, number>();
  const trees = new Map<string, Tree>();
  for (const row of result.rows) {
    const key = groupKey(row.session_id, row.generation);
    nextSeq.set(key, row.next_seq);
    currentGeneration.set(row.session_id, row.current_generation);
    trees.set(key, toTree(row.tree));
  }
  for (const item of items) {
    if (!currentGeneration.has(item.sessionId)) {
      throw new OptchatError(
        "SESSION_NOT_FOUND",
        `No session ${item.sessionId}: register it with openSession before ingesting`,
        { field: "sessionId", sessionId: item.sessionId },
      );
    }
    if (item.generation !== undefined && !nextSeq.has(groupKey(item.sessionId, item.generation))) {
      throw new OptchatError("SESSION_NOT_FOUND", `Session ${item.sessionId} has no generation ${item.generation}`, {
        field: "generation",
        sessionId: item.sessionId,
        generation: item.generation,
      });
    }
  }
  return { nextSeq, currentGeneration, trees, sealed };
}

interface FreshRecord {
  readonly index: number;
  readonly item: RecordToSeal;
  readonly generation: number;
  readonly seq: number;
}

/** Consecutive seqs for the batch's keys that are not sealed yet (the first of a key repeated in the batch). */
function allocate(
  items: readonly RecordToSeal[],
  { sealed, nextSeq, currentGeneration }: LockedTargets,
): FreshRecord[] {
  const fresh: FreshRecord[] = [];
  const seenInBatch = new Set<string>();
  items.forEach((item, index) => {
    if (sealed.has(item.eventKey) || seenInBatch.has(item.eventKey)) return;
    seenInBatch.add(item.eventKey);
    const generation = item.generation ?? (currentGeneration.get(item.sessionId) as number);
    const key = groupKey(item.sessionId, generation);
    const seq = nextSeq.get(key) as number;
    nextSeq.set(key, seq + 1);
    fresh.push({ index, item, generation, seq });
  });
  return fresh;
}

/** Each touched tree's fold of its new leaves, in tree-key order; free leaves among them are read from the batch. */
async function planAppends(
  db: Queryable,
  fresh: readonly FreshRecord[],
  { trees }: LockedTargets,
  fold: FoldParams,
  options: SealAndAppendOptions,
): Promise<TreeChangePlan[]> {
  const byTree = new Map<string, FreshRecord[]>();
  for (const e of fresh) {
    const key = groupKey(e.item.sessionId, e.generation);
    byTree.set(key, [...(byTree.get(key) ?? []), e]);
  }
  const plans: TreeChangePlan[] = [];
  for (const key of [...byTree.keys()].sort()) {
    const records = (byTree.get(key) as FreshRecord[]).sort((a, b) => a.seq - b.seq);
    const tree = trees.get(key);
    if (!tree) {
      const first = records[0] as FreshRecord;
      throw new Error(`session ${first.item.sessionId} generation ${first.generation} has no tree (integrity error)`);
    }
    const bySeq = new Map(records.map((e) => [e.seq, e.item]));
    const leafSource = (index: number): LeafSource | undefined => {
      const item = bySeq.get(index);
      // Like readRecordWithPayload's maxBytes: a payload larger than a free leaf can hold is never free.
      return item ? { record: item, payload: item.payload.length <= NODE_BYTES + 3 ? item.payload : null } : undefined;
    };
    plans.push(
      await planTreeChanges(
        db,
        { tree },
        records.map((e) => ({ type: "append" as const, index: e.seq })),
        fold,
        { buildFreeInline: options.buildFreeInline ?? false, leafSource },
      ),
    );
  }
  return plans;
}

/** Payloads up to this size are written in the batch's one statement; larger ones in their own (see writeSealed). */
const INLINE_BLOB_BYTES = 256 * 1024;

/** The number of parameters of the sealing CTEs in writeSealed; the trees' write follows them. */
const SEAL_PARAMS = 26;

async function writeSealed(
  db: Queryable,
  fresh: readonly FreshRecord[],
  { nextSeq }: LockedTargets,
  plans: readonly TreeChangePlan[],
): Promise<void> {
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
      `INSERT INTO optchat.blobs (hash, byte_length, valid_utf8, content)
       VALUES ($1::bytea, $2::bigint, $3::boolean, $4::bytea) ON CONFLICT (hash) DO NOTHING`,
      [blob.payloadHash, blob.payload.length, blob.validUtf8, blob.payload],
    );
  }
  const touched = new Map<string, { sessionId: string; generation: number }>();
  for (const e of fresh)
    touched.set(groupKey(e.item.sessionId, e.generation), { sessionId: e.item.sessionId, generation: e.generation });
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
    counters.map(([key]) => nextSeq.get(key) as number),
    column((e) => e.item.search),
  ];
  if (sealValues.length !== SEAL_PARAMS) throw new Error("writeSealed: parameter count drifted from SEAL_PARAMS");
  const treeValues = treeWriteValues(plans);
  if (treeValues.length !== TREE_WRITE_PARAMS) throw new Error("writeSealed: tree parameter count drifted");

  // One statement: blobs, records, the generations' counters, the staged copies the records replace, and the trees.
  const result = await db.query<TreeRow>({
    name: "optchat.ingest.seal_and_append",
    text: `WITH new_blobs AS (
       INSERT INTO optchat.blobs (hash, byte_length, valid_utf8, content)
       SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::boolean[], $4::bytea[])
       ON CONFLICT (hash) DO NOTHING
     ), new_records AS (
       INSERT INTO optchat.records (session_id, generation, seq, event_key, stage_key, turn_id, kind, occurred_at,
                                    payload_hash, payload_bytes, tool_call_id, tool_name, host_truncated,
                                    host_original_bytes, project_id, worktree_id, commit_id, attributes, search,
                                    scope_id)
       -- scope_id: the session's (migrations/011; a session never changes scope), for the search index.
       SELECT u.*, s.scope_id
         FROM unnest($5::text[], $6::int[], $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[],
                     $12::timestamptz[], $13::bytea[], $14::bigint[], $15::text[], $16::text[], $17::boolean[],
                     $18::bigint[], $19::text[], $20::text[], $21::text[], $22::jsonb[], $26::tsvector[])
              AS u(session_id, generation, seq, event_key, stage_key, turn_id, kind, occurred_at, payload_hash,
                   payload_bytes, tool_call_id, tool_name, host_truncated, host_original_bytes, project_id,
                   worktree_id, commit_id, attributes, search)
         JOIN optchat.sessions s ON s.session_id = u.session_id
     ), unstaged AS (
       DELETE FROM optchat.staged_items WHERE stage_key = ANY($9::text[])
     ), counters AS (
       UPDATE optchat.generations g SET next_seq = u.next_seq
         FROM unnest($23::text[], $24::int[], $25::bigint[]) AS u(session_id, generation, next_seq)
        WHERE g.session_id = u.session_id AND g.generation = u.generation
     ), ${treeWriteCtes(SEAL_PARAMS + 1)}
     SELECT * FROM tree_updates`,
    values: [...sealValues, ...treeValues],
  });
  const written = treesWritten(result.rows);
  for (const plan of plans)
    if (!written.has(plan.treeId)) throw new Error(`tree ${plan.treeId}: the ingest updated no tree row`);
}

/** Keys that were sealed before (or earlier in this batch): a re-delivery is a duplicate, other content a conflict. */
async function resolveRedeliveries(
  db: Queryable,
  items: readonly RecordToSeal[],
  sealed: ReadonlyMap<string, ExistingRow>,
  outcomes: (SealOutcome | undefined)[],
): Promise<void> {
  const conflicts: { index: number; row: ExistingRow }[] = [];
  items.forEach((item, index) => {
    if (outcomes[index]) return;
    const row = sealed.get(item.eventKey) ?? sealedInBatch(items, outcomes, item);
    if (!row) throw new Error(`sealAndAppend: ${item.eventKey} neither sealed nor allocated`);
    if (sameContent(row, item)) {
      outcomes[index] = {
        status: "duplicate",
        eventKey: row.event_key,
        sessionId: row.session_id,
        generation: row.generation,
        seq: row.seq,
      };
    } else {
      conflicts.push({ index, row });
    }
  });
  if (conflicts.length === 0) return;
  const recorded = await db.query<{ conflict_id: number }>(
    `INSERT INTO optchat.ingest_conflicts (event_key, session_id, existing_hash, offered_hash, offered_bytes)
     SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[], $5::bigint[])
     RETURNING conflict_id`,
    [
      conflicts.map((c) => c.row.event_key),
      conflicts.map((c) => (items[c.index] as RecordToSeal).sessionId),
      conflicts.map((c) => c.row.payload_hash),
      conflicts.map((c) => (items[c.index] as RecordToSeal).payloadHash),
      conflicts.map((c) => (items[c.index] as RecordToSeal).payload.length),
    ],
  );
  conflicts.forEach((c, n) => {
    outcomes[c.index] = {
      status: "conflict",
      eventKey: c.row.event_key,
      sessionId: c.row.session_id,
      generation: c.row.generation,
      seq: c.row.seq,
      conflictId: recorded.rows[n]?.conflict_id ?? -1,
    };
  });
}

/** The same key twice in one batch: the first occurrence was sealed here; later ones compare against it. */
function sealedInBatch(
  items: readonly RecordToSeal[],
  outcomes: readonly (SealOutcome | undefined)[],
  item: RecordToSeal,
): ExistingRow | undefined {
  const first = items.findIndex((other, k) => other.eventKey === item.eventKey && outcomes[k]?.status === "sealed");
  const outcome = outcomes[first];
  const original = items[first];
  if (!outcome || !original) return undefined;
  return {
    event_key: original.eventKey,
    session_id: original.sessionId,
    generation: outcome.generation,
    seq: outcome.seq,
    payload_hash: original.payloadHash,
    kind: original.kind,
    turn_id: original.turnId,
    tool_call_id: original.toolCallId,
  };
}
