import type { RecordRun } from "../core/turn-records.js";
import type { Queryable } from "./db.js";
import { openJobExists, PUBLICATION_JOB_KEY_SQL, PUBLISH_QUEUE } from "./job-queue.js";

export type TurnState = "active" | "completed" | "interrupted" | "failed";
export type TurnOutcome = Exclude<TurnState, "active">;
/** pending: to be published (active, or waiting for its cover or an earlier turn); published; none: nothing to publish. */
export type PublicationState = "pending" | "published" | "none";

export interface TurnRow {
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
  revision_epoch: number;
  shared_tree_id: number | null;
  shared_view_revision: number | null;
  publication_high_water: number;
  own_boundary: number;
  own_view_revision: number | null;
  admission_seq: string;
  run_starts: string[] | null;
  run_ends: string[] | null;
  publication_state: PublicationState;
}

/** What a turn may see, pinned at admission (seed 000 §9). */
export interface Snapshot {
  readonly scopeId: string;
  readonly policyRevision: number;
  readonly retentionEpoch: number;
  /** The revision clock at admission (migration 014): which node revisions the turn's reads resolve to. */
  readonly revisionEpoch: number;
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
  /** Admission order within the session (a session's turns are published in this order). */
  readonly admissionSeq: number;
  /** The turn's records, fixed when it finished (null while active): maximal runs of consecutive seqs. */
  readonly runs: readonly RecordRun[] | null;
  readonly publicationState: PublicationState;
}

export function toTurn(row: TurnRow): Turn {
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
      revisionEpoch: row.revision_epoch,
      sharedTreeId: row.shared_tree_id,
      sharedViewRevision: row.shared_view_revision,
      publicationHighWater: row.publication_high_water,
      ownGeneration: row.generation,
      ownBoundary: row.own_boundary,
      ownViewRevision: row.own_view_revision,
    },
    admissionSeq: Number(row.admission_seq),
    runs:
      row.run_starts === null || row.run_ends === null
        ? null
        : row.run_starts.map((start, k) => ({ start: Number(start), end: Number(row.run_ends?.[k]) })),
    publicationState: row.publication_state,
  };
}

export const TURN_COLUMNS = `session_id, generation, turn_id, state, admitted_at, finished_at, query, publishes, scope_id,
  policy_revision, retention_epoch, revision_epoch, shared_tree_id, shared_view_revision, publication_high_water,
  own_boundary, own_view_revision, admission_seq, run_starts, run_ends, publication_state`;

/**
 * Admits a turn, pinning its snapshot in one statement: the scope's policy revision and retention epoch, the revision
 * clock (in the same statement as the shared view, so the two agree: migration 014), its shared
 * tree's current view revision and publication count, and the session's own boundary (the records before the turn's
 * first record; all records so far when the turn has none yet). Re-admitting an existing turn returns it unchanged.
 * A subagent's session (one with a parent) and a private one (migration 016) never publish, whatever `publishes` says. Undefined when the session
 * does not exist.
 */
export async function admitTurn(
  db: Queryable,
  input: { sessionId: string; turnId: string; query: string | null; publishes: boolean },
): Promise<{ turn: Turn; created: boolean } | undefined> {
  const inserted = await db.query<TurnRow>(
    `INSERT INTO optchat.turns (session_id, generation, turn_id, state, query, publishes, scope_id, policy_revision,
                                retention_epoch, revision_epoch, shared_tree_id, shared_view_revision,
                                publication_high_water, own_boundary, publication_state)
     SELECT s.session_id, s.current_generation, $2::text, 'active', $3::text,
            $4::boolean AND s.parent_session_id IS NULL AND sc.kind <> 'isolated' AND s.visibility = 'shared',
            sc.scope_id, sc.policy_revision, sc.retention_epoch, rc.epoch, st.tree_id, nullif(st.view_revision, 0),
            coalesce(st.leaf_count, 0),
            coalesce((SELECT min(r.seq) FROM optchat.records r
                       WHERE r.session_id = s.session_id AND r.generation = s.current_generation AND r.turn_id = $2::text),
                     g.next_seq),
            CASE WHEN $4::boolean AND s.parent_session_id IS NULL AND sc.kind <> 'isolated' AND s.visibility = 'shared' THEN 'pending' ELSE 'none' END
       FROM optchat.sessions s
       JOIN optchat.scopes sc ON sc.scope_id = s.scope_id
       JOIN optchat.generations g ON g.session_id = s.session_id AND g.generation = s.current_generation
       CROSS JOIN optchat.revision_clock rc
       LEFT JOIN optchat.trees st ON st.kind = 'shared' AND st.scope_id = sc.scope_id AND sc.kind <> 'isolated'
      WHERE s.session_id = $1::text
     ON CONFLICT (session_id, generation, turn_id) DO NOTHING
     RETURNING ${TURN_COLUMNS}`,
    [input.sessionId, input.turnId, input.query, input.publishes],
  );
  if (inserted.rows[0]) return { turn: toTurn(inserted.rows[0]), created: true };
  const existing = await findTurn(db, input.sessionId, input.turnId);
  return existing ? { turn: existing, created: false } : undefined;
}

