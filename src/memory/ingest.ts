import { enqueueNodeJobs, type JobInserter } from "../compactor/queue.js";
import { OptchatError } from "../core/errors.js";
import type { FoldParams } from "../core/fold.js";
import { databaseFailureOf, isUniqueViolationOf, type Pool, withTransaction } from "../store/db.js";
import {
  finishSeal,
  GuardFailed,
  planSeal,
  type SealedAndAppended,
  sealAndAppend,
  unlockedWriteAllowed,
  writeSeal,
} from "../store/ingest-commit.js";
import {
  EVENT_KEY_CONSTRAINT,
  type RecordToSeal,
  type SealOutcome,
  type StageOutcome,
  stageItem,
} from "../store/records.js";
import { NeedsTreeLock } from "../store/tree-changes.js";
import { prepareEvents } from "./ingest-prep.js";
import type { IngestRouting } from "./ingest-routing.js";
import type { IngestEvent, ValidIngestEvent } from "./schemas.js";

export type IngestResult =
  | SealOutcome
  | { readonly status: StageOutcome; readonly eventKey: string; readonly sessionId: string };

export interface IngestOptions {
  readonly beforeCommit?: () => Promise<void>;
  /**
   * Build the leaves that need no model call (short messages, seed 002 §3 free nodes) in the ingest transaction, so
   * the next request need not wait for a compactor job hop (~100 ms each). For a host's per-message ingestion; bulk
   * imports leave it off (measured: batches of 100 fell from ~5,000 to ~300 records/s with it).
   */
  readonly buildFreeInline?: boolean;
}

export interface IngestDeps {
  readonly pool: Pool;
  /** The producer's job queue, started when first needed (src/memory/service.ts); awaited before the transaction. */
  readonly jobQueue: () => Promise<JobInserter>;
  readonly fold: FoldParams;
  /** Which sessions' ingests try the unlocked way first (see ingestUnlocked); one per service. */
  readonly routing: IngestRouting;
}

/**
 * Ingests a batch: non-final events are staged; final ones are sealed, appended as leaves of their generation's tree
 * (the view folds) and their ready leaf jobs enqueued, all in one transaction. A batch of final events only tries the
 * unlocked way first (ingestUnlocked), the locked way otherwise or after it (a session that needed the locks keeps
 * to them for a streak: ingest-routing.ts).
 */
export async function ingestMany(
  deps: IngestDeps,
  events: readonly IngestEvent[],
  where = "ingestMany",
  options: IngestOptions = {},
): Promise<IngestResult[]> {
  const { valid, prepared } = await prepareEvents(events, where);
  const boss = await deps.jobQueue();
  const { routing } = deps;
  const sessionIds = prepared.map((item) => item.sessionId);
  const unlocked =
    options.beforeCommit === undefined &&
    prepared.length > 0 &&
    valid.every((event) => event.final) &&
    routing.tryUnlocked(sessionIds);
  return await retryOnTwinInsert(async () => {
    if (unlocked) {
      const sealed = await ingestUnlocked(deps, boss, prepared, options);
      if (sealed) {
        routing.succeeded(sessionIds);
        return sealed.outcomes;
      }
      routing.neededLock(sessionIds);
    }
    return await ingestLocked(deps, boss, valid, prepared, options);
  });
}

/** The locked way: one transaction that stages, seals under the lookup's locks, and enqueues. */
async function ingestLocked(
  deps: IngestDeps,
  boss: JobInserter,
  valid: readonly ValidIngestEvent[],
  prepared: readonly RecordToSeal[],
  options: IngestOptions,
): Promise<IngestResult[]> {
  return await withTransaction(deps.pool, async (client) => {
    const results: (IngestResult | undefined)[] = new Array(prepared.length);
    const finals: { index: number; record: RecordToSeal }[] = [];
    for (const [index, item] of prepared.entries()) {
      const event = valid[index] as ValidIngestEvent;
      if (event.final) {
        finals.push({ index, record: item });
      } else {
        const status = await stageItem(client, {
          stageKey: item.stageKey,
          sessionId: item.sessionId,
          generation: item.generation,
          turnId: item.turnId,
          kind: item.kind,
          revision: event.finalization.revision,
          payload: item.payload,
        });
        results[index] = { status, eventKey: item.eventKey, sessionId: item.sessionId };
      }
    }
    if (finals.length > 0) {
      // Sealed records become leaves of their generation's tree in the same transaction: the view folds and the
      // leaf jobs that became ready are enqueued (seed 000 §10: sealing a record schedules its leaf).
      const sealed = await sealAndAppend(
        client,
        finals.map((f) => f.record),
        deps.fold,
        { buildFreeInline: options.buildFreeInline ?? false },
      );
      finals.forEach((f, n) => {
        results[f.index] = sealed.outcomes[n];
      });
      for (const { treeId, nodes } of sealed.ready) await enqueueNodeJobs(boss, client, treeId, nodes);
    }
    await options.beforeCommit?.();
    return results as IngestResult[];
  });
}

