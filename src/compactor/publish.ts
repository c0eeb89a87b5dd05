import { createHash } from "node:crypto";
import { fitsInBytes } from "../core/chunk.js";
import { FALLBACK_SUMMARIZER, fallbackTurnText } from "../core/fallback.js";
import { NODE_BYTES, outcomeTag, PROMPT_VERSION, utf8Bytes } from "../core/summary.js";
import { childrenOf, type NodeAddress, nodeKey, refOf } from "../core/tree.js";
import { coverOfRuns, type RecordRun } from "../core/turn-records.js";
import { type PoolClient, withTransaction } from "../store/db.js";
import { findNodes, type NodeRecord } from "../store/nodes.js";
import { clearPublicationFailure, insertPublication, recordPublicationFailure } from "../store/publications.js";
import { findScope } from "../store/sessions.js";
import { applyTreeChanges } from "../store/tree-changes.js";
import { lockTree } from "../store/tree-lock.js";
import { findSessionTree, findSharedTreeOfScope, type Tree } from "../store/trees.js";
import { findTurnInGeneration, nextTurnToPublish, setPublicationState } from "../store/turns.js";
import { findViewRevision } from "../store/view-revisions.js";
import { compactorContextLines } from "./context.js";
import { type CompactorDeps, treeCacheKey, withinBudget } from "./deps.js";
import { failAndReschedule } from "./job-failure.js";
import { callCollector } from "./ledger.js";
import {
  completeFenced,
  enqueueNodeJobs,
  enqueuePublication,
  PUBLISH_QUEUE,
  type PublishJobData,
  stillHeld,
} from "./queue.js";
import { schedulePublicationIfReady } from "./schedule-publication.js";
import { runStep } from "./summarize.js";

export interface PublishJob {
  readonly id: string;
  readonly retryCount: number;
  readonly data: PublishJobData;
}

export type PublishOutcome = "published" | "duplicate" | "not_published" | "not_ready" | "lease_lost" | "failed";

/** A turn ready to publish, with its session tree and runs; or, for a stale job, what it ended as. */
type Publishable =
  | { readonly ready: false; readonly outcome: PublishOutcome }
  | {
      readonly ready: true;
      readonly turn: NonNullable<Awaited<ReturnType<typeof findTurnInGeneration>>>;
      readonly sessionTree: NonNullable<Awaited<ReturnType<typeof findSessionTree>>>;
      readonly runs: readonly RecordRun[];
      readonly lastRun: RecordRun;
    };

/**
 * Whether the job's turn is ready to publish now. Published already (a replay, or a crash after the publication
 * commit), nothing to publish (a superseded generation, a turn without records), or not ready: only a stale job gets
 * here, since jobs are created when ready and readiness only grows. It is completed, not retried: whatever makes it
 * ready schedules it.
 */
async function publishable(deps: CompactorDeps, job: PublishJob): Promise<Publishable> {
  const { sessionId, generation, turnId } = job.data;
  const turn = await findTurnInGeneration(deps.pool, sessionId, generation, turnId);
  const sessionTree = turn ? await findSessionTree(deps.pool, sessionId, generation) : undefined;
  const next = turn ? await nextTurnToPublish(deps.pool, sessionId, generation) : undefined;
  const runs = turn?.runs ?? [];
  const lastRun = runs[runs.length - 1];
  if (
    turn &&
    sessionTree &&
    turn.publicationState === "pending" &&
    next?.turnId === turnId &&
    lastRun &&
    sessionTree.builtLeaves >= lastRun.end
  ) {
    return { ready: true, turn, sessionTree, runs, lastRun };
  }
  await completeAndScheduleNext(deps, job, sessionTree?.treeId, sessionId, generation);
  if (turn?.publicationState === "published") return { ready: false, outcome: "duplicate" };
  return { ready: false, outcome: turn?.publicationState === "pending" ? "not_ready" : "not_published" };
}

