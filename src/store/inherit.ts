/**
 * A fork's inherited history (seed 000 §12, issue 15 item 3): the child's generation takes over the first records of
 * another session's generation by reference, with the parent's turns (finished, never published again) and the
 * parent's summary nodes over whole inherited ranges, in the caller's transaction. The tree's fold, readiness and jobs
 * are the ordinary ones (tree-changes.ts): the inherited leaves are appended and the taken-over nodes committed as
 * built events, so the child's view revisions replay from its own events exactly like any other tree's.
 */
import { endOf } from "../core/tree.js";
import type { Queryable } from "./db.js";
import type { NewNode, NodeChunk, NodeRevisionRow } from "./nodes.js";

/**
 * Locks the child generation's row and its tree's row in one statement, in the order the ingest takes them
 * (ingest-commit.ts), so an inheritance and an ingestion into the same session wait for each other and never deadlock.
 * Answers the number of records the generation holds.
 */
export async function lockGenerationForInheritance(
  db: Queryable,
  sessionId: string,
  generation: number,
): Promise<number | undefined> {
  const result = await db.query<{ next_seq: string }>(
    `SELECT g.next_seq FROM optchat.generations g
       JOIN optchat.trees t ON t.kind = 'session' AND t.session_id = g.session_id AND t.generation = g.generation
      WHERE g.session_id = $1::text AND g.generation = $2::int
        FOR UPDATE OF g, t`,
    [sessionId, generation],
  );
  return result.rows[0] ? Number(result.rows[0].next_seq) : undefined;
}

/** What a candidate parent must hold: the multiset of (kind, payload hash) of the copies, and the first record's. */
export interface InheritedShape {
  readonly scopeId: string;
  readonly childSessionId: string;
  readonly kinds: readonly string[];
  readonly hashes: readonly Buffer[];
  /** The payload hash of the copy OpenCode stored first (the parent's record 0 when the copies are its prefix). */
  readonly firstHash: Buffer;
}

export interface InheritanceSource {
  readonly sessionId: string;
  readonly generation: number;
}

/**
 * The oldest session generation of the scope (other than the child) whose first `kinds.length` records are exactly the
 * copies: the same number of records of each (kind, payload hash). The order is not compared: the live path seals a
 * step's tool parts when they complete and its text when the message completes, while the copies come in transcript
 * order. A fork of a fork matches its grandparent too; the oldest is the original, so the provenance names it.
 */
export async function findInheritanceSource(
  db: Queryable,
  shape: InheritedShape,
): Promise<InheritanceSource | undefined> {
  const result = await db.query<{ session_id: string; generation: number }>(
    `WITH wanted AS (
       SELECT w.kind, w.hash, count(*)::bigint AS n FROM unnest($3::text[], $4::bytea[]) AS w(kind, hash) GROUP BY 1, 2
     )
     SELECT s.session_id, g.generation
       FROM optchat.sessions s
       JOIN optchat.generations g ON g.session_id = s.session_id AND g.generation = s.current_generation
       JOIN optchat.records r0 ON r0.session_id = g.session_id AND r0.generation = g.generation AND r0.seq = 0
      WHERE s.scope_id = $1::text AND s.session_id <> $2::text AND g.next_seq >= $5::bigint
        AND r0.payload_hash = $6::bytea
        AND NOT EXISTS (
          SELECT 1
            FROM (SELECT r.kind, r.payload_hash AS hash, count(*)::bigint AS n FROM optchat.records r
                   WHERE r.session_id = g.session_id AND r.generation = g.generation AND r.seq < $5::bigint
                   GROUP BY 1, 2) have
            FULL JOIN wanted w ON w.kind = have.kind AND w.hash = have.hash
           WHERE have.n IS DISTINCT FROM w.n)
      ORDER BY s.created_at, s.session_id
      LIMIT 1`,
    [shape.scopeId, shape.childSessionId, shape.kinds, shape.hashes, shape.kinds.length, shape.firstHash],
  );
  const row = result.rows[0];
  return row ? { sessionId: row.session_id, generation: row.generation } : undefined;
}

/** The parent's records to take over, in seq order: what the copies are matched to. */
export async function listInheritedRecords(
  db: Queryable,
  source: InheritanceSource,
  count: number,
): Promise<{ seq: number; kind: string; payloadHash: Buffer; eventKey: string; stageKey: string }[]> {
  const result = await db.query<{
    seq: string;
    kind: string;
    payload_hash: Buffer;
    event_key: string;
    stage_key: string;
  }>(
    `SELECT seq, kind, payload_hash, event_key, stage_key FROM optchat.records
      WHERE session_id = $1::text AND generation = $2::int AND seq < $3::bigint ORDER BY seq`,
    [source.sessionId, source.generation, count],
  );
  return result.rows.map((row) => ({
    seq: Number(row.seq),
    kind: row.kind,
    payloadHash: row.payload_hash,
    eventKey: row.event_key,
    stageKey: row.stage_key,
  }));
}

