import { type CompactorCallRow, insertCompactorCalls } from "../store/compactor-calls.js";
import type { Pool } from "../store/db.js";
import type { CallRecord } from "./summarize.js";
import type { Summarizer } from "./summarizer.js";

/** Where a job's calls belong in the ledger. */
export interface CallPlace {
  readonly scopeId: string | null;
  readonly sessionId: string | null;
  readonly treeId: number;
  readonly level: number | null;
  readonly index: number | null;
  /** null: a call made outside a job (`optchat rebuild`). */
  readonly jobId: string | null;
}

/**
 * Collects a job's model calls (StepContext.record) and writes them to the ledger in one statement when the job's
 * summary is done or has failed: outside the commit transaction, so a call is recorded even when the job then loses
 * its lease (it was paid for all the same). A ledger write that fails is reported, not thrown: the node it paid for
 * is still worth committing.
 */
export function callCollector(summarizer: Summarizer, place: CallPlace) {
  const calls: CallRecord[] = [];
  return {
    record: (call: CallRecord) => {
      calls.push(call);
    },
    get count() {
      return calls.length;
    },
    async flush(pool: Pool, report: (error: string) => void): Promise<void> {
      if (calls.length === 0) return;
      const rows: CompactorCallRow[] = calls.splice(0).map((call) => ({
        at: call.at,
        provider: summarizer.provider,
        model: summarizer.model,
        purpose: call.purpose,
        inputTokens: call.usage.inputTokens,
        cacheReadTokens: call.usage.cacheReadTokens,
        cacheWriteTokens: call.usage.cacheWriteTokens,
        outputTokens: call.usage.outputTokens,
        latencyMs: call.latencyMs,
        outcome: call.outcome,
        ...place,
      }));
      await insertCompactorCalls(pool, rows).catch((error: unknown) =>
        report(`cost ledger: ${rows.length} call(s) of tree ${place.treeId} not recorded: ${(error as Error).message}`),
      );
    },
  };
}