/**
 * Publishes a finished turn (seed 000 §5). The job exists only once the publication is ready (schedule-publication.ts:
 * the turn is finished, it is its session's next turn to publish, and its records are summarized), so it never
 * waits. Its source cover is the coarsest tiling of the turn's own runs (never another turn's interleaved record) by
 * session nodes built now: a parent still being summarized is replaced by its children, so the publication does not
 * wait for the parents' job hops. It builds the publication leaf from that cover (free when it fits; the outcome tag
 * is always kept, so an attempt never reads as a success), then in one SERIALIZABLE transaction, retried as a whole:
 * checks it still holds the job, allocates the scope's gap-free publication number, inserts the publication and its
 * leaf in the shared tree and folds the shared view. Then it completes the job and schedules the session's next turn
 * (a second, short transaction under the session tree's lock: kept out of the SERIALIZABLE one, which the session's
 * ongoing ingestion would otherwise abort again and again; a crash between the two re-runs the job, which finds the
 * turn published and does the second step). Unique per turn: a replay publishes nothing.
 */
export async function publishTurnJob(deps: CompactorDeps, job: PublishJob): Promise<PublishOutcome> {
  const ready = await publishable(deps, job);
  if (!ready.ready) return ready.outcome;
  const { turn, sessionTree, runs, lastRun } = ready;
  const { sessionId, generation, turnId } = job.data;
  const scope = await findScope(deps.pool, turn.snapshot.scopeId);
  const sharedTree = scope ? await findSharedTreeOfScope(deps.pool, scope.scopeId) : undefined;
  if (!scope || !sharedTree) throw new Error(`turn ${turnId}: its scope or shared tree is missing (integrity error)`);
  const { cover, nodes } = await coarsestBuiltCover(deps, sessionTree.treeId, runs);

  const coverText = cover.map((node) => nodes.get(nodeKey(node))?.text ?? "").join("\n");
  const records = lastRun.end - (runs[0] as RecordRun).start;
  let leaf: PublicationLeaf;
  try {
    leaf = await publicationLeaf(
      deps,
      job.id,
      { scopeId: scope.scopeId, sessionId, sharedTree },
      turn.state,
      coverText,
      records,
    );
  } catch (error) {
    return await publicationFailed(deps, job, turn.snapshot.scopeId, error);
  }
  const { calls, overshoot, fallback } = leaf;

  const outcome = await oneCommitAtATime(() =>
    withTransaction(
      deps.pool,
      (tx) => commitPublication(tx, deps, job, { turn, scope, sharedTree, sessionTree, runs, cover, nodes, leaf }),
      // Publications of one scope conflict on the scope row; each conflict retries the whole transaction.
      { isolation: "serializable", attempts: 30 },
    ),
  );
  if (outcome.status === "lease_lost") return outcome.status;
  if (outcome.status === "cover_changed")
    return await publicationFailed(
      deps,
      job,
      turn.snapshot.scopeId,
      new Error("its source cover was rebuilt (optchat rebuild) while it was summarized; it is summarized again"),
    );
  await completeAndScheduleNext(deps, job, sessionTree.treeId, sessionId, generation);
  // Reported after the commit: the transaction may run more than once (serialization retries).
  if (outcome.status === "published") {
    deps.report({
      type: "built",
      treeId: sharedTree.treeId,
      ref: `pub:${refOf({ level: 0, index: outcome.seq })}`,
      level: 0,
      calls,
      overshoot,
      ...(fallback ? { fallback } : {}),
    });
  }
  return outcome.status;
}

export /** What the publication's commit needs: the turn, where it goes, its source cover and the leaf computed for it. */
interface PublicationCommit {
  readonly turn: NonNullable<Awaited<ReturnType<typeof findTurnInGeneration>>>;
  readonly scope: { readonly scopeId: string };
  readonly sharedTree: Tree;
  readonly sessionTree: Tree;
  readonly runs: readonly RecordRun[];
  readonly cover: readonly NodeAddress[];
  readonly nodes: ReadonlyMap<number, { readonly text: string }>;
  readonly leaf: PublicationLeaf;
}

/**
 * The publication's one transaction: still this worker's job, its cover unchanged, the publication row and its turn's
 * state, and the shared tree's new leaf (its fold, and the jobs of what became ready).
 */
