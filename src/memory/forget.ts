/**
 * Forgetting memory (issue 15 item 4; seed 000 §12 "Delete or revoke sharing"): the one domain function that removes
 * sessions, a scope, or everything before a date, in a cascade, the way one `remove` owns a session's children in
 * OpenCode's own code. Everything happens in one transaction (crash safety: the previous state or the complete new
 * one, tests/integration/forget-crash.test.ts): the scope rows and trees are locked, the sessions' publications are
 * retired from their shared trees (marker leaves, derived ancestors deleted, the fold rebased; store/retire-publications
 * .ts), their own content is removed (store/deletion.ts), the jobs that rebuild the shared ancestors are enqueued (the
 * outbox: they exist iff the deletion commits), and each touched scope's retention epoch is bumped so that no snapshot
 * pinned earlier serves removed text (retention-epoch.ts).
 */
import { enqueueNodeJobs, type JobInserter } from "../compactor/queue.js";
import type { FoldParams } from "../core/fold.js";
import { type Pool, withTransaction } from "../store/db.js";
import {
  bumpRetentionEpochs,
  type ContentRemoved,
  type ForgetTarget,
  findForgetTargets,
  lockForDeletion,
  removeSessionContent,
} from "../store/deletion.js";
import { countForgettable } from "../store/deletion-plan.js";
import { type RetiredSelection, type RetireReason, retirePublications } from "../store/retire-publications.js";
import { lockTree } from "../store/tree-lock.js";
import { findSharedTreeOfScope } from "../store/trees.js";

export type ForgetRequest =
  | { readonly sessionIds: readonly string[] }
  | { readonly scopeId: string }
  | { readonly before: Date };

export interface ForgetDeps {
  readonly pool: Pool;
  readonly jobQueue: () => Promise<JobInserter>;
  readonly fold: FoldParams;
}

/** What a forget will remove (a dry run) or removed. */
export interface ForgetSummary {
  readonly sessions: readonly ForgetTarget[];
  readonly records: number;
  readonly publications: number;
}

export interface ForgetReport extends ForgetSummary {
  readonly removed: ContentRemoved & { readonly sharedNodes: number };
  /** Shared ancestors whose rebuild was enqueued now (more follow as each is built). */
  readonly rebuildsQueued: number;
  readonly scopes: readonly string[];
}

export interface ForgetOptions {
  /** Progress lines (the CLI prints them). */
  readonly onProgress?: (message: string) => void;
  /** Runs inside the transaction after every write, before the commit (crash tests stop the process there). */
  readonly beforeCommit?: () => Promise<void>;
}

/** What `forget` would remove now, read without changing anything (the CLI's dry run). */
export async function planForget(pool: Pool, request: ForgetRequest): Promise<ForgetSummary> {
  const sessions = await findForgetTargets(pool, request);
  const counts = await countForgettable(
    pool,
    sessions.map((s) => s.sessionId),
  );
  return { sessions, ...counts };
}

/** Forgets what `request` names, in one transaction. Forgetting nothing (no live session matches) is not an error. */
export async function forget(
  deps: ForgetDeps,
  request: ForgetRequest,
  options: ForgetOptions = {},
): Promise<ForgetReport> {
  const progress = options.onProgress ?? (() => {});
  const boss = await deps.jobQueue();
  return await withTransaction(deps.pool, async (tx) => {
    const first = await findForgetTargets(tx, request);
    const scopes = [...new Set(first.map((s) => s.scopeId))].sort();
    const treeIds = await lockForDeletion(
      tx,
      scopes,
      first.map((s) => s.sessionId),
    );
    // Read again under the locks: a concurrent forget may have taken some of them meanwhile.
    const sessions = await findForgetTargets(tx, { sessionIds: first.map((s) => s.sessionId) });
    const ids = sessions.map((s) => s.sessionId);
    const counts = await countForgettable(tx, ids);
    progress(`forgetting ${ids.length} session(s): ${counts.records} record(s), ${counts.publications} publication(s)`);
    let sharedNodes = 0;
    let rebuildsQueued = 0;
    for (const scopeId of scopes) {
      const inScope = sessions.filter((s) => s.scopeId === scopeId).map((s) => s.sessionId);
      const retired = await retireFromScope(deps, boss, tx, scopeId, inScope, "deleted");
      sharedNodes += retired.nodesRemoved;
      rebuildsQueued += retired.ready;
      if (retired.publications > 0)
        progress(
          `scope ${scopeId}: ${retired.publications} publication(s) retired, ${retired.nodesRemoved} shared summaries to rebuild`,
        );
    }
    const removed = await removeSessionContent(tx, ids, treeIds);
    progress(`removed ${removed.records} record(s), ${removed.blobs} unshared payload(s), ${removed.nodes} summaries`);
    await bumpRetentionEpochs(tx, scopes);
    await options.beforeCommit?.();
    return { sessions, ...counts, removed: { ...removed, sharedNodes }, rebuildsQueued, scopes };
  });
}

/**
 * Retires the sessions' publications from a scope's shared tree (none for an isolated scope) and enqueues the rebuild
 * of the ancestors that are ready, in the caller's transaction, which holds the scope row.
 */
export async function retireFromScope(
  deps: Pick<ForgetDeps, "fold">,
  boss: JobInserter,
  tx: Parameters<typeof lockTree>[0],
  scopeId: string,
  selection: readonly string[] | RetiredSelection,
  reason: RetireReason,
): Promise<{ publications: number; nodesRemoved: number; ready: number }> {
  const tree = await findSharedTreeOfScope(tx, scopeId);
  if (!tree) return { publications: 0, nodesRemoved: 0, ready: 0 };
  const locked = await lockTree(tx, { treeId: tree.treeId });
  if (!locked) throw new Error(`the shared tree of scope ${scopeId} disappeared`);
  const selected: RetiredSelection = Array.isArray(selection)
    ? { sessionIds: selection as readonly string[] }
    : (selection as RetiredSelection);
  const retired = await retirePublications(tx, locked, { scopeId, reason, ...selected }, deps.fold);
  await enqueueNodeJobs(boss, tx, tree.treeId, retired.ready);
  return {
    publications: retired.publicationSeqs.length,
    nodesRemoved: retired.nodesRemoved,
    ready: retired.ready.length,
  };
}
