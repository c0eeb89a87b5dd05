import { createHash } from "node:crypto";
import { freeLeafText, NODE_BYTES, PROMPT_VERSION, utf8Bytes } from "../core/summary.js";
import { dyadicCover, type NodeAddress, nodeKey, refOf } from "../core/tree.js";
import { withTransaction } from "../store/db.js";
import { clearPublicationFailure, insertPublication, recordPublicationFailure } from "../store/publications.js";
import { findScope } from "../store/sessions.js";
import {
  applyTreeChanges,
  findNodes,
  findSessionTree,
  findSharedTreeOfScope,
  findViewRevision,
  lockTree,
} from "../store/trees.js";
import { findTurnInGeneration, turnRecordRange } from "../store/turns.js";
import { completeFenced, enqueueNodeJobs, enqueuePublication, PUBLISH_QUEUE, type PublishJobData } from "./queue.js";
import { runStep } from "./summarize.js";
import type { CompactorDeps } from "./worker.js";

export interface PublishJob {
  readonly id: string;
  readonly retryCount: number;
  readonly data: PublishJobData;
}

export type PublishOutcome = "published" | "duplicate" | "not_published" | "waiting" | "lease_lost" | "failed";

/** The longest wait between two looks at a source cover that is not summarized yet. */
const MAX_COVER_WAIT_SECONDS = 30;

/**
 * Publishes a finished turn (seed 000 §5). Waits (by rescheduling itself) until the turn's records are summarized
 * into the session nodes that exactly tile its range, builds the publication leaf from that cover (free when it fits;
 * the outcome tag is always kept, so an attempt never reads as a success), then in one SERIALIZABLE transaction,
 * retried as a whole: completes the job (fenced), allocates the scope's gap-free publication number, inserts the
 * publication and its leaf in the shared tree and folds the shared view. Unique per turn: a replay publishes nothing.
 */
export async function publishTurnJob(deps: CompactorDeps, job: PublishJob): Promise<PublishOutcome> {
  const { sessionId, generation, turnId } = job.data;
  const turn = await findTurnInGeneration(deps.pool, sessionId, generation, turnId);
  const range = turn ? await turnRecordRange(deps.pool, sessionId, generation, turnId) : undefined;
  if (!turn || !turn.publishes || turn.state === "active" || !range) {
    // Nothing to publish: an isolated or subagent session, a superseded generation, or a turn without records.
    await withTransaction(deps.pool, (tx) => completeFenced(deps.boss, tx, job, PUBLISH_QUEUE));
    return "not_published";
  }
  const scope = await findScope(deps.pool, turn.snapshot.scopeId);
  const sessionTree = await findSessionTree(deps.pool, sessionId, generation);
  const sharedTree = scope ? await findSharedTreeOfScope(deps.pool, scope.scopeId) : undefined;
  if (!scope || !sessionTree || !sharedTree)
    throw new Error(`turn ${turnId}: its scope or trees are missing (integrity error)`);

  const cover = dyadicCover(range.start, range.end);
  const nodes = await findNodes(deps.pool, sessionTree.treeId, cover);
  if (cover.some((node) => !nodes.has(nodeKey(node)))) {
    // Wait 1 s, then 2 s, … up to 30 s between looks: the cover is usually ready within seconds, but a cover node
    // that keeps failing must not make this job poll every second for days.
    const waits = (job.data.waits ?? 0) + 1;
    await withTransaction(deps.pool, async (tx) => {
      if (await completeFenced(deps.boss, tx, job, PUBLISH_QUEUE)) {
        await enqueuePublication(deps.boss, tx, { ...job.data, waits }, Math.min(MAX_COVER_WAIT_SECONDS, waits));
      }
    });
    return "waiting";
  }
  const coverText = cover.map((node) => nodes.get(nodeKey(node))?.text ?? "").join("\n");
  const tag = `[turn ${turn.state}]`;
  let text = freeLeafText(tag, coverText, NODE_BYTES)?.replace(`${tag}: `, `${tag} `);
  let calls = 0;
  let overshoot = false;
  if (text === undefined) {
    // Context: the shared view as it stands (every line is a summary: shared leaves are built when published).
    const parts = (await findViewRevision(deps.pool, sharedTree.treeId))?.parts ?? [];
    const shared = await findNodes(deps.pool, sharedTree.treeId, parts);
    const context = parts.flatMap((part) => shared.get(nodeKey(part))?.text ?? []);
    const limit = NODE_BYTES - utf8Bytes(tag) - 1;
    try {
      const result = await runStep(
        deps.summarizer,
        context,
        { type: "compress", kind: "turn", text: coverText },
        limit,
      );
      text = `${tag} ${result.text.replace(/^turn:\s*/, "")}`;
      calls = result.calls;
      overshoot = result.overshoot;
    } catch (error) {
      return await publicationFailed(deps, job, turn.snapshot.scopeId, error);
    }
  }

  const outcome = await withTransaction(
    deps.pool,
    async (tx) => {
      if (!(await completeFenced(deps.boss, tx, job, PUBLISH_QUEUE))) return { status: "lease_lost" as const, seq: -1 };
      const publication = await insertPublication(tx, {
        scopeId: scope.scopeId,
        sessionId,
        generation,
        turnId,
        startSeq: range.start,
        endSeqExclusive: range.end,
        outcome: turn.state as "completed" | "interrupted" | "failed",
        completedAt: turn.finishedAt ?? range.lastAt,
        sourceCover: cover,
      });
      if (!publication) return { status: "duplicate" as const, seq: -1 };
      const locked = await lockTree(tx, { treeId: sharedTree.treeId });
      if (!locked) throw new Error(`shared tree of ${scope.scopeId} disappeared`);
      const leaf: NodeAddress = { level: 0, index: publication.publicationSeq };
      const applied = await applyTreeChanges(
        tx,
        locked,
        [
          { type: "append", index: publication.publicationSeq },
          {
            type: "built",
            node: {
              ...leaf,
              text: text as string,
              inputHashes: cover.map((node) =>
                createHash("sha256")
                  .update(nodes.get(nodeKey(node))?.text ?? "")
                  .digest(),
              ),
              summarizer: calls === 0 ? "free" : deps.summarizer.identity,
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
    },
    // Publications of one scope conflict on the scope row; each conflict retries the whole transaction.
    { isolation: "serializable", attempts: 30 },
  );
  // Reported after the commit: the transaction may run more than once (serialization retries).
  if (outcome.status === "published") {
    deps.report({
      type: "built",
      treeId: sharedTree.treeId,
      ref: `pub:${refOf({ level: 0, index: outcome.seq })}`,
      level: 0,
      calls,
      overshoot,
    });
  }
  return outcome.status;
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
  const message = error instanceof Error ? error.message : String(error);
  const failures = await withTransaction(deps.pool, async (tx) => {
    if (!(await completeFenced(deps.boss, tx, job, PUBLISH_QUEUE))) return 0;
    const count = await recordPublicationFailure(tx, job.data, message);
    await enqueuePublication(
      deps.boss,
      tx,
      { sessionId: job.data.sessionId, generation: job.data.generation, turnId: job.data.turnId },
      deps.failureRetrySeconds,
    );
    return count;
  });
  if (failures === 0) return "lease_lost";
  if (failures === 1)
    deps.report({
      type: "failure",
      treeId: -1,
      ref: `turn ${job.data.turnId} of ${job.data.sessionId} (scope ${scopeId})`,
      level: 0,
      failures,
      error: message,
    });
  return "failed";
}