/** One copy's coordinates in the child, for the parent record it was matched to. */
export interface InheritedKey {
  readonly seq: number;
  readonly eventKey: string;
  readonly stageKey: string;
  readonly attributes: Readonly<Record<string, unknown>>;
}

/**
 * Writes the child's generation `childGeneration` as the parent's first `keys.length` records (rows of the child that
 * point at the parent's payload blobs, their search vectors and host coordinates taken over, the copies' finalization
 * keys and host attributes so the adapter recognises OpenCode's copies as held), sets its record counter and its
 * provenance, and copies the parent's finished turns that lie wholly in the inherited range (never published again:
 * publication_state 'none'; their times kept, so the previous exchange is the parent's last inherited turn). A child of
 * a private parent becomes private. The caller holds the child's generation row locked and checked empty.
 */
export async function writeInheritedRecords(
  db: Queryable,
  child: { sessionId: string; generation: number },
  source: InheritanceSource,
  keys: readonly InheritedKey[],
): Promise<void> {
  const count = keys.length;
  await db.query(
    `WITH inherited AS (
       INSERT INTO optchat.records (session_id, generation, seq, event_key, stage_key, turn_id, kind, occurred_at,
                                    payload_hash, payload_bytes, tool_call_id, tool_name, host_truncated,
                                    host_original_bytes, project_id, worktree_id, commit_id, attributes, search,
                                    scope_id)
       SELECT $1::text, $2::int, r.seq, k.event_key, k.stage_key, r.turn_id, r.kind, r.occurred_at,
              r.payload_hash, r.payload_bytes, r.tool_call_id, r.tool_name, r.host_truncated,
              r.host_original_bytes, r.project_id, r.worktree_id, r.commit_id,
              r.attributes || k.attributes || jsonb_build_object('inheritedFrom',
                jsonb_build_object('sessionId', r.session_id, 'generation', r.generation, 'seq', r.seq)),
              r.search, (SELECT s.scope_id FROM optchat.sessions s WHERE s.session_id = $1::text)
         FROM unnest($5::bigint[], $6::text[], $7::text[], $8::jsonb[]) AS k(seq, event_key, stage_key, attributes)
         JOIN optchat.records r ON r.session_id = $3::text AND r.generation = $4::int AND r.seq = k.seq
       RETURNING 1
     ), kept_private AS ( -- a copy of a private session's text is private, whatever the fork was opened as
       UPDATE optchat.sessions SET visibility = 'private' WHERE session_id = $1::text AND visibility = 'shared'
          AND EXISTS (SELECT 1 FROM optchat.sessions p WHERE p.session_id = $3::text AND p.visibility = 'private')
       RETURNING 1
     ), counted AS (
       UPDATE optchat.generations
          SET next_seq = $9::bigint, inherited_from_session_id = $3::text, inherited_from_generation = $4::int,
              inherited_records = $9::bigint
        WHERE session_id = $1::text AND generation = $2::int
       RETURNING 1
     )
     INSERT INTO optchat.turns (session_id, generation, turn_id, state, admitted_at, finished_at, query, publishes,
                                scope_id, policy_revision, retention_epoch, revision_epoch, shared_tree_id,
                                shared_view_revision, publication_high_water, own_boundary, admission_seq, run_starts,
                                run_ends, publication_state)
     SELECT $1::text, $2::int, t.turn_id, t.state, t.admitted_at, t.finished_at, t.query, false,
            t.scope_id, t.policy_revision, t.retention_epoch, t.revision_epoch, t.shared_tree_id, t.shared_view_revision,
            t.publication_high_water, t.own_boundary, t.admission_seq, t.run_starts, t.run_ends, 'none'
       FROM optchat.turns t
      WHERE t.session_id = $3::text AND t.generation = $4::int AND t.state <> 'active'
        AND t.own_boundary < $9::bigint
        AND coalesce((SELECT max(e) FROM unnest(t.run_ends) AS e), 0) <= $9::bigint`,
    [
      child.sessionId,
      child.generation,
      source.sessionId,
      source.generation,
      keys.map((k) => k.seq),
      keys.map((k) => k.eventKey),
      keys.map((k) => k.stageKey),
      keys.map((k) => JSON.stringify(k.attributes)),
      count,
    ],
  );
  const written = await db.query<{ n: string }>(
    "SELECT count(*) AS n FROM optchat.records WHERE session_id = $1::text AND generation = $2::int",
    [child.sessionId, child.generation],
  );
  if (Number(written.rows[0]?.n) !== count) {
    throw new Error(`inherit: ${written.rows[0]?.n} of ${count} records written for ${child.sessionId}`);
  }
}

/**
 * The parent tree's built nodes that lie wholly in [0, leafCount), newest revision of each, with their chunks, in an
 * order the fold accepts as built events: by the leaf that completes them, then by level (children first).
 */
