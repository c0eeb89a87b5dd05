/**
 * Snapshots invalidated by a retention epoch (seed 000 §12, issue 15 item 4): a deletion or revocation bumps its
 * scope's epoch, and a turn pinned before it is re-pinned (an active turn) or refused (a finished one) before any read.
 */
import type { Queryable } from "./db.js";
import { TURN_COLUMNS, type Turn, type TurnRow, toTurn } from "./turns.js";

export interface SnapshotStanding {
  /** The session was forgotten (it is a tombstone). */
  readonly sessionDeleted: boolean;
  /** The session's scope now (a revoked session moved to its isolated scope). */
  readonly scopeId: string;
  /** The epoch of the scope the turn pinned, now. */
  readonly pinnedScopeEpoch: number;
}

/** One primary-key read per request: where the turn's session and pinned scope stand now. */
export async function readSnapshotStanding(db: Queryable, turn: Turn): Promise<SnapshotStanding | undefined> {
  return await readStanding(db, turn.sessionId, turn.snapshot.scopeId);
}

/** Where a session and a scope it pinned stand now. */
export async function readStanding(
  db: Queryable,
  sessionId: string,
  pinnedScopeId: string,
): Promise<SnapshotStanding | undefined> {
  const result = await db.query<{ deleted: boolean; scope_id: string; epoch: number }>({
    name: "optchat.turns.standing",
    text: `SELECT s.deleted_at IS NOT NULL AS deleted, s.scope_id, sc.retention_epoch AS epoch
             FROM optchat.sessions s, optchat.scopes sc
            WHERE s.session_id = $1::text AND sc.scope_id = $2::text`,
    values: [sessionId, pinnedScopeId],
  });
  const row = result.rows[0];
  return row ? { sessionDeleted: row.deleted, scopeId: row.scope_id, pinnedScopeEpoch: row.epoch } : undefined;
}

/**
 * Re-pins an active turn's snapshot as admitTurn would pin it now (store/turns.ts), in the session's current scope:
 * the shared view's latest revision and publication count, the scope's policy revision and epoch; its own view
 * revision is pinned again at its next assembly. A session now isolated stops publishing the turn. Returns the turn
 * as re-pinned, or undefined when it is no longer active (a finished turn's snapshot is not rewritten).
 */
export async function repinActiveTurn(db: Queryable, turn: Turn): Promise<Turn | undefined> {
  const result = await db.query<TurnRow>(
    `UPDATE optchat.turns t
        SET scope_id = sc.scope_id, policy_revision = sc.policy_revision, retention_epoch = sc.retention_epoch,
            revision_epoch = (SELECT epoch FROM optchat.revision_clock), shared_tree_id = st.tree_id, shared_view_revision = nullif(st.view_revision, 0),
            publication_high_water = coalesce(st.leaf_count, 0), own_view_revision = NULL,
            publishes = t.publishes AND sc.kind <> 'isolated',
            publication_state = CASE WHEN sc.kind = 'isolated' THEN 'none' ELSE t.publication_state END
       FROM optchat.sessions s
       JOIN optchat.scopes sc ON sc.scope_id = s.scope_id
       LEFT JOIN optchat.trees st ON st.kind = 'shared' AND st.scope_id = sc.scope_id AND sc.kind <> 'isolated'
      WHERE s.session_id = t.session_id AND t.session_id = $1::text AND t.generation = $2::int AND t.turn_id = $3::text
        AND t.state = 'active'
     RETURNING ${TURN_COLUMNS.split(",")
       .map((c) => `t.${c.trim()}`)
       .join(", ")}`,
    [turn.sessionId, turn.generation, turn.turnId],
  );
  return result.rows[0] ? toTurn(result.rows[0]) : undefined;
}
