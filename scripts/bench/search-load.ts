/**
 * Bulk loader for the search scale benchmark (scripts/bench/search-scale.ts): a million records over a hundred scopes
 * in minutes, into the real schema, with the rows the product writes for search.
 *
 * What is written, and how it matches the product:
 * - scopes, sessions, generations, session and shared trees: `memory.openSession`, the product's own call;
 * - blobs and records: each record prepared by the product's `prepareEvents` (payload bytes, SHA-256, UTF-8 check,
 *   the search tsvector literal of src/core/tokenize.ts, event and stage keys), then inserted with the columns and
 *   the unnest statement of src/store/ingest-commit.ts writeSealed, ten thousand records per statement; seqs are
 *   consecutive per session from 0, and `generations.next_seq` is set to the count, as the ingest would leave it;
 * - turns: finished ('completed', publication_state 'published'), one run of `RECORDS_PER_TURN` consecutive records,
 *   snapshot columns as admission would have pinned them (the scope's publications and the session's records so far);
 * - publications: one per turn, gap-free per scope in round order, source cover = dyadicCover of the turn's run (what
 *   src/compactor/publish.ts computes for a one-run turn); `scopes.next_publication_seq` set to the count;
 * - BM25 statistics (migrations/007): per scope, the migration's own backfill statements restricted to that scope
 *   (term document counts and record count/length of the scope's published records); then recounted on a sample and
 *   compared (see {@link verifyStatistics}).
 * - trees: the leaf counts (a session tree has a leaf per record, a shared tree one per publication; admission pins
 *   the shared leaf count as the turn's publication high-water mark).
 * Not written: summary nodes, views and tree events (the compactor's output). Search's summary branches therefore
 * find nothing here; the real-path part of `bench shared` measures them with the compactor's trees at 100k records.
 *
 * Rounds: round r writes turn r of every session of every scope, so scopes interleave on disk as they would on a
 * shared server (pessimistic for an index that is not scope-aware, which is the point of measuring).
 */
import { dyadicCover } from "../../src/core/tree.js";
import { prepareEvents } from "../../src/memory/ingest-prep.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import type { Memory } from "../../src/memory/service.js";
import type { RecordToSeal } from "../../src/store/records.js";
import { note, round } from "./common.js";
import { buildVocabulary, type CorpusRecord, corpusRecord, type Vocabulary } from "./search-corpus.js";

export interface LoadSettings {
  readonly records: number;
  readonly scopes: number;
  readonly sessionsPerScope: number;
  readonly recordsPerTurn: number;
  readonly seed: number;
}

export interface LoadedSession {
  readonly sessionId: string;
  readonly hostSessionId: string;
}

export interface LoadedScope {
  readonly scopeId: string;
  readonly sharedTreeId: number;
  readonly sessions: readonly LoadedSession[];
}

export interface LoadResult {
  readonly scopes: readonly LoadedScope[];
  readonly vocabulary: Vocabulary;
  readonly records: number;
  readonly turnsPerSession: number;
  readonly seconds: { open: number; records: number; statistics: number };
  readonly recordBytes: number;
}

const BASE_TIME = Date.UTC(2026, 0, 1);

/** Global record number of (round, scope, session, position): round-major, as the rows are written. */
export function recordNumber(settings: LoadSettings, r: number, k: number, s: number, j: number): number {
  return ((r * settings.scopes + k) * settings.sessionsPerScope + s) * settings.recordsPerTurn + j;
}

function eventOf(session: LoadedSession, r: number, j: number, n: number, record: CorpusRecord): IngestEvent {
  const tool = record.kind === "tool_call" || record.kind === "tool_result";
  return {
    sessionId: session.sessionId,
    turnId: `t${r}`,
    kind: record.kind,
    finalization: { hostSessionId: session.hostSessionId, messageId: `m${n}`, ...(j > 0 ? { partId: `p${j}` } : {}) },
    occurredAt: new Date(BASE_TIME + n * 1000).toISOString(),
    content: record.content,
    ...(tool ? { toolCallId: `call-${r}-${j - (record.kind === "tool_result" ? 1 : 0)}`, toolName: "bash" } : {}),
  };
}

