import type { JobInserter } from "../compactor/queue.js";
import { schedulePublicationIfReady } from "../compactor/schedule-publication.js";
import { InputInvalidError, OptchatError } from "../core/errors.js";
import { type Pool, withTransaction } from "../store/db.js";
import { findSession } from "../store/sessions.js";
import { lockTree } from "../store/tree-changes.js";
import {
  admitTurn as admitTurnRow,
  findTurn,
  finishTurn as finishTurnRow,
  type Turn,
  type TurnOutcome,
} from "../store/turns.js";
import type { TurnContext } from "./reader.js";

/** Admits a turn and pins its snapshot (seed 000 §9); re-admitting returns the same turn. */
export async function admitTurn(
  deps: { readonly pool: Pool },
  input: { sessionId: string; turnId: string; query?: string; publishes?: boolean },
): Promise<Turn> {
  const session = await findSession(deps.pool, input.sessionId);
  if (!session) throw new OptchatError("SESSION_NOT_FOUND", `No session ${input.sessionId}`, { field: "sessionId" });
  const { turn } = await admitTurnRow(deps.pool, {
    sessionId: session.sessionId,
    turnId: input.turnId,
    query: input.query ?? null,
    // Subagent sessions are recorded but not published: their report reaches the parent as a tool result.
    publishes: (input.publishes ?? true) && session.parentSessionId === null,
  });
  return turn;
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
  const admitted = await findTurn(deps.pool, ctx.sessionId, ctx.turnId);
  if (!admitted) throw notAdmitted();
  const boss = await deps.jobQueue();
  return await withTransaction(deps.pool, async (tx) => {
    // The session tree's lock first, like every writer of the tree: records sealed and nodes built by other
    // transactions are then either committed before the runs and the readiness are read here, or they see this
    // turn finished when they check readiness themselves.
    const locked = await lockTree(tx, { sessionId: admitted.sessionId, generation: admitted.generation });
    const result = await finishTurnRow(tx, ctx.sessionId, ctx.turnId, outcome);
    if (!result) throw notAdmitted();
    if (result.finished && locked) {
      await schedulePublicationIfReady(boss, tx, {
        treeId: locked.tree.treeId,
        sessionId: result.turn.sessionId,
        generation: result.turn.generation,
      });
    }
    return result;
  });
}
