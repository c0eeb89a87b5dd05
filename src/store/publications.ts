import type { NodeAddress } from "../core/tree.js";
import type { Queryable } from "./db.js";
import type { TurnOutcome } from "./turns.js";
import { publishedInSnapshot, visiblePublications } from "./visibility.js";

interface PublicationRow {
  scope_id: string;
  publication_seq: number;
  session_id: string;
  generation: number;
  turn_id: string;
  start_seq: number;
  end_seq_exclusive: number;
  outcome: TurnOutcome;
  completed_at: Date;
  published_at: Date;
  cover_levels: number[];
  cover_idxs: number[];
  retired_reason: "deleted" | "revoked" | "reverted" | null;
}

/** A publication as stored: the new publication with the number and time publishing gave it. */
export interface Publication extends NewPublication {
  readonly publicationSeq: number;
  readonly publishedAt: Date;
  /** Retired (its session deleted, or its sharing revoked): keeps its number, shows a removed marker (migration 010). */
  readonly retired: "deleted" | "revoked" | "reverted" | null;
}

function toPublication(row: PublicationRow): Publication {
  return {
    scopeId: row.scope_id,
    publicationSeq: Number(row.publication_seq),
    sessionId: row.session_id,
    generation: row.generation,
    turnId: row.turn_id,
    startSeq: Number(row.start_seq),
    endSeqExclusive: Number(row.end_seq_exclusive),
    outcome: row.outcome,
    completedAt: row.completed_at,
    publishedAt: row.published_at,
    sourceCover: row.cover_levels.map((level, k) => ({ level, index: Number(row.cover_idxs[k]) })),
    retired: row.retired_reason,
  };
}

const COLUMNS = `scope_id, publication_seq, session_id, generation, turn_id, start_seq, end_seq_exclusive, outcome,
  completed_at, published_at, cover_levels, cover_idxs, retired_reason`;

export interface NewPublication {
  readonly scopeId: string;
  readonly sessionId: string;
  readonly generation: number;
  readonly turnId: string;
  readonly startSeq: number;
  readonly endSeqExclusive: number;
  readonly outcome: TurnOutcome;
  readonly completedAt: Date;
  /** Session nodes, in order, exactly tiling [startSeq, endSeqExclusive). */
  readonly sourceCover: readonly NodeAddress[];
}

/**
 * Allocates the scope's next publication number and inserts the publication, in the caller's (SERIALIZABLE)
 * transaction. The number comes from the scope row (UPDATE … RETURNING), so it is gap-free: a transaction that does
 * not commit gives its number back. Returns undefined when the turn was already published (unique per turn).
 */
export async function insertPublication(db: Queryable, input: NewPublication): Promise<Publication | undefined> {
  const existing = await findPublicationOfTurn(db, input.scopeId, input.sessionId, input.generation, input.turnId);
  if (existing) return undefined;
  const result = await db.query<PublicationRow>(
    `WITH seq AS (
       UPDATE optchat.scopes SET next_publication_seq = next_publication_seq + 1
        WHERE scope_id = $1::text RETURNING next_publication_seq - 1 AS publication_seq
     )
, publication AS (
       INSERT INTO optchat.publications (scope_id, publication_seq, session_id, generation, turn_id, start_seq,
                                         end_seq_exclusive, outcome, completed_at, cover_levels, cover_idxs)
       SELECT $1::text, seq.publication_seq, $2::text, $3::int, $4::text, $5::bigint, $6::bigint, $7::text,
              $8::timestamptz, $9::int[], $10::bigint[]
         FROM seq
       RETURNING ${COLUMNS}
     ),
     -- BM25 statistics (migrations/007) count a turn's records once, when it is published: under the scope row's lock
     -- taken above, so the scope's statistics rows have one writer at a time, and off the ingest path.
     turn_records AS (
       SELECT r.search FROM publication p
         JOIN optchat.records r ON r.session_id = p.session_id AND r.generation = p.generation AND r.turn_id = p.turn_id
          AND r.seq >= p.start_seq AND r.seq < p.end_seq_exclusive
        WHERE r.search IS NOT NULL
     ),
     term_counts AS (
       INSERT INTO optchat.search_term_counts AS c (scope_id, term, documents)
       SELECT $1::text, u.lexeme, count(*) FROM turn_records tr CROSS JOIN LATERAL unnest(tr.search) AS u(lexeme, positions, weights)
        GROUP BY u.lexeme
       ON CONFLICT (scope_id, term) DO UPDATE SET documents = c.documents + excluded.documents
     ),
     record_lengths AS (
       INSERT INTO optchat.search_scope_stats AS t (scope_id, documents, total_length)
       SELECT $1::text, count(*), coalesce(sum(length(tr.search)), 0) FROM turn_records tr HAVING count(*) > 0
       ON CONFLICT (scope_id)
       DO UPDATE SET documents = t.documents + excluded.documents, total_length = t.total_length + excluded.total_length
     )
     SELECT * FROM publication`,
    [
      input.scopeId,
      input.sessionId,
      input.generation,
      input.turnId,
      input.startSeq,
      input.endSeqExclusive,
      input.outcome,
      input.completedAt,
      input.sourceCover.map((n) => n.level),
      input.sourceCover.map((n) => n.index),
    ],
  );
  const row = result.rows[0];
  if (!row) throw new Error(`insertPublication: scope ${input.scopeId} does not exist`);
  return toPublication(row);
}