async function openScopes(memory: Memory, settings: LoadSettings): Promise<LoadedScope[]> {
  const scopes: LoadedScope[] = [];
  for (let k = 0; k < settings.scopes; k++) {
    const projectId = `bench-scale-${k}`;
    const sessions: LoadedSession[] = [];
    for (let s = 0; s < settings.sessionsPerScope; s++) {
      const hostSessionId = `bench-scale-${k}-s${s}`;
      const session = await memory.openSession({ host: "bench", hostSessionId, projectId, title: `scope ${k} s${s}` });
      sessions.push({ sessionId: session.sessionId, hostSessionId });
    }
    const tree = await memory.pool.query<{ tree_id: string }>(
      "SELECT tree_id FROM optchat.trees WHERE kind = 'shared' AND scope_id = $1::text",
      [`project:${projectId}`],
    );
    scopes.push({ scopeId: `project:${projectId}`, sharedTreeId: Number(tree.rows[0]?.tree_id), sessions });
  }
  return scopes;
}

/** The records statement of writeSealed (src/store/ingest-commit.ts), with the blobs, for prepared records. */
async function insertRecords(memory: Memory, prepared: readonly RecordToSeal[], seqs: readonly number[]) {
  const blobs = new Map<string, RecordToSeal>();
  for (const item of prepared) blobs.set(item.payloadHash.toString("hex"), item);
  const b = [...blobs.values()];
  const col = <T>(pick: (item: RecordToSeal) => T): T[] => prepared.map(pick);
  await memory.pool.query(
    `WITH new_blobs AS (
       INSERT INTO optchat.blobs (hash, byte_length, valid_utf8, content)
       SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::boolean[], $4::bytea[])
       ON CONFLICT (hash) DO NOTHING
     )
     INSERT INTO optchat.records (session_id, generation, seq, event_key, stage_key, turn_id, kind, occurred_at,
                                  payload_hash, payload_bytes, tool_call_id, tool_name, host_truncated,
                                  host_original_bytes, project_id, worktree_id, commit_id, attributes, search,
                                  scope_id)
     SELECT u.*, s.scope_id
       FROM unnest($5::text[], $6::int[], $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[],
                   $12::timestamptz[], $13::bytea[], $14::bigint[], $15::text[], $16::text[], $17::boolean[],
                   $18::bigint[], $19::text[], $20::text[], $21::text[], $22::jsonb[], $23::tsvector[])
            AS u(session_id, generation, seq, event_key, stage_key, turn_id, kind, occurred_at, payload_hash,
                 payload_bytes, tool_call_id, tool_name, host_truncated, host_original_bytes, project_id,
                 worktree_id, commit_id, attributes, search)
       JOIN optchat.sessions s ON s.session_id = u.session_id`,
    [
      b.map((x) => x.payloadHash),
      b.map((x) => x.payload.length),
      b.map((x) => x.validUtf8),
      b.map((x) => x.payload),
      col((x) => x.sessionId),
      col(() => 0),
      seqs,
      col((x) => x.eventKey),
      col((x) => x.stageKey),
      col((x) => x.turnId),
      col((x) => x.kind),
      col((x) => x.occurredAt),
      col((x) => x.payloadHash),
      col((x) => x.payload.length),
      col((x) => x.toolCallId),
      col((x) => x.toolName),
      col((x) => x.hostTruncated),
      col((x) => x.hostOriginalBytes),
      col((x) => x.projectId),
      col((x) => x.worktreeId),
      col((x) => x.commitId),
      col((x) => JSON.stringify(x.attributes)),
      col((x) => x.search),
    ],
  );
}

