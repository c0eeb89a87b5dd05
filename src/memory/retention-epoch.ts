/**
 * The retention-epoch check every read of a turn goes through (seed 000 §12: "a new request using an invalid snapshot
 * must rebuild its context or fail"). A deletion or revocation bumps its scope's epoch (src/memory/forget.ts); a turn
 * pinned at an earlier epoch, or in a scope its session has left, is re-pinned when it is still active (the request
 * then assembles from the rebuilt views: its context is rebuilt) and refused when it is finished. A turn of a
 * forgotten session is refused. Either way removed text is never served from the old snapshot.
 */
import { OptchatError } from "../core/errors.js";
import type { Pool } from "../store/db.js";
import { readSnapshotStanding, repinActiveTurn, type SnapshotStanding } from "../store/repin.js";
import { findTurn, type Turn } from "../store/turns.js";

export async function currentTurn(pool: Pool, turn: Turn): Promise<Turn> {
  const standing = await readSnapshotStanding(pool, turn);
  if (!standing || standing.sessionDeleted) throw sessionDeleted(turn.sessionId);
  if (!isStale(turn, standing)) return turn;
  // A turn the caller holds may be older than its row: re-pinned once, a turn keeps that snapshot for its later steps.
  const stored = await findTurn(pool, turn.sessionId, turn.turnId);
  if (stored && stored.generation === turn.generation) {
    const now = await readSnapshotStanding(pool, stored);
    if (now && !isStale(stored, now)) return stored;
  }
  const repinned = await repinActiveTurn(pool, turn);
  if (!repinned) {
    throw new OptchatError(
      "SNAPSHOT_RETIRED",
      `Turn ${turn.turnId} of session ${turn.sessionId} was pinned before memory was deleted or unshared in scope ${turn.snapshot.scopeId}, and it is finished, so its snapshot cannot be rebuilt: read as a new turn (or with a scope reader, \`--scope\`)`,
      { sessionId: turn.sessionId, turnId: turn.turnId, scopeId: turn.snapshot.scopeId },
    );
  }
  return repinned;
}

function isStale(turn: Turn, standing: SnapshotStanding): boolean {
  return standing.scopeId !== turn.snapshot.scopeId || turn.snapshot.retentionEpoch < standing.pinnedScopeEpoch;
}

export function sessionDeleted(sessionId: string): OptchatError {
  return new OptchatError(
    "SESSION_DELETED",
    `Session ${sessionId} was deleted from memory (optchat forget, or OpenCode's session delete with OPTCHAT_ON_SESSION_DELETE=delete): nothing of it is kept to read or write`,
    { sessionId },
  );
}