export async function findPublicationOfTurn(
  db: Queryable,
  scopeId: string,
  sessionId: string,
  generation: number,
  turnId: string,
): Promise<Publication | undefined> {
  const result = await db.query<PublicationRow>(
    `SELECT ${COLUMNS} FROM optchat.publications
      WHERE scope_id = $1::text AND session_id = $2::text AND generation = $3::int AND turn_id = $4::text`,
    [scopeId, sessionId, generation, turnId],
  );
  return result.rows[0] ? toPublication(result.rows[0]) : undefined;
}

/** A publication visible below `highWater` (undefined otherwise: no existence oracle beyond the snapshot). */
export async function findPublication(
  db: Queryable,
  scopeId: string,
  publicationSeq: number,
  highWater: number,
): Promise<Publication | undefined> {
  if (publicationSeq >= highWater) return undefined;
  const result = await db.query<PublicationRow>(
    `SELECT ${COLUMNS} FROM optchat.publications WHERE scope_id = $1::text AND publication_seq = $2::bigint`,
    [scopeId, publicationSeq],
  );
  return result.rows[0] ? toPublication(result.rows[0]) : undefined;
}

/**
 * Whether records [start, end) (a session node's range) of another session's current generation lie inside one node of
 * the source cover of one of its publications below the high-water mark: only published turns are shared, only those
 * the snapshot includes, and only their own records (a cover node lies inside one run of the turn's records, so a
 * record of another turn between them is not inside any). A dyadic range inside a run lies inside one node of the
 * run's canonical cover (dyadic ranges nest), so this is exactly "inside the turn's records".
 */
export async function foreignRangeVisible(
  db: Queryable,
  scopeId: string,
  sessionId: string,
  start: number,
  end: number,
  highWater: number,
): Promise<boolean> {
  const visible = visiblePublications("p", { scope: "$1::text", highWater: "$5::bigint" });
  const result = await db.query(
    `SELECT 1 FROM ${visible.from}
       CROSS JOIN LATERAL unnest(p.cover_levels, p.cover_idxs) AS c(level, idx)
      WHERE ${visible.where} AND p.session_id = $2::text
        AND p.start_seq <= $3::bigint AND p.end_seq_exclusive >= $4::bigint
        AND c.idx * (1::bigint << c.level) <= $3::bigint AND (c.idx + 1) * (1::bigint << c.level) >= $4::bigint
      LIMIT 1`,
    [scopeId, sessionId, start, end, highWater],
  );
  return (result.rowCount ?? 0) > 0;
}

/** Earliest and latest host timestamps of the records that publications [start, end) of a scope cover. */
export async function publicationTimeSpan(
  db: Queryable,
  scopeId: string,
  start: number,
  end: number,
): Promise<{ first: Date; last: Date } | undefined> {
  const result = await db.query<{ first: Date | null; last: Date | null }>(
    `SELECT min(r.occurred_at) AS first, max(r.occurred_at) AS last
       FROM optchat.publications p
       CROSS JOIN LATERAL unnest(p.cover_levels, p.cover_idxs) AS c(level, idx)
       JOIN optchat.records r ON r.session_id = p.session_id AND r.generation = p.generation
        AND r.seq >= c.idx * (1::bigint << c.level) AND r.seq < (c.idx + 1) * (1::bigint << c.level)
      WHERE p.scope_id = $1::text AND p.publication_seq >= $2::bigint AND p.publication_seq < $3::bigint
        AND p.retired_at IS NULL`,
    [scopeId, start, end],
  );
  const row = result.rows[0];
  return row?.first && row.last ? { first: row.first, last: row.last } : undefined;
}

/** Counts a failed attempt to publish a turn (its summary failed); returns how many in a row. */
export async function recordPublicationFailure(
  db: Queryable,
  turn: { sessionId: string; generation: number; turnId: string },
  error: string,
): Promise<number> {
  const result = await db.query<{ failures: number }>(
    `INSERT INTO optchat.publication_failures (session_id, generation, turn_id, failures, last_error)
     VALUES ($1::text, $2::int, $3::text, 1, $4::text)
     ON CONFLICT (session_id, generation, turn_id) DO UPDATE
       SET failures = optchat.publication_failures.failures + 1, last_failed_at = now(), last_error = excluded.last_error
     RETURNING failures`,
    [turn.sessionId, turn.generation, turn.turnId, error.slice(0, 2000)],
  );
  return result.rows[0]?.failures ?? 1;
}