/** Round r's turns (finished, published) and their publications. */
async function insertTurns(memory: Memory, settings: LoadSettings, scopes: readonly LoadedScope[], r: number) {
  const rows: { scope: LoadedScope; s: number; session: LoadedSession }[] = [];
  for (const scope of scopes) for (const [s, session] of scope.sessions.entries()) rows.push({ scope, s, session });
  const start = r * settings.recordsPerTurn;
  const end = start + settings.recordsPerTurn;
  const cover = dyadicCover(start, end);
  const at = (s: number) => new Date(BASE_TIME + recordNumber(settings, r, 0, s, 0) * 1000);
  await memory.pool.query(
    `WITH t AS (
       INSERT INTO optchat.turns (session_id, generation, turn_id, state, admitted_at, finished_at, query, publishes,
                                  scope_id, policy_revision, retention_epoch, shared_tree_id, shared_view_revision,
                                  publication_high_water, own_boundary, run_starts, run_ends, publication_state)
       SELECT u.session_id, 0, $3::text, 'completed', u.at, u.at, NULL, true, u.scope_id, 0, 0, u.tree_id, NULL,
              $4::bigint * $5::bigint, $6::bigint, ARRAY[$6::bigint], ARRAY[$7::bigint], 'published'
         FROM unnest($1::text[], $2::text[], $8::bigint[], $9::timestamptz[]) AS u(session_id, scope_id, tree_id, at)
       RETURNING session_id, scope_id
     )
     INSERT INTO optchat.publications (scope_id, publication_seq, session_id, generation, turn_id, start_seq,
                                       end_seq_exclusive, outcome, completed_at, cover_levels, cover_idxs)
     SELECT u.scope_id, $4::bigint * $5::bigint + u.s, u.session_id, 0, $3::text, $6::bigint, $7::bigint, 'completed',
            u.at, $10::int[], $11::bigint[]
       FROM unnest($1::text[], $2::text[], $12::int[], $9::timestamptz[]) AS u(session_id, scope_id, s, at)`,
    [
      rows.map((x) => x.session.sessionId),
      rows.map((x) => x.scope.scopeId),
      `t${r}`,
      r,
      settings.sessionsPerScope,
      start,
      end,
      rows.map((x) => x.scope.sharedTreeId),
      rows.map((x) => at(x.s)),
      cover.map((c) => c.level),
      cover.map((c) => c.index),
      rows.map((x) => x.s),
    ],
  );
}