/**
 * The unlocked way (store/ingest-commit.ts): the lookup takes no lock, the fold is planned from what it read, and the
 * guarded write checks that nothing changed meanwhile. A batch that writes nothing but that statement (plain appends:
 * no node built inline, no node job, no conflict to record) costs two statements and one commit instead of BEGIN,
 * the locking lookup, the write and COMMIT; one that only re-delivers sealed records costs the lookup alone. A batch
 * whose leaves became ready writes and enqueues their jobs in one transaction (BEGIN, the guarded write, pg-boss's
 * insert, COMMIT: the same five statements as the locked way). Returns undefined, having written nothing, when the
 * batch must run the locked way: the plan would build a node (NeedsTreeLock), record a conflict or write a large
 * payload on its own, the guard found a target changed (or a generation started), or the write met a lock conflict
 * (deadlock). A key sealed since the lookup fails the write on records.event_key, having written nothing: the retry
 * (retryOnTwinInsert) looks up again and reports the twin.
 */
async function ingestUnlocked(
  deps: IngestDeps,
  boss: JobInserter,
  prepared: readonly RecordToSeal[],
  options: IngestOptions,
): Promise<SealedAndAppended | undefined> {
  try {
    const plan = await planSeal(deps.pool, prepared, deps.fold, {
      buildFreeInline: options.buildFreeInline ?? false,
      lock: false,
    });
    if (!unlockedWriteAllowed(plan)) return undefined;
    const ready = plan.plans.filter((p) => p.ready.length > 0);
    if (ready.length === 0) {
      return (await writeSeal(deps.pool, plan)) ? await finishSeal(deps.pool, plan) : undefined;
    }
    const client = await deps.pool.connect();
    let broken = false;
    try {
      await client.query("BEGIN");
      if (!(await writeSeal(client, plan))) {
        await client.query("ROLLBACK");
        return undefined;
      }
      for (const p of ready) await enqueueNodeJobs(boss, client, p.treeId, p.ready);
      const sealed = await finishSeal(client, plan);
      await client.query("COMMIT");
      return sealed;
    } catch (error) {
      await client.query("ROLLBACK").catch(() => {
        broken = true;
      });
      throw error;
    } finally {
      client.release(broken);
    }
  } catch (error) {
    if (error instanceof NeedsTreeLock || databaseFailureOf(error) === "conflict") return undefined;
    throw error;
  }
}

export async function ingest(deps: IngestDeps, event: IngestEvent): Promise<IngestResult> {
  const [result] = await ingestMany(deps, [event], "ingest");
  if (!result) throw new Error("ingest: no result");
  if (result.status === "conflict") {
    throw new OptchatError(
      "INGEST_CONFLICT",
      `ingest: finalization ${result.eventKey} is already sealed as ${result.sessionId}:${result.generation}:${result.seq} with different content; the sealed record is unchanged and the conflict is recorded (#${result.conflictId}). A host rewrite must use a new revision.`,
      { ...result },
    );
  }
  return result;
}

/**
 * Two writers can deliver the same finalization key to different sessions' locks at the same moment; the loser gets
 * unique_violation on records.event_key (its named constraint), as does a writer whose lookup missed the winner's
 * commit (the unlocked way's lookup, or the locked one's snapshot from before it waited for its locks). Running the
 * transaction again then sees the winner's record and reports a duplicate or a conflict, as a sequential delivery
 * would; the locked way's guard fails (GuardFailed) when a generation started meanwhile.
 */
async function retryOnTwinInsert<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (isUniqueViolationOf(error, EVENT_KEY_CONSTRAINT) || error instanceof GuardFailed) return await run();
    throw error;
  }
}