/**
 * Milliseconds until every turn of another session of `sessionId`'s scope that finished less than `withinMs` ago and
 * still waits for its publication is `withinMs` old; 0 when there is none, when no compactor worker has beaten within
 * `aliveSeconds` (nobody would publish it), or when `turnId` is admitted already (a re-admission never waits).
 */
export async function recentUnpublishedMs(
  db: Queryable,
  input: { sessionId: string; turnId: string; withinMs: number; aliveSeconds: number },
): Promise<number> {
  const result = await db.query<{ remaining: number }>(
    `SELECT coalesce(ceil(extract(epoch FROM max(t.finished_at + w.span) - clock_timestamp()) * 1000), 0)::int AS remaining
       FROM optchat.sessions s
      CROSS JOIN LATERAL (SELECT make_interval(secs => $3::int / 1000.0) AS span) w
       JOIN optchat.turns t ON t.scope_id = s.scope_id AND t.session_id <> s.session_id
      WHERE s.session_id = $1::text
        AND t.publication_state = 'pending' AND t.finished_at IS NOT NULL
        AND t.finished_at > clock_timestamp() - w.span
        AND EXISTS (SELECT 1 FROM optchat.compactor_workers cw
                     WHERE cw.stopped_at IS NULL AND cw.last_beat_at > clock_timestamp() - make_interval(secs => $4::int))
        AND NOT EXISTS (SELECT 1 FROM optchat.turns o
                         WHERE o.session_id = s.session_id AND o.generation = s.current_generation
                           AND o.turn_id = $2::text)`,
    [input.sessionId, input.turnId, input.withinMs, input.aliveSeconds],
  );
  return Math.max(0, result.rows[0]?.remaining ?? 0);
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
 * "completed" never overwrites an interruption or a failure). The same statement fixes the turn's records: those
 * sealed by now, as maximal runs of consecutive seqs (gaps and islands: seq minus its rank is constant along a run).
 * They are what its publication will cover; a turn without records has nothing to publish. The caller holds the
 * session tree's lock, so no record commits between this and its readiness check, and the runs include every record
 * of the turn committed before it. Returns the turn as stored and whether this call finished it.
 */
export async function finishTurn(
  db: Queryable,
  sessionId: string,
  turnId: string,
  outcome: TurnOutcome,
): Promise<{ turn: Turn; finished: boolean } | undefined> {
  const updated = await db.query<TurnRow>(
    `UPDATE optchat.turns t SET state = $3::text, finished_at = now(),
            run_starts = coalesce(runs.starts, '{}'), run_ends = coalesce(runs.ends, '{}'),
            publication_state = CASE WHEN runs.starts IS NULL AND t.publication_state = 'pending' THEN 'none'
                                     ELSE t.publication_state END
       FROM optchat.sessions s
       LEFT JOIN LATERAL (
         SELECT array_agg(run_start ORDER BY run_start) AS starts, array_agg(run_end ORDER BY run_start) AS ends
           FROM (SELECT min(seq) AS run_start, max(seq) + 1 AS run_end
                   FROM (SELECT r.seq, r.seq - row_number() OVER (ORDER BY r.seq) AS island
                           FROM optchat.records r
                          WHERE r.session_id = s.session_id AND r.generation = s.current_generation
                            AND r.turn_id = $2::text) numbered
                  GROUP BY island) islands
       ) runs ON true
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

/**
 * The session generation's next turn to publish: its first pending turn in admission order (a session's turns are
 * published in their own order). Active or finished; undefined when nothing is pending.
 */
export async function nextTurnToPublish(
  db: Queryable,
  sessionId: string,
  generation: number,
): Promise<Turn | undefined> {
  const result = await db.query<TurnRow>(
    `SELECT ${TURN_COLUMNS} FROM optchat.turns
      WHERE session_id = $1::text AND generation = $2::int AND publication_state = 'pending'
      ORDER BY admission_seq LIMIT 1`,
    [sessionId, generation],
  );
  return result.rows[0] ? toTurn(result.rows[0]) : undefined;
}

/** Marks a turn published (in the transaction that inserts its publication) or as having nothing to publish. */
export async function setPublicationState(
  db: Queryable,
  turn: { sessionId: string; generation: number; turnId: string },
  state: Exclude<PublicationState, "pending">,
): Promise<void> {
  await db.query(
    `UPDATE optchat.turns SET publication_state = $4::text
      WHERE session_id = $1::text AND generation = $2::int AND turn_id = $3::text`,
    [turn.sessionId, turn.generation, turn.turnId, state],
  );
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

/**
 * Session generations whose next turn to publish is finished and has no open publication job: the job that should
 * publish it may have been lost (an operator cleared the queue, a job gave up). For the start-up sweep.
 */
export async function findSessionsWithFinishedPendingTurns(
  db: Queryable,
  limit: number,
): Promise<{ sessionId: string; generation: number }[]> {
  const result = await db.query<{ session_id: string; generation: number }>(
    `SELECT DISTINCT t.session_id, t.generation FROM optchat.turns t
      WHERE t.publication_state = 'pending' AND t.state <> 'active'
        AND NOT ${openJobExists(PUBLISH_QUEUE, PUBLICATION_JOB_KEY_SQL("t.session_id", "t.generation", "t.turn_id"))}
      LIMIT $1::int`,
    [limit],
  );
  return result.rows.map((row) => ({ sessionId: row.session_id, generation: row.generation }));
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
