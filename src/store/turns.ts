import type { Queryable } from "./db.js";

export type TurnState = "active" | "completed" | "interrupted" | "failed";
export type TurnOutcome = Exclude<TurnState, "active">;

interface TurnRow {
  session_id: string;
  generation: number;
  turn_id: string;
  state: TurnState;
  admitted_at: Date;
  finished_at: Date | null;
  query: string | null;
  publishes: boolean;
  scope_id: string;
  policy_revision: number;
  retention_epoch: number;
  shared_tree_id: number | null;
  shared_view_revision: number | null;
  publication_high_water: number;
  own_boundary: number;
  own_view_revision: number | null;
}

/** What a turn may see, pinned at admission (seed 000 §9). */
export interface Snapshot {
  readonly scopeId: string;
  readonly policyRevision: number;
  readonly retentionEpoch: number;
  readonly sharedTreeId: number | null;
  readonly sharedViewRevision: number | null;
  /** Publications numbered below this are visible. */
  readonly publicationHighWater: number;
  readonly ownGeneration: number;
  /** Own records [0, ownBoundary) are the session's earlier history; the turn's own records come after. */
  readonly ownBoundary: number;
  readonly ownViewRevision: number | null;
}

export interface Turn {
  readonly sessionId: string;
  readonly generation: number;
  readonly turnId: string;
  readonly state: TurnState;
  readonly admittedAt: Date;
  readonly finishedAt: Date | null;
  readonly query: string | null;
  readonly publishes: boolean;
  readonly snapshot: Snapshot;
}

function toTurn(row: TurnRow): Turn {
  return {
    sessionId: row.session_id,
    generation: row.generation,
    turnId: row.turn_id,
    state: row.state,
    admittedAt: row.admitted_at,
    finishedAt: row.finished_at,
    query: row.query,
    publishes: row.publishes,
    snapshot: {
      scopeId: row.scope_id,
      policyRevision: row.policy_revision,
      retentionEpoch: row.retention_epoch,
      sharedTreeId: row.shared_tree_id,
      sharedViewRevision: row.shared_view_revision,
      publicationHighWater: row.publication_high_water,
      ownGeneration: row.generation,
      ownBoundary: row.own_boundary,
      ownViewRevision: row.own_view_revision,
    },
  };
}

const TURN_COLUMNS = `session_id, generation, turn_id, state, admitted_at, finished_at, query, publishes, scope_id,
  policy_revision, retention_epoch, shared_tree_id, shared_view_revision, publication_high_water, own_boundary,
  own_view_revision`;

/**
 * Admits a turn, pinning its snapshot in one statement: the scope's policy revision and retention epoch, its shared
 * tree's current view revision and publication count, and the session's own boundary (the records before the turn's
 * first record; all records so far when the turn has none yet). Re-admitting an existing turn returns it unchanged.
 */
export async function admitTurn(
  db: Queryable,
  input: { sessionId: string; turnId: string; query: string | null; publishes: boolean },
): Promise<{ turn: Turn; created: boolean }> {
  const inserted = await db.query<TurnRow>(
    `INSERT INTO optchat.turns (session_id, generation, turn_id, state, query, publishes, scope_id, policy_revision,
                                retention_epoch, shared_tree_id, shared_view_revision, publication_high_water,
                                own_boundary)
     SELECT s.session_id, s.current_generation, $2::text, 'active', $3::text, $4::boolean AND sc.kind <> 'isolated',
            sc.scope_id, sc.policy_revision, sc.retention_epoch, st.tree_id, nullif(st.view_revision, 0),
            coalesce(st.leaf_count, 0),
            coalesce((SELECT min(r.seq) FROM optchat.records r
                       WHERE r.session_id = s.session_id AND r.generation = s.current_generation AND r.turn_id = $2::text),
                     g.next_seq)
       FROM optchat.sessions s
       JOIN optchat.scopes sc ON sc.scope_id = s.scope_id
       JOIN optchat.generations g ON g.session_id = s.session_id AND g.generation = s.current_generation
       LEFT JOIN optchat.trees st ON st.kind = 'shared' AND st.scope_id = sc.scope_id AND sc.kind <> 'isolated'
      WHERE s.session_id = $1::text
     ON CONFLICT (session_id, generation, turn_id) DO NOTHING
     RETURNING ${TURN_COLUMNS}`,
    [input.sessionId, input.turnId, input.query, input.publishes],
  );
  if (inserted.rows[0]) return { turn: toTurn(inserted.rows[0]), created: true };
  const existing = await findTurn(db, input.sessionId, input.turnId);
  if (!existing) throw new Error(`admitTurn: session ${input.sessionId} vanished`);
  return { turn: existing, created: false };
}

/** A turn of a given generation (current or not). */
export async function findTurnInGeneration(
  db: Queryable,
  sessionId: string,
  generation: number,
  turnId: string,
): Promise<Turn | undefined> {
  const result = await db.query<TurnRow>(
    `SELECT ${TURN_COLUMNS} FROM optchat.turns WHERE session_id = $1::text AND generation = $2::int AND turn_id = $3::text`,
    [sessionId, generation, turnId],
  );
  return result.rows[0] ? toTurn(result.rows[0]) : undefined;
}

/** The turn in the session's current generation. */
export async function findTurn(db: Queryable, sessionId: string, turnId: string): Promise<Turn | undefined> {
  const result = await db.query<TurnRow>(
    `SELECT ${TURN_COLUMNS.split(",")
      .map((c) => `t.${c.trim()}`)
      .join(", ")}
       FROM optchat.turns t JOIN optchat.sessions s ON s.session_id = t.session_id AND s.current_generation = t.generation
      WHERE t.session_id = $1::text AND t.turn_id = $2::text`,
    [sessionId, turnId],
  );
  return result.rows[0] ? toTurn(result.rows[0]) : undefined;
}