export async function listInheritedNodes(db: Queryable, parentTreeId: number, leafCount: number): Promise<NewNode[]> {
  const nodes = await db.query<NodeRevisionRow & { attempts: number; overshoot: boolean }>(
    `SELECT DISTINCT ON (level, idx) level, idx, revision, text, input_hashes, summarizer, prompt_version, attempts,
            overshoot
       FROM optchat.nodes
      WHERE tree_id = $1::bigint AND (idx + 1) * (1::bigint << level) <= $2::bigint
      ORDER BY level, idx, revision DESC`,
    [parentTreeId, leafCount],
  );
  const chunks = await db.query<{
    level: number;
    idx: string;
    revision: number;
    chunk_level: number;
    chunk_index: number;
    char_start: number;
    char_end: number;
    text: string;
  }>(
    `SELECT level, idx, revision, chunk_level, chunk_index, char_start, char_end, text FROM optchat.node_chunks
      WHERE tree_id = $1::bigint AND (idx + 1) * (1::bigint << level) <= $2::bigint
      ORDER BY level, idx, revision, chunk_level, chunk_index`,
    [parentTreeId, leafCount],
  );
  const chunksOf = new Map<string, NodeChunk[]>();
  for (const c of chunks.rows) {
    const key = `${c.level}:${c.idx}:${c.revision}`;
    const list = chunksOf.get(key) ?? [];
    list.push({
      chunkLevel: c.chunk_level,
      chunkIndex: c.chunk_index,
      charStart: c.char_start,
      charEnd: c.char_end,
      text: c.text,
    });
    chunksOf.set(key, list);
  }
  const taken: NewNode[] = nodes.rows.map((row) => ({
    level: row.level,
    index: Number(row.idx),
    text: row.text,
    inputHashes: row.input_hashes,
    summarizer: row.summarizer,
    promptVersion: row.prompt_version,
    attempts: row.attempts,
    overshoot: row.overshoot,
    jobId: null,
    jobAttempt: null,
    chunks: chunksOf.get(`${row.level}:${row.idx}:${row.revision}`) ?? [],
  }));
  return taken.sort((a, b) => endOf(a) - endOf(b) || a.level - b.level);
}

/**
 * A rewind (OpenCode's revert, committed by `message.removed`): the lowest seq of the current generation's records made
 * from any of the removed host messages, i.e. where the retained prefix ends (OpenCode removes from the revert point
 * to the end, so every later record is superseded too). Undefined when no record of them is stored. Locks the
 * session row, so two rewinds of one session take turns.
 */
export async function findRewindPoint(
  db: Queryable,
  sessionId: string,
  removedHostMessageIds: readonly string[],
): Promise<{ generation: number; keep: number } | undefined> {
  const result = await db.query<{ generation: number; keep: string | null }>(
    `WITH session AS (
       SELECT session_id, current_generation FROM optchat.sessions WHERE session_id = $1::text FOR UPDATE
     )
     SELECT s.current_generation AS generation,
            (SELECT min(r.seq) FROM optchat.records r
              WHERE r.session_id = s.session_id AND r.generation = s.current_generation
                AND r.attributes->>'hostMessageId' = ANY($2::text[])) AS keep
       FROM session s`,
    [sessionId, removedHostMessageIds],
  );
  const row = result.rows[0];
  return row && row.keep !== null ? { generation: row.generation, keep: Number(row.keep) } : undefined;
}

/**
 * Starts generation `generation + 1` of the session (its row and its tree, empty) and makes it current. The previous
 * generation's turns that are still open or not yet published end here: the ones left active are interrupted, and
 * none of them is published any more unless it lies wholly in the retained prefix `[0, keep)` (its records are
 * the new generation's too, through the inheritance that follows).
 */
export async function startNextGeneration(
  db: Queryable,
  sessionId: string,
  generation: number,
  keep: number,
): Promise<number> {
  const next = generation + 1;
  await db.query(
    `WITH ended AS (
       UPDATE optchat.turns
          SET state = 'interrupted', finished_at = now(), run_starts = '{}', run_ends = '{}', publication_state = 'none'
        WHERE session_id = $1::text AND generation = $2::int AND state = 'active'
       RETURNING 1
     ), superseded AS (
       UPDATE optchat.turns
          SET publication_state = 'none'
        WHERE session_id = $1::text AND generation = $2::int AND state <> 'active' AND publication_state = 'pending'
          AND coalesce((SELECT max(e) FROM unnest(run_ends) AS e), 0) > $4::bigint
       RETURNING 1
     ), generation_row AS (
       INSERT INTO optchat.generations (session_id, generation) VALUES ($1::text, $3::int) RETURNING 1
     ), tree AS (
       INSERT INTO optchat.trees (kind, session_id, generation)
       SELECT 'session', $1::text, $3::int FROM generation_row RETURNING 1
     )
     UPDATE optchat.sessions SET current_generation = $3::int
      WHERE session_id = $1::text AND (SELECT count(*) FROM tree) = 1`,
    [sessionId, generation, next, keep],
  );
  return next;
}