async function commitPublication(
  tx: PoolClient,
  deps: CompactorDeps,
  job: PublishJob,
  commit: PublicationCommit,
): Promise<{ status: "lease_lost" | "cover_changed" | "duplicate" | "published"; seq: number }> {
  const { turn, scope, sharedTree, sessionTree, runs, cover, nodes } = commit;
  const { text, calls, overshoot, fallback } = commit.leaf;
  const { sessionId, generation, turnId } = job.data;
  const lastRun = runs[runs.length - 1] as RecordRun;
  if (!(await stillHeld(deps.boss, tx, job, PUBLISH_QUEUE))) return { status: "lease_lost" as const, seq: -1 };
  // The leaf is committed only over the cover texts it summarized: `optchat rebuild` may have committed new
  // revisions of them meanwhile (src/memory/rebuild.ts), and a leaf over the old ones would derive from text
  // that is no longer its cover's (the audit's derivation check).
  const coverNow = await findNodes(tx, sessionTree.treeId, cover);
  if (cover.some((node) => coverNow.get(nodeKey(node))?.text !== nodes.get(nodeKey(node))?.text))
    return { status: "cover_changed" as const, seq: -1 };
  const publication = await insertPublication(tx, {
    scopeId: scope.scopeId,
    sessionId,
    generation,
    turnId,
    startSeq: (runs[0] as RecordRun).start,
    endSeqExclusive: lastRun.end,
    outcome: turn.state as "completed" | "interrupted" | "failed",
    completedAt: turn.finishedAt ?? new Date(),
    sourceCover: cover,
  });
  if (!publication) return { status: "duplicate" as const, seq: -1 };
  await setPublicationState(tx, turn, "published");
  const locked = await lockTree(tx, { treeId: sharedTree.treeId });
  if (!locked) throw new Error(`shared tree of ${scope.scopeId} disappeared`);
  const address: NodeAddress = { level: 0, index: publication.publicationSeq };
  const applied = await applyTreeChanges(
    tx,
    locked,
    [
      { type: "append", index: publication.publicationSeq },
      {
        type: "built",
        node: {
          ...address,
          text: text as string,
          inputHashes: cover.map((node) =>
            createHash("sha256")
              .update(nodes.get(nodeKey(node))?.text ?? "")
              .digest(),
          ),
          summarizer: calls > 0 ? deps.summarizer.identity : fallback ? FALLBACK_SUMMARIZER : "free",
          promptVersion: calls === 0 ? null : PROMPT_VERSION,
          attempts: calls,
          overshoot,
          jobId: job.id,
          jobAttempt: job.retryCount,
          chunks: [],
        },
      },
    ],
    deps.fold,
    { buildFreeInline: true },
  );
  await enqueueNodeJobs(deps.boss, tx, sharedTree.treeId, applied.ready);
  await clearPublicationFailure(tx, job.data);
  return { status: "published" as const, seq: publication.publicationSeq };
}

interface PublicationLeaf {
  readonly text: string;
  readonly calls: number;
  readonly overshoot: boolean;
  readonly fallback: boolean;
}

/**
 * The publication leaf's text: the cover's lines when they fit after the outcome tag (free), else one compress step
 * with the shared view as context (its calls go to the ledger), else, past the budget, a labelled fallback. The tag
 * always comes first. Throws when the summary fails.
 */
export async function publicationLeaf(
  deps: Pick<CompactorDeps, "pool" | "summarizer" | "budget" | "gate" | "report">,
  jobId: string | null,
  where: { scopeId: string; sessionId: string; sharedTree: Pick<Tree, "treeId" | "scopeId"> },
  state: string,
  coverText: string,
  records: number,
): Promise<PublicationLeaf> {
  const tag = outcomeTag(state);
  const lead = tag === "" ? "" : `${tag} `;
  const free = `${lead}${coverText}`;
  if (fitsInBytes(free, NODE_BYTES)) return { text: free, calls: 0, overshoot: false, fallback: false };
  const { sharedTree } = where;
  if (!(await withinBudget(deps, sharedTree)))
    return { text: fallbackTurnText(tag, records), calls: 0, overshoot: false, fallback: true };
  const ledger = callCollector(deps.summarizer, {
    scopeId: where.scopeId,
    sessionId: where.sessionId,
    treeId: sharedTree.treeId,
    level: 0,
    index: null,
    jobId,
  });
  const reportError = (message: string) => deps.report({ type: "error", error: message });
  // Context: the shared view as it stands (every line is a summary: shared leaves are built when published).
  const latest = await findViewRevision(deps.pool, sharedTree.treeId);
  const context = await compactorContextLines(
    deps.pool,
    sharedTree.treeId,
    latest,
    latest?.leafCount ?? Number.POSITIVE_INFINITY,
  );
  try {
    const result = await runStep(
      {
        summarizer: deps.summarizer,
        purpose: "publication",
        cacheKey: treeCacheKey(sharedTree.treeId),
        record: ledger.record,
        ...(deps.gate ? { gate: deps.gate } : {}),
      },
      context,
      { type: "compress", kind: "turn", text: coverText },
      NODE_BYTES - utf8Bytes(lead),
    );
    return {
      text: `${lead}${result.text.replace(/^turn:\s*/, "")}`,
      calls: result.calls,
      overshoot: result.overshoot,
      fallback: false,
    };
  } finally {
    await ledger.flush(deps.pool, reportError);
  }
}

