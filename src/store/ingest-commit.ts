/**
 * Sealing final records and appending them to their trees (READ COMMITTED), in as few round trips as the work allows:
 * one statement looks up the generation and tree rows the batch writes to and the batch's keys already sealed; the
 * fold of the appends is planned in memory (it reads the view only when an append can merge, see planTreeChanges);
 * one statement (store/ingest-write.ts) writes the blobs, the records, the generations' counters, the staged copies the
 * records replace, and every touched tree's fold, guarded by a check that those rows are still as looked up.
 *
 * Two ways to run it (memory/ingest.ts chooses):
 * - unlocked (planSeal with `lock: false`, then writeSealed on its own): the lookup takes no lock and the guarded
 *   write is a transaction by itself, two statements per ingest; when the guard finds a row changed, nothing is
 *   written and the ingest runs again the locked way. Only for plans whose other writes (node jobs) can follow the
 *   guarded statement in its transaction (see unlockedWriteAllowed).
 * - locked (sealAndAppend, in the caller's transaction): the lookup locks the rows (FOR UPDATE), so the guard holds;
 *   with BEGIN and COMMIT four statements per ingest of any size (issue 9 item 6: nine per record at first).
 *
 * The lookup sees the snapshot taken before the statement waited for the locks, so a twin of the same key sealed by
 * the writer we waited for is not seen; inserting it again then fails on records.event_key, and the caller runs the
 * transaction again (retryOnTwinInsert in src/memory/ingest.ts), which sees the twin and reports a duplicate. That
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
import { classifyRedeliveries, type ExistingRow, recordConflicts } from "./ingest-redeliveries.js";
import { type FreshRecord, groupKey, INLINE_BLOB_BYTES, type LockedTargets } from "./ingest-rows.js";
import { writeSealed } from "./ingest-write.js";
import type { RecordToSeal, SealOutcome } from "./records.js";
import { planTreeChanges } from "./tree-changes.js";
import type { LeafSource } from "./tree-reads.js";
import type { TreeChangePlan } from "./tree-writes.js";
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

/** What a batch will write, planned from one lookup (locked or not). */
export interface SealPlan {
  readonly items: readonly RecordToSeal[];
  readonly targets: LockedTargets;
  readonly fresh: readonly FreshRecord[];
  readonly plans: readonly TreeChangePlan[];
  /** Outcomes of the fresh records (sealed) and of re-deliveries (duplicates); conflicts are left undefined. */
  readonly outcomes: readonly (SealOutcome | undefined)[];
  /** Re-deliveries under a key sealed with other content: recorded by recordConflicts. */
  readonly conflicts: readonly { readonly index: number; readonly row: ExistingRow }[];
}

/** The write's guard failed under the locks (a generation started meanwhile): run it again. */
export class GuardFailed extends Error {
  constructor() {
    super("the ingest's targets changed after its lookup");
    this.name = "GuardFailed";
  }
}

/**
 * Looks the batch's targets up (locking them when `lock`), allocates seqs and plans each touched tree's fold. Without
 * the lock, planning only reads, and throws NeedsTreeLock (store/tree-changes.ts) where it would build a node.
 */
export async function planSeal(
  db: Queryable,
  items: readonly RecordToSeal[],
  fold: FoldParams,
  options: SealAndAppendOptions & { readonly lock: boolean },
): Promise<SealPlan> {
  const targets = await lookUpTargets(db, items, options.lock);
  const fresh = allocate(items, targets);
  const plans = fresh.length > 0 ? await planAppends(db, fresh, targets, fold, options) : [];
  const outcomes: (SealOutcome | undefined)[] = new Array(items.length);
  for (const e of fresh) {
    outcomes[e.index] = {
      status: "sealed",
      eventKey: e.item.eventKey,
      sessionId: e.item.sessionId,
      generation: e.generation,
      seq: e.seq,
    };
  }
  const conflicts = classifyRedeliveries(items, targets.sealed, outcomes);
  return { items, targets, fresh, plans, outcomes, conflicts };
}

/**
 * Whether the plan may be written without the lookup's locks: its records and trees are the guarded statement's, and
 * what else it writes is not a statement that would commit before the guard is checked: no conflict to record, no
 * payload large enough for a statement of its own. (Node jobs are enqueued after the guarded statement, in its
 * transaction: memory/ingest.ts.) Anything else runs the locked way.
 */
export function unlockedWriteAllowed(plan: SealPlan): boolean {
  return plan.conflicts.length === 0 && plan.fresh.every((e) => e.item.payload.length <= INLINE_BLOB_BYTES);
}

/** Writes the plan (see store/ingest-write.ts); false: a target changed since the lookup and nothing was written. */
export async function writeSeal(db: Queryable, plan: SealPlan): Promise<boolean> {
  if (plan.fresh.length === 0) return true;
  return (await writeSealed(db, plan.fresh, plan.targets, plan.plans)) !== undefined;
}