/**
 * Records a terminal outcome once. An active turn takes the outcome; a finished turn keeps its first outcome (a late
 * "completed" never overwrites an interruption or a failure). Returns the turn as stored and whether this call
 * finished it.
 */
export async function finishTurn(
  db: Queryable,
  sessionId: string,
  turnId: string,
  outcome: TurnOutcome,
): Promise<{ turn: Turn; finished: boolean } | undefined> {
  const updated = await db.query<TurnRow>(
    `UPDATE optchat.turns t SET state = $3::text, finished_at = now()
       FROM optchat.sessions s
      WHERE t.session_id = $1::text AND t.turn_id = $2::text AND t.state = 'active'
        AND s.session_id = t.session_id AND s.current_generation = t.generation
     RETURNING ${TURN_COLUMNS.split(",")
       .map((c) => `t.${c.trim()}`)
       .join(", ")}`,
    [sessionId, turnId, outcome],
  );
  if (updated.rows[0]) return { turn: toTurn(updated.rows[0]), finished: true };
  const existing = await findTurn(db, sessionId, turnId);
  return existing ? { turn: existing, finished: false } : undefined;
}

/** Pins the own view revision used by the turn's context assembly (first assembly wins). */
export async function pinOwnViewRevision(db: Queryable, turn: Turn, revision: number): Promise<number> {
  const result = await db.query<{ own_view_revision: number }>(
    `UPDATE optchat.turns SET own_view_revision = coalesce(own_view_revision, $4::int)
      WHERE session_id = $1::text AND generation = $2::int AND turn_id = $3::text RETURNING own_view_revision`,
    [turn.sessionId, turn.generation, turn.turnId, revision],
  );
  return result.rows[0]?.own_view_revision ?? revision;
}

/** The seq range of a turn's records: [min, max + 1), or undefined when it has none. */
export async function turnRecordRange(
  db: Queryable,
  sessionId: string,
  generation: number,
  turnId: string,
): Promise<{ start: number; end: number; count: number; lastAt: Date } | undefined> {
  const result = await db.query<{ start: number | null; end: number | null; count: number; last_at: Date | null }>(
    `SELECT min(seq) AS start, max(seq) + 1 AS end, count(*)::int AS count, max(occurred_at) AS last_at
       FROM optchat.records WHERE session_id = $1::text AND generation = $2::int AND turn_id = $3::text`,
    [sessionId, generation, turnId],
  );
  const row = result.rows[0];
  return row && row.start !== null && row.end !== null && row.last_at !== null
    ? { start: Number(row.start), end: Number(row.end), count: row.count, lastAt: row.last_at }
    : undefined;
}

/** The latest finished turn of the session generation admitted before `turn` (the previous exchange). */
export async function findPreviousTurn(db: Queryable, turn: Turn): Promise<Turn | undefined> {
  const result = await db.query<TurnRow>(
    `SELECT ${TURN_COLUMNS} FROM optchat.turns
      WHERE session_id = $1::text AND generation = $2::int AND state <> 'active' AND admitted_at < $3::timestamptz
        AND turn_id <> $4::text
      ORDER BY admitted_at DESC LIMIT 1`,
    [turn.sessionId, turn.generation, turn.admittedAt, turn.turnId],
  );
  return result.rows[0] ? toTurn(result.rows[0]) : undefined;
}

/** Finished turns that should be published and are not, with no failure row either: their job may have been lost. */
export async function findUnpublishedFinishedTurns(
  db: Queryable,
  limit: number,
): Promise<{ sessionId: string; generation: number; turnId: string }[]> {
  const result = await db.query<{ session_id: string; generation: number; turn_id: string }>(
    `SELECT t.session_id, t.generation, t.turn_id FROM optchat.turns t
      WHERE t.state <> 'active' AND t.publishes
        AND NOT EXISTS (SELECT 1 FROM optchat.publications p
                         WHERE p.session_id = t.session_id AND p.generation = t.generation AND p.turn_id = t.turn_id)
        AND EXISTS (SELECT 1 FROM optchat.records r
                     WHERE r.session_id = t.session_id AND r.generation = t.generation AND r.turn_id = t.turn_id)
        -- pg-boss's table: publication jobs carry "<session>:<generation>:<turn>" as singleton_key (compactor/queue.ts)
        AND NOT EXISTS (SELECT 1 FROM pgboss.job j
                         WHERE j.name = 'optchat-publish' AND j.state < 'completed'
                           AND j.singleton_key = t.session_id || ':' || t.generation || ':' || t.turn_id)
      LIMIT $1::int`,
    [limit],
  );
  return result.rows.map((row) => ({ sessionId: row.session_id, generation: row.generation, turnId: row.turn_id }));
}

/** The session's turns that have no outcome yet, oldest first (reconciliation after a killed process). */
export async function listActiveTurns(db: Queryable, sessionId: string): Promise<Turn[]> {
  const result = await db.query<TurnRow>(
    `SELECT ${TURN_COLUMNS} FROM optchat.turns t
      WHERE t.session_id = $1::text AND t.state = 'active'
        AND t.generation = (SELECT current_generation FROM optchat.sessions WHERE session_id = $1::text)
      ORDER BY t.admitted_at`,
    [sessionId],
  );
  return result.rows.map(toTurn);
}
