/**
 * Dependency-driven publication (DESIGN §5 "Everything dependency-driven", issue 9 item 5). A turn's publication is
 * ready when the turn is finished, it is the session's next turn to publish (every turn admitted before it is
 * published or has nothing to publish: a session's turns are published in their own order), and every record of it
 * is summarized (the session's leaves are built past its last record; its cover is then the coarsest tiling of its
 * runs by built nodes, see publish.ts). Each of those is made true by a commit, and each such commit calls this in its
 * own transaction: finishing a turn, committing a session node, and completing a publication job (which may ready the
 * session's next turn). The job is enqueued only when ready, so it never waits by rescheduling itself.
 *
 * Readiness only grows (built leaves only grow, a publication is never undone, a finished turn's runs are fixed), so
 * a job enqueued when ready stays ready. The caller must hold the session tree's row lock (`lockTree`): every writer of
 * the tree takes it first, so two commits that each make half of the condition true cannot both miss the other's.
 */
import type { Queryable } from "../store/db.js";
import { hasOpenPublicationJob } from "../store/job-queue.js";
import { leavesBuiltUpTo } from "../store/publications.js";
import { nextTurnToPublish } from "../store/turns.js";
import { enqueuePublication, type JobInserter } from "./queue.js";

export interface SessionTreeRef {
  readonly treeId: number;
  readonly sessionId: string;
  readonly generation: number;
}

/**
 * Enqueues the session's next publication when it became ready; returns its turn id, or undefined. `builtLeaves`: the
 * tree's built leaves as this transaction read them under the lock, when it has built none since (finishing a turn):
 * they are then not read again.
 */
export async function schedulePublicationIfReady(
  boss: JobInserter,
  tx: Queryable,
  tree: SessionTreeRef & { readonly builtLeaves?: number },
): Promise<string | undefined> {
  const turn = await nextTurnToPublish(tx, tree.sessionId, tree.generation);
  const lastRun = turn?.runs?.[turn.runs.length - 1];
  if (!turn || turn.state === "active" || !lastRun) return undefined;
  const built =
    tree.builtLeaves !== undefined
      ? tree.builtLeaves >= lastRun.end
      : await leavesBuiltUpTo(tx, tree.treeId, lastRun.end);
  if (!built) return undefined;
  // Several commits can find the same turn ready before its job runs (each node commit of the session re-checks);
  // one job is enough. Exact under the tree lock: the job is created and completed by transactions that hold it.
  if (await hasOpenPublicationJob(tx, turn)) return undefined;
  await enqueuePublication(boss, tx, { sessionId: turn.sessionId, generation: turn.generation, turnId: turn.turnId });
  return turn.turnId;
}
