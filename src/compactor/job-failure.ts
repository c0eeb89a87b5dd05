import type { PoolClient } from "../store/db.js";
import { withTransaction } from "../store/db.js";
import type { CompactorDeps } from "./deps.js";
import { retryDelaySeconds } from "./deps.js";
import { completeFenced, NODE_QUEUE } from "./queue.js";

/** What a failed job of either kind records, and where its report points. */
export interface JobFailure {
  /** The fetched attempt, completed only if this worker still holds it. */
  readonly job: { id: string; retryCount: number };
  readonly queue?: string;
  /** Counts the failure where `optchat status` sees it; returns the count so far (1 on the first). */
  readonly record: (tx: PoolClient, message: string) => Promise<number>;
  /** Enqueues the fresh job that tries again after `delaySeconds`. */
  readonly reschedule: (tx: PoolClient, delaySeconds: number) => Promise<void>;
  /** Where the first failure's report points. */
  readonly where: { readonly treeId: number; readonly ref: string; readonly level: number };
}

/**
 * A failed summary of a node or a publication: in one transaction, the attempt is completed if this worker still
 * holds it (fenced: a worker that lost its lease changes nothing), the failure is counted, and a fresh job is
 * scheduled after the fixed failure delay (seed 002 §4.1: no exponential backoff, the next turn waits on it). The first
 * failure is reported, later ones only counted. "lease_lost" when the attempt was no longer this worker's.
 */
export async function failAndReschedule(
  deps: CompactorDeps,
  failure: JobFailure,
  error: unknown,
): Promise<"failed" | "lease_lost"> {
  const message = error instanceof Error ? error.message : String(error);
  const failures = await withTransaction(deps.pool, async (tx) => {
    if (!(await completeFenced(deps.boss, tx, failure.job, failure.queue ?? NODE_QUEUE))) return 0;
    const count = await failure.record(tx, message);
    await failure.reschedule(tx, retryDelaySeconds(deps, error));
    return count;
  });
  if (failures === 0) return "lease_lost";
  if (failures === 1) deps.report({ type: "failure", ...failure.where, failures, error: message });
  return "failed";
}
