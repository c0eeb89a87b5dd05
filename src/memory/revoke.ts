/**
 * Revoking sharing and archiving (issue 15 items 4 and 5; docs/deletion.md).
 *
 * Revoking (a session moved to isolated sharing) removes the session from its scope's shared memory exactly as a
 * deletion does (its publications retired, the shared ancestors rebuilt, the scope's epoch bumped: forget.ts
 * retireFromScope), but keeps the session's own records and tree: it goes on as an isolated session.
 *
 * Archiving only hides: the session leaves `optchat sessions`, memory_sessions and the browser's session lists, and
 * nothing else changes (its publications stay in the shared view and search). Hiding it from the shared view too would
 * need the same rebuild as a revocation (a summary cannot drop one contribution, seed 000 §7), which an archive, cheap
 * and reversible, should not cost; revoke or forget it for that.
 */
import { OptchatError } from "../core/errors.js";
import { withTransaction } from "../store/db.js";
import { bumpRetentionEpochs, lockForDeletion } from "../store/deletion.js";
import { moveToIsolatedScope, setArchived } from "../store/revocation.js";
import { findSession } from "../store/sessions.js";
import { type ForgetDeps, retireFromScope } from "./forget.js";
import { sessionDeleted } from "./retention-epoch.js";

export interface IsolateReport {
  readonly sessionId: string;
  /** The scope it left, and the isolated scope it is in now (undefined: it was isolated already). */
  readonly fromScope: string;
  readonly toScope: string | undefined;
  readonly publicationsRetired: number;
  readonly sharedNodesRemoved: number;
}

/** Moves a session to isolated sharing, retiring its publications; one transaction. */
export async function isolateSession(deps: ForgetDeps, sessionId: string): Promise<IsolateReport> {
  const boss = await deps.jobQueue();
  return await withTransaction(deps.pool, async (tx) => {
    const session = await findSession(tx, sessionId);
    if (!session) throw new OptchatError("SESSION_NOT_FOUND", `No session ${sessionId}`, { sessionId });
    await lockForDeletion(tx, [session.scopeId], [sessionId]);
    const locked = await findSession(tx, sessionId);
    if (!locked || locked.deletedAt !== null) throw sessionDeleted(sessionId);
    const retired = await retireFromScope(deps, boss, tx, locked.scopeId, [sessionId], "revoked");
    const toScope = await moveToIsolatedScope(tx, sessionId);
    if (toScope) await bumpRetentionEpochs(tx, [locked.scopeId]);
    return {
      sessionId,
      fromScope: locked.scopeId,
      toScope,
      publicationsRetired: retired.publications,
      sharedNodesRemoved: retired.nodesRemoved,
    };
  });
}

/** Archives (hides) or unarchives a session; SESSION_NOT_FOUND for an unknown or forgotten one. */
export async function archiveSession(
  deps: Pick<ForgetDeps, "pool">,
  sessionId: string,
  archived: boolean,
): Promise<void> {
  if (!(await setArchived(deps.pool, sessionId, archived)))
    throw new OptchatError(
      "SESSION_NOT_FOUND",
      `No live session ${sessionId} to ${archived ? "archive" : "unarchive"}`,
      {
        sessionId,
      },
    );
}