/** migrations/007's backfill of search_term_counts and search_scope_stats, for one scope. */
async function backfillStatistics(memory: Memory, scopeId: string): Promise<void> {
  const client = await memory.pool.connect();
  try {
    await client.query("BEGIN");
    await client.query(
      `CREATE TEMPORARY TABLE published_search ON COMMIT DROP AS
       SELECT p.scope_id, r.search
         FROM optchat.publications p
         JOIN optchat.records r ON r.session_id = p.session_id AND r.generation = p.generation AND r.turn_id = p.turn_id
          AND r.seq >= p.start_seq AND r.seq < p.end_seq_exclusive
        WHERE r.search IS NOT NULL AND p.scope_id = $1::text`,
      [scopeId],
    );
    await client.query(
      `INSERT INTO optchat.search_term_counts (scope_id, term, documents)
       SELECT ps.scope_id, u.lexeme, count(*)
         FROM published_search ps CROSS JOIN LATERAL unnest(ps.search) AS u(lexeme, positions, weights)
        GROUP BY ps.scope_id, u.lexeme`,
    );
    await client.query(
      `INSERT INTO optchat.search_scope_stats (scope_id, documents, total_length)
       SELECT scope_id, count(*), coalesce(sum(length(search)), 0) FROM published_search GROUP BY scope_id`,
    );
    await client.query("COMMIT");
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/** The scopes of a database loaded earlier with the same settings (OPTCHAT_BENCH_SEARCH_DATABASE). */
export async function loadedCorpus(memory: Memory, settings: LoadSettings): Promise<LoadResult> {
  const scopes: LoadedScope[] = [];
  for (let k = 0; k < settings.scopes; k++) {
    const scopeId = `project:bench-scale-${k}`;
    const result = await memory.pool.query<{ session_id: string; host_session_id: string; tree_id: string }>(
      `SELECT s.session_id, s.host_session_id, t.tree_id FROM optchat.sessions s
         JOIN optchat.trees t ON t.kind = 'shared' AND t.scope_id = s.scope_id
        WHERE s.scope_id = $1::text ORDER BY s.created_at, s.host_session_id`,
      [scopeId],
    );
    const sessions = result.rows.map((row) => ({ sessionId: row.session_id, hostSessionId: row.host_session_id }));
    sessions.sort((a, b) => Number(a.hostSessionId.split("-s").pop()) - Number(b.hostSessionId.split("-s").pop()));
    scopes.push({ scopeId, sharedTreeId: Number(result.rows[0]?.tree_id), sessions });
  }
  const perRound = settings.scopes * settings.sessionsPerScope * settings.recordsPerTurn;
  const rounds = Math.max(1, Math.floor(settings.records / perRound));
  return {
    scopes,
    vocabulary: buildVocabulary(settings.seed),
    records: rounds * perRound,
    turnsPerSession: rounds,
    seconds: { open: 0, records: 0, statistics: 0 },
    recordBytes: 0,
  };
}

/** Loads the corpus; progress on stderr every 10 s. */
export async function loadSearchCorpus(
  memory: Memory,
  settings: LoadSettings,
  signal: AbortSignal,
): Promise<LoadResult> {
  const perRound = settings.scopes * settings.sessionsPerScope * settings.recordsPerTurn;
  const rounds = Math.max(1, Math.floor(settings.records / perRound));
  const vocabulary = buildVocabulary(settings.seed);
  let t0 = performance.now();
  const scopes = await openScopes(memory, settings);
  const open = (performance.now() - t0) / 1000;
  t0 = performance.now();
  let lastNote = t0;
  let recordBytes = 0;
  const prepareRound = async (r: number) => {
    // Let the previous round's statements go out first: generating a round is synchronous work.
    await new Promise((resolve) => setImmediate(resolve));
    const events: IngestEvent[] = [];
    const seqs: number[] = [];
    for (const [k, scope] of scopes.entries()) {
      // Yield between scopes: a write in flight needs the event loop to stream its parameters to the server.
      await new Promise((resolve) => setImmediate(resolve));
      for (const [s, session] of scope.sessions.entries()) {
        for (let j = 0; j < settings.recordsPerTurn; j++) {
          const n = recordNumber(settings, r, k, s, j);
          const record = corpusRecord(vocabulary, n, j, settings.seed);
          recordBytes += record.content.length;
          events.push(eventOf(session, r, j, n, record));
          seqs.push(r * settings.recordsPerTurn + j);
        }
      }
    }
    return { prepared: (await prepareEvents(events, "ingestMany")).prepared, seqs };
  };
  // The next round is generated and prepared (tokenized, hashed) while the server writes this one.
  let next = prepareRound(0);
  for (let r = 0; r < rounds && !signal.aborted; r++) {
    const { prepared, seqs } = await next;
    const writing = insertRecords(memory, prepared, seqs).then(() => insertTurns(memory, settings, scopes, r));
    if (r + 1 < rounds) next = prepareRound(r + 1);
    await writing;
    if (performance.now() - lastNote > 10_000 || r === rounds - 1) {
      lastNote = performance.now();
      const done = (r + 1) * perRound;
      const rate = done / ((lastNote - t0) / 1000);
      note(
        `search-scale: ${done}/${rounds * perRound} records (${Math.round(rate)}/s, ~${Math.round((rounds * perRound - done) / rate)} s left)`,
      );
    }
  }
  await memory.pool.query(
    `UPDATE optchat.generations g SET next_seq = $1::bigint
      WHERE g.session_id IN (SELECT session_id FROM optchat.sessions WHERE scope_id LIKE 'project:bench-scale-%')
        AND g.generation = 0`,
    [rounds * settings.recordsPerTurn],
  );
  await memory.pool.query(
    "UPDATE optchat.scopes SET next_publication_seq = $1::bigint WHERE scope_id LIKE 'project:bench-scale-%'",
    [rounds * settings.sessionsPerScope],
  );
  // A turn's high-water mark is its shared tree's leaf count (src/store/turns.ts admitTurn): every publication is a
  // leaf there, as every record is a leaf of its session tree. The leaves stay unbuilt (no summaries are written).
  await memory.pool.query(
    `UPDATE optchat.trees t SET leaf_count = CASE WHEN t.kind = 'shared' THEN $1::bigint ELSE $2::bigint END
      WHERE t.scope_id LIKE 'project:bench-scale-%'
         OR t.session_id IN (SELECT session_id FROM optchat.sessions WHERE scope_id LIKE 'project:bench-scale-%')`,
    [rounds * settings.sessionsPerScope, rounds * settings.recordsPerTurn],
  );
  const records = (performance.now() - t0) / 1000;
  t0 = performance.now();
  for (const [k, scope] of scopes.entries()) {
    if (signal.aborted) break;
    await backfillStatistics(memory, scope.scopeId);
    if (k % 20 === 19) note(`search-scale: statistics of ${k + 1}/${scopes.length} scopes`);
  }
  const statistics = (performance.now() - t0) / 1000;
  return {
    scopes,
    vocabulary,
    records: rounds * perRound,
    turnsPerSession: rounds,
    seconds: { open: round(open, 1), records: round(records, 1), statistics: round(statistics, 1) },
    recordBytes,
  };
}

/**
 * Recounts the statistics of `sample` scopes from their records, independently of the load: every term's document
 * count (a full comparison per scope) and the record count and total length. Returns the mismatches (0: correct).
 */
export async function verifyStatistics(
  memory: Memory,
  scopes: readonly LoadedScope[],
): Promise<{ scopes: number; terms: number; mismatchedTerms: number; mismatchedTotals: number }> {
  let terms = 0;
  let mismatchedTerms = 0;
  let mismatchedTotals = 0;
  for (const scope of scopes) {
    const result = await memory.pool.query<{ terms: number; mismatched: number; totals_ok: boolean }>(
      `WITH docs AS (
         SELECT DISTINCT r.session_id, r.seq, r.search
           FROM optchat.records r JOIN optchat.sessions s ON s.session_id = r.session_id
          WHERE s.scope_id = $1::text AND r.search IS NOT NULL
            AND EXISTS (SELECT 1 FROM optchat.publications p WHERE p.scope_id = $1::text AND p.session_id = r.session_id
                         AND p.turn_id = r.turn_id AND r.seq >= p.start_seq AND r.seq < p.end_seq_exclusive)
       ), recount AS (
         SELECT u.lexeme AS term, count(*) AS documents FROM docs CROSS JOIN LATERAL unnest(docs.search) AS u
          GROUP BY u.lexeme
       )
       SELECT (SELECT count(*) FROM recount)::int AS terms,
              (SELECT count(*) FROM recount FULL JOIN (SELECT term, documents FROM optchat.search_term_counts
                                                        WHERE scope_id = $1::text) c USING (term)
                WHERE recount.documents IS DISTINCT FROM c.documents)::int AS mismatched,
              (SELECT (st.documents, st.total_length) = ((SELECT count(*) FROM docs), (SELECT sum(length(search)) FROM docs))
                 FROM optchat.search_scope_stats st WHERE st.scope_id = $1::text) AS totals_ok`,
      [scope.scopeId],
    );
    const row = result.rows[0];
    terms += row?.terms ?? 0;
    mismatchedTerms += row?.mismatched ?? 0;
    if (!row?.totals_ok) mismatchedTotals += 1;
  }
  return { scopes: scopes.length, terms, mismatchedTerms, mismatchedTotals };
}
