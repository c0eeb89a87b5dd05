import type { JobInserter } from "../compactor/queue.js";
import { schedulePublicationIfReady } from "../compactor/schedule-publication.js";
import { InputInvalidError, OptchatError } from "../core/errors.js";
import { WORKER_ALIVE_SECONDS } from "../core/health.js";
import { type Pool, withTransaction } from "../store/db.js";
import { lockCurrentSessionTree } from "../store/trees.js";
import {
  admitTurn as admitTurnRow,
  finishTurn as finishTurnRow,
  recentUnpublishedMs,
  type Turn,
  type TurnOutcome,
} from "../store/turns.js";
import type { Config } from "./config.js";
import type { TurnContext } from "./reader.js";

/**
 * Admits a turn and pins its snapshot (seed 000 §9); re-admitting returns the same turn. One statement: the session is
 * read by the insert itself (a separate read of it was one more round trip of every prompt, issue 9 item 2).
 */
export async function admitTurn(
  deps: { readonly pool: Pool; readonly config: Pick<Config, "admissionWaitMs"> },
  input: { sessionId: string; turnId: string; query?: string; publishes?: boolean; awaitRecent?: boolean },
): Promise<Turn> {
  if (input.awaitRecent === true) await awaitRecentPublications(deps, input);
  const admitted = await admitTurnRow(deps.pool, {
    sessionId: input.sessionId,
    turnId: input.turnId,
    query: input.query ?? null,
    // Subagent sessions are recorded but not published (the insert checks the parent): their report reaches the
    // parent as a tool result.
    publishes: input.publishes ?? true,
  });
  if (!admitted) throw new OptchatError("SESSION_NOT_FOUND", `No session ${input.sessionId}`, { field: "sessionId" });
  return admitted.turn;
}

/** How often a new turn looks again whether the scope's recently finished turns are published. */
const RECENT_POLL_MS = 100;

/**
 * A new turn is admitted once the turns other sessions of its scope finished moments ago (within
 * OPTCHAT_ADMISSION_WAIT_MS) are published, or once they are that old: its snapshot is pinned at admission, so
 * `opencode run` started right after another would otherwise not see the turn that just ended. Bounded by the setting
 * from each turn's end, so a stalled compactor delays only prompts that follow a finished turn closely; with no live
 * compactor worker at all (none beat within WORKER_ALIVE_SECONDS) nobody would publish it, and nothing waits.
 */
async function awaitRecentPublications(
  deps: { readonly pool: Pool; readonly config: Pick<Config, "admissionWaitMs"> },
  input: { sessionId: string; turnId: string },
): Promise<void> {
  const withinMs = deps.config.admissionWaitMs;
  if (withinMs === 0) return;
  // Never past the setting from the prompt's arrival: turns other sessions finish meanwhile must not extend it.
  const giveUpAt = performance.now() + withinMs;
  for (;;) {
    const remaining = await recentUnpublishedMs(deps.pool, { ...input, withinMs, aliveSeconds: WORKER_ALIVE_SECONDS });
    const left = Math.min(remaining, giveUpAt - performance.now());
    if (left <= 0) return;
    await new Promise((resolve) => setTimeout(resolve, Math.min(RECENT_POLL_MS, left)));
  }
}

/**
 * Records the turn's outcome once, fixing its records (the runs its publication will cover), and, in the same
 * transaction, schedules the session's next publication if this made it ready (the job row is the outbox: a crash
 * after the commit loses nothing, a crash before it changes nothing). A turn whose cover is not summarized yet, or
 * that waits for an earlier turn of its session, is scheduled by the commit that completes that instead.
 */
export async function finishTurn(
  deps: { readonly pool: Pool; readonly jobQueue: () => Promise<JobInserter> },
  ctx: TurnContext,
  outcome: TurnOutcome,
): Promise<{ turn: Turn; finished: boolean }> {
  const notAdmitted = () =>
    new InputInvalidError("finishTurn", [
      { field: "turnId", problem: `turn ${ctx.turnId} of session ${ctx.sessionId} was not admitted` },
    ]);
  const boss = await deps.jobQueue();
  return await withTransaction(deps.pool, async (tx) => {
    // The session tree's lock first, like every writer of the tree: records sealed and nodes built by other
    // transactions are then either committed before the runs and the readiness are read here, or they see this
    // turn finished when they check readiness themselves. The turn is finished only in the session's current
    // generation (finishTurnRow checks it), whose tree this locks.
    const locked = await lockCurrentSessionTree(tx, ctx.sessionId);
    const result = await finishTurnRow(tx, ctx.sessionId, ctx.turnId, outcome);
    if (!result) throw notAdmitted();
    // A generation that changed between the two statements (a rewind) is not scheduled from here: the start-up sweep
    // schedules a finished turn whose publication has no job (compactor/worker.ts).
    if (result.finished && locked && locked.generation === result.turn.generation) {
      await schedulePublicationIfReady(boss, tx, {
        treeId: locked.treeId,
        sessionId: result.turn.sessionId,
        generation: result.turn.generation,
        // Read under the lock just now; this transaction builds no leaf.
        builtLeaves: locked.builtLeaves,
      });
    }
    return result;
  });
}