/**
 * Runs this process's publication commits one after another. They all update their scope's counter row in
 * SERIALIZABLE transactions, so a worker's batch committed at once mostly aborts and retries itself; the summaries
 * before the commit still run concurrently.
 */
let commitQueue: Promise<unknown> = Promise.resolve();
function oneCommitAtATime<T>(commit: () => Promise<T>): Promise<T> {
  const result = commitQueue.then(commit, commit);
  commitQueue = result.catch(() => undefined);
  return result;
}

/**
 * Completes the job (fenced) and, under the session tree's lock like every other scheduling of a publication, enqueues
 * the session's next publication if it is ready now.
 */
async function completeAndScheduleNext(
  deps: CompactorDeps,
  job: PublishJob,
  sessionTreeId: number | undefined,
  sessionId: string,
  generation: number,
): Promise<void> {
  await withTransaction(deps.pool, async (tx) => {
    const locked = sessionTreeId !== undefined ? await lockTree(tx, { treeId: sessionTreeId }) : undefined;
    if (!(await completeFenced(deps.boss, tx, job, PUBLISH_QUEUE))) return;
    if (locked) await schedulePublicationIfReady(deps.boss, tx, { treeId: locked.tree.treeId, sessionId, generation });
  });
}

/**
 * The coarsest ordered tiling of `runs` by built session nodes: each run's canonical dyadic cover, with a node not
 * built yet replaced by its two children, until built (leaves are, once the turn is ready). Nodes are immutable, so
 * what was built when this read it stays valid.
 */
async function coarsestBuiltCover(
  deps: CompactorDeps,
  treeId: number,
  runs: readonly RecordRun[],
): Promise<{ cover: NodeAddress[]; nodes: Map<number, NodeRecord> }> {
  let cover = coverOfRuns(runs);
  const nodes = new Map<number, NodeRecord>();
  for (;;) {
    const unknown = cover.filter((node) => !nodes.has(nodeKey(node)));
    if (unknown.length === 0) return { cover, nodes };
    for (const [key, node] of await findNodes(deps.pool, treeId, unknown)) nodes.set(key, node);
    cover = cover.flatMap((node) => {
      if (nodes.has(nodeKey(node))) return [node];
      if (node.level === 0) throw new Error(`leaf ${refOf(node)} of tree ${treeId} is not built (ran before ready)`);
      return childrenOf(node);
    });
  }
}

/**
 * The publication's summary failed: the turn stays unpublished, the failure is counted where `optchat status` sees it
 * (reported the first time), and a fresh job tries again after the fixed failure delay, forever (no backoff).
 */
async function publicationFailed(
  deps: CompactorDeps,
  job: PublishJob,
  scopeId: string,
  error: unknown,
): Promise<PublishOutcome> {
  const { sessionId, generation, turnId } = job.data;
  return await failAndReschedule(
    deps,
    {
      job,
      queue: PUBLISH_QUEUE,
      record: (tx, message) => recordPublicationFailure(tx, job.data, message),
      reschedule: (tx, delaySeconds) =>
        enqueuePublication(deps.boss, tx, { sessionId, generation, turnId }, delaySeconds),
      where: { treeId: -1, ref: `turn ${turnId} of ${sessionId} (scope ${scopeId})`, level: 0 },
    },
    error,
  );
}