/** The outcomes of a written plan, its conflicts recorded (in the caller's transaction, or on their own). */
export async function finishSeal(db: Queryable, plan: SealPlan): Promise<SealedAndAppended> {
  const outcomes = [...plan.outcomes];
  await recordConflicts(db, plan.items, plan.conflicts, outcomes);
  return {
    outcomes: outcomes as SealOutcome[],
    ready: plan.plans.filter((p) => p.ready.length > 0).map((p) => ({ treeId: p.treeId, nodes: p.ready })),
  };
}

/** The locked way, in the caller's transaction: lookup with locks, plan, write, outcomes. */
export async function sealAndAppend(
  db: Queryable,
  items: readonly RecordToSeal[],
  fold: FoldParams,
  options: SealAndAppendOptions = {},
): Promise<SealedAndAppended> {
  const plan = await planSeal(db, items, fold, { ...options, lock: true });
  // Under the locks the guard fails only for a generation started meanwhile (a twin sealed by the writer the lookup
  // waited for fails the insert instead, see above): the caller runs the transaction again.
  if (!(await writeSeal(db, plan))) throw new GuardFailed();
  return await finishSeal(db, plan);
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
 * The lookup's statement. A batch of one record (every host ingest) has its own, with scalar parameters: PostgreSQL
 * plans a prepared statement afresh on every execution while a plan for the actual parameters looks cheaper than the
 * generic one, and with array parameters it always did (the generic plan guesses ten elements per array): measured
 * with pg_stat_statements on 8 writers, 1904 plans in 1912 executions of the lookup, 1.05 ms of planning each against
 * 0.31 ms of execution. With scalars the generic plan costs what a custom one does and is kept after the fifth
 * execution (tests/integration/ingest-unlocked.test.ts). Both statements return the same rows.
 */
function targetsQuery(
  items: readonly RecordToSeal[],
  lock: boolean,
): { name: string; text: string; values: unknown[] } {
  const one = items.length === 1 ? (items[0] as RecordToSeal) : undefined;
  const where = one
    ? {
        sessions: "s.session_id = $1::text",
        generations: "g.generation = s.current_generation OR g.generation = $2::int",
        keys: "r.event_key = $3::text",
      }
    : {
        sessions: "s.session_id = ANY($1::text[])",
        generations:
          "g.generation = s.current_generation OR (g.session_id, g.generation) IN (SELECT * FROM unnest($2::text[], $3::int[]))",
        keys: "r.event_key = ANY($4::text[])",
      };
  const explicit = items.filter((item) => item.generation !== undefined);
  return {
    // Prepared once per connection (named): the hot path of every ingest.
    name: `optchat.ingest.${lock ? "lock" : "read"}_${one ? "one_target" : "targets"}`,
    text: `SELECT s.session_id, s.current_generation, g.generation, g.next_seq, to_json(t) AS tree,
            (SELECT json_agg(json_build_object('event_key', r.event_key, 'session_id', r.session_id,
                                               'generation', r.generation, 'seq', r.seq,
                                               'payload_hash', encode(r.payload_hash, 'hex'), 'kind', r.kind,
                                               'turn_id', r.turn_id, 'tool_call_id', r.tool_call_id))
               FROM optchat.records r WHERE ${where.keys}) AS sealed
       FROM optchat.sessions s
       JOIN optchat.generations g ON g.session_id = s.session_id
       JOIN optchat.trees t ON t.kind = 'session' AND t.session_id = g.session_id AND t.generation = g.generation
      WHERE ${where.sessions} AND (${where.generations})
      ORDER BY g.session_id, g.generation
        ${lock ? "FOR UPDATE OF g, t" : ""}`,
    values: one
      ? [one.sessionId, one.generation ?? null, one.eventKey]
      : [
          [...new Set(items.map((item) => item.sessionId))],
          explicit.map((item) => item.sessionId),
          explicit.map((item) => item.generation),
          items.map((item) => item.eventKey),
        ],
  };
}

/**
 * Reads and, with `lock`, locks in one statement and sorted order, the generation row and the session tree row of
 * every (session, generation) the batch writes to: the explicit generations and each session's current one (so
 * concurrent batches cannot deadlock on them; a tree's other writers lock it alone, after any generation row; the
 * unlocked way's guard locks the same rows in the same order); the same statement returns the batch's keys that are
 * already sealed.
 */
async function lookUpTargets(db: Queryable, items: readonly RecordToSeal[], lock: boolean): Promise<LockedTargets> {
  const result = await db.query<{
    session_id: string;
    current_generation: number;
    generation: number;
    next_seq: number;
    tree: TreeRow;
    sealed: SealedJson[] | null;
  }>(targetsQuery(items, lock));
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
  return { nextSeq, readSeq: new Map(nextSeq), currentGeneration, trees, sealed };
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
  options: SealAndAppendOptions & { readonly lock: boolean },
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
        { buildFreeInline: options.buildFreeInline ?? false, leafSource, readOnly: !options.lock },
      ),
    );
  }
  return plans;
}
