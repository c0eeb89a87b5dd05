import { createHash } from "node:crypto";
import { freeLeafText, NODE_BYTES, PROMPT_VERSION, utf8Bytes } from "../core/summary.js";
import { dyadicCover, type NodeAddress, nodeKey, refOf } from "../core/tree.js";
import { withTransaction } from "../store/db.js";
import { insertPublication } from "../store/publications.js";
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

export type PublishOutcome = "published" | "duplicate" | "not_published" | "waiting" | "lease_lost";

/** How long a publication waits before looking again for its source cover to be summarized. */
const COVER_WAIT_SECONDS = 1;

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
    await withTransaction(deps.pool, async (tx) => {
      if (await completeFenced(deps.boss, tx, job, PUBLISH_QUEUE))
        await enqueuePublication(deps.boss, tx, job.data, COVER_WAIT_SECONDS);
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
    const result = await runStep(deps.summarizer, context, { type: "compress", kind: "turn", text: coverText }, limit);
    text = `${tag} ${result.text.replace(/^turn:\s*/, "")}`;
    calls = result.calls;
    overshoot = result.overshoot;
  }

  return await withTransaction(
    deps.pool,
    async (tx) => {
      if (!(await completeFenced(deps.boss, tx, job, PUBLISH_QUEUE))) return "lease_lost" as const;
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
      if (!publication) return "duplicate" as const;
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
      deps.report({ type: "built", treeId: sharedTree.treeId, ref: `pub:${refOf(leaf)}`, level: 0, calls, overshoot });
      return "published" as const;
    },
    { isolation: "serializable" },
  );
}