export async function clearPublicationFailure(
  db: Queryable,
  turn: { sessionId: string; generation: number; turnId: string },
): Promise<void> {
  await db.query(
    "DELETE FROM optchat.publication_failures WHERE session_id = $1::text AND generation = $2::int AND turn_id = $3::text",
    [turn.sessionId, turn.generation, turn.turnId],
  );
}

/**
 * Whether a session tree's leaves are built up to `end` (leaves are built in order, seed 002 §4.1): then every record
 * of a turn ending there is summarized, and its publication's cover can be made of built nodes.
 */
export async function leavesBuiltUpTo(db: Queryable, treeId: number, end: number): Promise<boolean> {
  const result = await db.query<{ built: boolean }>(
    "SELECT built_leaves >= $2::bigint AS built FROM optchat.trees WHERE tree_id = $1::bigint",
    [treeId, end],
  );
  return result.rows[0]?.built === true;
}

/**
 * The seq ranges of a session generation's turns among the scope's first `highWater` publications (numbers
 * 0 … highWater − 1, the shared tree's leaves at that snapshot), ordered by start: what the shared view at that
 * snapshot already holds of the session (context assembly leaves it out of the session block). A publication covers
 * only its own turn's records (its runs, which may have gaps where another turn's records interleave), so the ranges
 * are those runs, never the publication's whole span.
 */
export async function publishedRangesOfSession(
  db: Queryable,
  scopeId: string,
  sessionId: string,
  generation: number,
  highWater: number,
): Promise<{ start: number; end: number }[]> {
  const result = await db.query<{ run_start: string; run_end: string }>(
    `SELECT r.run_start, r.run_end
       FROM optchat.publications p
       JOIN optchat.turns t ON t.session_id = p.session_id AND t.generation = p.generation AND t.turn_id = p.turn_id
      CROSS JOIN LATERAL unnest(t.run_starts, t.run_ends) AS r(run_start, run_end)
      WHERE ${publishedInSnapshot("p", "$1::text", "$4::bigint")} AND p.session_id = $2::text AND p.generation = $3::int
      ORDER BY r.run_start`,
    [scopeId, sessionId, generation, highWater],
  );
  return result.rows.map((row) => ({ start: Number(row.run_start), end: Number(row.run_end) }));
}

/** A scope's publications from number `fromSeq` on, in order (the browser's listing; every one, no snapshot). */
export async function listPublications(
  db: Queryable,
  scopeId: string,
  fromSeq: number,
  limit: number,
): Promise<Publication[]> {
  const result = await db.query<PublicationRow>(
    `SELECT ${COLUMNS} FROM optchat.publications WHERE scope_id = $1::text AND publication_seq >= $2::bigint
      ORDER BY publication_seq LIMIT $3::int`,
    [scopeId, fromSeq, limit],
  );
  return result.rows.map(toPublication);
}

export interface PublicationFailure {
  readonly turnId: string;
  readonly generation: number;
  readonly failures: number;
  readonly firstFailedAt: Date;
  readonly lastFailedAt: Date;
  readonly lastError: string;
}

/** The session's turns whose publication keeps failing, latest failure first. */
export async function listPublicationFailures(db: Queryable, sessionId: string): Promise<PublicationFailure[]> {
  const result = await db.query<{
    turn_id: string;
    generation: number;
    failures: number;
    first_failed_at: Date;
    last_failed_at: Date;
    last_error: string;
  }>(
    `SELECT turn_id, generation, failures, first_failed_at, last_failed_at, last_error
       FROM optchat.publication_failures WHERE session_id = $1::text ORDER BY last_failed_at DESC`,
    [sessionId],
  );
  return result.rows.map((row) => ({
    turnId: row.turn_id,
    generation: row.generation,
    failures: row.failures,
    firstFailedAt: row.first_failed_at,
    lastFailedAt: row.last_failed_at,
    lastError: row.last_error,
  }));
}

/**
 * The numbers of a session generation's publications among the scope's first `highWater` (the shared tree's leaves
 * that are its own turns): the plugin leaves them out of the shared lines it appends to a turn, since the session's
 * recent turns are then still in its request as native messages (docs/caching.md).
 */
export async function publicationSeqsOfSession(
  db: Queryable,
  scopeId: string,
  sessionId: string,
  generation: number,
  highWater: number,
): Promise<number[]> {
  const result = await db.query<{ publication_seq: string }>(
    `SELECT publication_seq FROM optchat.publications
      WHERE scope_id = $1::text AND session_id = $2::text AND generation = $3::int AND publication_seq < $4::bigint
      ORDER BY publication_seq`,
    [scopeId, sessionId, generation, highWater],
  );
  return result.rows.map((row) => Number(row.publication_seq));
}
