import { payloadAsText } from "../core/payload.js";
import type { Queryable } from "./db.js";
import { visibleAtEpoch } from "./nodes.js";

/** What a search may see: the caller's scope and pinned snapshot, applied in SQL before any text is read. */
export interface SearchScope {
  readonly scopeId: string;
  readonly publicationHighWater: number;
  readonly sharedTreeId: number | null;
  readonly ownSessionId: string;
  readonly ownGeneration: number;
  /** Own records [0, ownBoundary) are searchable; the live turn is in the transcript. */
  readonly ownBoundary: number;
  /** Summaries are searched as the snapshot's revision epoch resolves them (migration 014). */
  readonly revisionEpoch: number;
}

export interface SearchFilters {
  readonly sessionId?: string;
  readonly before?: Date;
  readonly after?: Date;
}

export interface SearchHit {
  readonly source: "record" | "session_node" | "shared_node";
  readonly sessionId: string | null;
  readonly generation: number | null;
  readonly level: number;
  readonly index: number;
  readonly kind: string | null;
  readonly occurredAt: Date | null;
  readonly rank: number;
  /** A node's text; null for a record (its first 64 KiB come from {@link readRecordHeads} for the page shown). */
  readonly text: string | null;
  /** A record's payload hash (for {@link readRecordHeads}); null for a node. */
  readonly payloadHash: Buffer | null;
  /** The record ranges a hit covers: the record itself, a session node's range, a shared node's publications. */
  readonly spans: readonly RecordSpan[];
}

export interface RecordSpan {
  readonly sessionId: string;
  readonly generation: number;
  readonly startSeq: number;
  readonly endSeq: number;
}

/** Scope-wide statistics for BM25 (migrations/007): record and summary counts and lengths, and the terms' frequencies. */
export interface SearchStatistics {
  readonly records: { readonly documents: number; readonly averageLength: number };
  readonly nodes: { readonly documents: number; readonly averageLength: number };
  /**
   * Records of the scope containing the term (0 when none), and for a prefix `stem:*` the sum over the terms that start
   * with it (a record holding two of them counts twice: an overcount, capped at the record count by the idf).
   */
  readonly documentFrequency: ReadonlyMap<string, number>;
  /**
   * For a prefix `stem`: the scope's counted terms that start with it, most frequent first, at most the number asked
   * for (the candidates of a prefix unit, see {@link RankedSearch.candidates}).
   */
  readonly expansions: ReadonlyMap<string, readonly string[]>;
}

/**
 * Reads the scope's statistics for the given terms and prefixes: a primary-key range per term or prefix and two
 * small sums; for each prefix also its `expansionLimit` most frequent terms.
 */
export async function readSearchStatistics(
  db: Queryable,
  scopeId: string,
  terms: readonly string[],
  prefixes: readonly string[] = [],
  expansionLimit = 0,
): Promise<SearchStatistics> {
  const result = await db.query<{
    what: string;
    term: string | null;
    documents: number;
    total: number;
    expansion: string[] | null;
  }>(
    `SELECT 'term' AS what, c.term, sum(c.documents)::float8 AS documents, 0::float8 AS total, NULL::text[] AS expansion
       FROM optchat.search_term_counts c WHERE c.scope_id = $1::text AND c.term = ANY($2::text[]) GROUP BY c.term
     UNION ALL
     -- chr(1114111) is U+10FFFF, the largest code point: in the terms' C collation (UTF-8 byte order) every term that
     -- starts with the prefix lies in [prefix, prefix || U+10FFFF).
     SELECT 'prefix', p.prefix || ':*', coalesce(sum(m.documents), 0)::float8, 0::float8,
            (array_agg(m.term ORDER BY m.documents DESC, m.term))[1:$4::int]
       FROM unnest($3::text[]) AS p(prefix)
       LEFT JOIN optchat.search_term_counts m ON m.scope_id = $1::text AND m.term >= p.prefix COLLATE "C"
        AND m.term < (p.prefix || chr(1114111)) COLLATE "C" AND starts_with(m.term, p.prefix)
      GROUP BY p.prefix
     UNION ALL
     SELECT 'records', NULL, coalesce(sum(documents), 0)::float8, coalesce(sum(total_length), 0)::float8, NULL
       FROM optchat.search_scope_stats WHERE scope_id = $1::text
     UNION ALL
     SELECT 'nodes', NULL, coalesce(sum(documents), 0)::float8, coalesce(sum(total_length), 0)::float8, NULL
       FROM optchat.search_tree_stats WHERE scope_id = $1::text`,
    [scopeId, [...new Set(terms)], [...new Set(prefixes)], expansionLimit],
  );
  const documentFrequency = new Map<string, number>();
  const expansions = new Map<string, readonly string[]>();
  const collection = { records: { documents: 0, averageLength: 0 }, nodes: { documents: 0, averageLength: 0 } };
  for (const row of result.rows) {
    if (row.what === "term") documentFrequency.set(row.term as string, row.documents);
    else if (row.what === "prefix") {
      documentFrequency.set(row.term as string, row.documents);
      expansions.set(
        (row.term as string).slice(0, -2),
        (row.expansion ?? []).filter((t) => t !== null),
      );
    } else
      collection[row.what as "records" | "nodes"] = {
        documents: row.documents,
        averageLength: row.documents > 0 ? row.total / row.documents : 0,
      };
  }
  return { ...collection, documentFrequency, expansions };
}

/** A ranked query as src/core/search-query.ts plans it, in tsquery literals (src/core/tokenize.ts). */
export interface RankedSearch {
  /**
   * What a candidate matches: the generating units OR-ed, or every word AND-ed in the all-words mode. Read through the
   * summaries' index, and tested row by row on the caller's own newest records (see {@link ownTail}).
   */
  readonly matches: string;
  /**
   * The same with every prefix unit replaced by its expansion into exact terms (the scope's counted terms that start
   * with the stem, src/core/search-query.ts): read through the records' (scope, terms) index, which intersects exact
   * terms with the scope inside the index, where a prefix collects the postings of every scope first.
   */
  readonly candidates: string;
  /**
   * Most of the caller's own records after its last publication that are tested against `matches` one by one: they
   * are not counted in the statistics yet, so a word form only they hold is in no expansion.
   */
  readonly ownTail: number;
  /**
   * The candidates read first, in `candidates`' form: the rows that score best when the candidates are more than
   * `candidateCap` (src/core/search-query.ts preferredCandidates); equal to `candidates` when there is no such order.
   */
  readonly preferred: string;
  /** Each unit's tsquery and what a document containing it scores before length normalisation. */
  readonly units: readonly { readonly tsquery: string; readonly weight: number }[];
  readonly recordAverageLength: number;
  readonly nodeAverageLength: number;
  readonly k1: number;
  readonly b: number;
  /** Most candidate records that are scored (a query of common words: see `preferred`). */
  readonly candidateCap: number;
  /** Most candidate summaries of each kind (session, shared) that are scored, in index order. */
  readonly nodeCandidateCap: number;
}

const FIXED_PARAMS = 22;

/** The BM25 score of alias `x` (presence of each unit, length in distinct terms), over numbered parameters. */
function scoreExpression(alias: string, units: number, averageParam: string): string {
  const terms: string[] = [];
  for (let i = 0; i < units; i++) {
    const q = FIXED_PARAMS + 1 + 2 * i;
    terms.push(`CASE WHEN ${alias}.search @@ $${q}::tsquery THEN $${q + 1}::float8 ELSE 0 END`);
  }
  const sum = terms.length > 0 ? terms.join(" + ") : "0";
  return `((${sum}) * ($14::float8 + 1) / (1 + $14::float8 * (1 - $15::float8 + $15::float8 * length(${alias}.search) / greatest(${averageParam}::float8, 1))))`;
}

/**
 * The memory tools' own calls and results are memory read back, not new evidence: found again, a search would answer
 * with the excerpts of an earlier search (issue 40 item 10). A row filter on the record already fetched. The names
 * are the plugin's tools (plugin/tools.ts: memory_zoom, memory_search, memory_date, memory_sessions, memory_inspect).
 */
const NOT_MEMORY_TOOL = String.raw`(r.tool_name IS NULL OR r.tool_name NOT LIKE 'memory\_%')`;

/**
 * The visible records of the caller's scope matching tsquery parameter `match` and the condition `and`, through the
 * (scope, terms) index (migrations/011), which intersects exact terms with the scope's postings inside the index: the
 * caller's own records before its tail, and other sessions' records in their visible turns: a record of one is
 * visible when it lies in the range of its turn's publication, which is exactly the records under its source cover
 * (the turn_visibility audit, src/store/audits.ts). One index scan for both (two cost twice the index work: 2-10 ms
 * each for a common word at 1M records). The publication is probed per row through its unique (scope, session,
 * generation, turn) index, so rows stream and the candidate LIMIT stops the scan: joined to the visible turns, the
 * planner sorted every matching row for a merge join first (1,244 rows read for 171 wanted), or, inlined, joined the
 * sessions last in a nested loop over every candidate (160 ms at 1M records, bench search-scale). The search vector is copied once
 * (`|| ''`): scoring tests it once per unit, and a long one, kept in TOAST, was fetched again for every test (a common
 * query read 2.3 times the buffers).
 */
function indexedRecords(match: string, and: string): string {
  return `SELECT r.session_id, r.generation, r.seq, r.kind, r.occurred_at, r.payload_hash, r.search || ''::tsvector AS search
          FROM optchat.records r
         WHERE r.scope_id = $1::text AND r.search @@ ${match}::tsquery AND ${and} AND ${NOT_MEMORY_TOOL}
           AND ((r.session_id = $4::text AND r.generation = $5::int AND r.seq < (SELECT start_seq FROM own_tail)
                 AND ($8::text IS NULL OR $8::text = $4::text))
                OR EXISTS (SELECT 1 FROM optchat.publications p
                             JOIN optchat.sessions s ON s.session_id = p.session_id AND s.current_generation = p.generation
                            WHERE p.scope_id = $1::text AND p.session_id = r.session_id AND p.generation = r.generation
                              AND p.turn_id = r.turn_id AND r.seq >= p.start_seq AND r.seq < p.end_seq_exclusive
                              AND p.publication_seq < $3::bigint AND p.session_id <> $4::text
                              AND ($8::text IS NULL OR p.session_id = $8::text)))
           AND ($9::timestamptz IS NULL OR r.occurred_at < $9::timestamptz)
           AND ($10::timestamptz IS NULL OR r.occurred_at > $10::timestamptz)`;
}

/**
 * BM25-ranked search over records and summary nodes (issue 10). Visibility is part of the WHERE clause, so rows
 * outside the snapshot are never read, ranked or excerpted:
 * - records and session nodes of the caller's own session below its boundary;
 * - records and session nodes of other sessions of the scope, current generation, inside one node of the source
 *   cover of one of their publications below the high-water mark (the turn's own records only);
 * - shared-tree nodes whose whole range is below the high-water mark.
 * Of a node address, the revision the snapshot's revision epoch sees (a rebuild since is not searched).
 * Candidates are the visible rows matching `candidates` (through the GIN indexes), at most `candidateCap` per source;
 * each is scored by the units it contains, weighted by the caller's idf, times BM25's length factor. Ordered by
 * score, then recency; the best `limit` rows. The caller merges them into places (src/memory/search.ts).
 */
export async function searchRanked(
  db: Queryable,
  scope: SearchScope,
  search: RankedSearch,
  filters: SearchFilters,
  limit: number,
): Promise<SearchHit[]> {
  const unitParams = search.units.flatMap((unit) => [unit.tsquery, unit.weight]);
  const records = scoreExpression("c", search.units.length, "$12");
  const nodes = scoreExpression("c", search.units.length, "$13");
  const result = await db.query<{
    source: SearchHit["source"];
    session_id: string | null;
    generation: number | null;
    level: number;
    idx: string;
    kind: string | null;
    occurred_at: Date | null;
    rank: number;
    node_text: string | null;
    payload_hash: Buffer | null;
    span_sessions: string[] | null;
    span_generations: number[] | null;
    span_starts: string[] | null;
    span_ends: string[] | null;
  }>(
    `WITH q AS (SELECT $17::tsquery AS query),
     -- The record ranges the snapshot may see: the caller's own history before its boundary, and exactly the ranges
     -- of other sessions' publications below the high-water mark (not everything before the last one: an unpublished
     -- or later-published turn in between stays invisible).
     visible AS (
       SELECT $4::text AS session_id, $5::int AS generation, 0::bigint AS start_seq, $6::bigint AS end_seq
        WHERE ($8::text IS NULL OR $8::text = $4::text)
          AND EXISTS (SELECT 1 FROM optchat.sessions s WHERE s.session_id = $4::text AND s.scope_id = $1::text)
       UNION ALL
       -- Each node of a publication's source cover: the turn's own records, never another turn's record that lies
       -- between them (a prompt queued during a tool call), nor a session node over both.
       SELECT p.session_id, p.generation, c.idx * (1::bigint << c.level), (c.idx + 1) * (1::bigint << c.level)
         FROM optchat.publications p
         JOIN optchat.sessions s ON s.session_id = p.session_id AND s.current_generation = p.generation
         CROSS JOIN LATERAL unnest(p.cover_levels, p.cover_idxs) AS c(level, idx)
        WHERE p.scope_id = $1::text AND p.publication_seq < $3::bigint AND p.session_id <> $4::text
          AND p.retired_at IS NULL AND ($8::text IS NULL OR p.session_id = $8::text)
     ),
     -- The caller's own records from own_tail on are not counted in the statistics yet (published turns are; those
     -- after the last publication of the session are not): at most $18 of them, tested one by one.
     own_tail AS (
       SELECT greatest(least($6::bigint, coalesce(max(p.end_seq_exclusive), 0)), $6::bigint - $18::bigint) AS start_seq
         FROM optchat.publications p
        WHERE p.session_id = $4::text AND p.generation = $5::int AND p.retired_at IS NULL
     ),
     -- Candidates in order, at most $16: the caller's own newest records (own_tail), then the rows matching the
     -- preferred query ($19, the best-scoring candidates: see RankedSearch.preferred), then the other candidates.
     record_candidates AS (
       (-- ts_match_vq is the @@ operator's function: called by name it is not matched to the index, so the tail is
        -- read by its primary-key range and each row tested (the prefixes of $17 through the index would read every
        -- scope's postings of the stems).
        SELECT r.session_id, r.generation, r.seq, r.kind, r.occurred_at, r.payload_hash, r.search || ''::tsvector AS search
          FROM optchat.records r
         WHERE r.session_id = $4::text AND r.generation = $5::int AND r.scope_id = $1::text
           AND r.seq >= (SELECT start_seq FROM own_tail) AND r.seq < $6::bigint
           AND ts_match_vq(r.search, $17::tsquery) AND ${NOT_MEMORY_TOOL}
           AND ($8::text IS NULL OR $8::text = $4::text)
           AND ($9::timestamptz IS NULL OR r.occurred_at < $9::timestamptz)
           AND ($10::timestamptz IS NULL OR r.occurred_at > $10::timestamptz)
        UNION ALL
        ${indexedRecords("$19", "true")}
        UNION ALL
        ${indexedRecords("$2", "$20::boolean AND NOT ts_match_vq(r.search, $19::tsquery)")})
        LIMIT $16::int
     ),
     session_candidates AS (
       SELECT v.session_id, v.generation, n.level, n.idx, n.text, n.search
         FROM visible v CROSS JOIN q
         JOIN optchat.trees t ON t.kind = 'session' AND t.session_id = v.session_id AND t.generation = v.generation
         JOIN optchat.nodes n ON n.tree_id = t.tree_id AND n.level > 0
          AND n.idx * (1::bigint << n.level) >= v.start_seq AND (n.idx + 1) * (1::bigint << n.level) <= v.end_seq
        WHERE n.search @@ q.query AND ${visibleAtEpoch("n", "$22::int")}
          AND $9::timestamptz IS NULL AND $10::timestamptz IS NULL
        LIMIT $21::int
     ),
     shared_candidates AS (
       SELECT n.level, n.idx, n.text, n.search
         FROM q JOIN optchat.nodes n ON n.tree_id = $7::bigint AND (n.idx + 1) * (1::bigint << n.level) <= $3::bigint
        WHERE n.search @@ q.query AND ${visibleAtEpoch("n", "$22::int")}
          AND $8::text IS NULL AND $9::timestamptz IS NULL AND $10::timestamptz IS NULL
        LIMIT $21::int
     ),
     hits AS (
       SELECT 'record'::text AS source, c.session_id, c.generation, 0 AS level, c.seq AS idx, c.kind, c.occurred_at,
              ${records} AS rank, NULL::text AS node_text, c.payload_hash
         FROM record_candidates c
       UNION ALL
       SELECT 'session_node', c.session_id, c.generation, c.level, c.idx, NULL, NULL, ${nodes}, c.text, NULL
         FROM session_candidates c
       UNION ALL
       SELECT 'shared_node', NULL, NULL, c.level, c.idx, NULL, NULL, ${nodes}, c.text, NULL
         FROM shared_candidates c
     ),
     best AS (
       SELECT * FROM hits h
        ORDER BY h.rank DESC, h.occurred_at DESC NULLS LAST, h.source, h.session_id, h.level, h.idx
        LIMIT $11::int
     )
     SELECT h.source, h.session_id, h.generation, h.level, h.idx, h.kind, h.occurred_at, h.rank,
            h.node_text, h.payload_hash,
            sp.sessions AS span_sessions, sp.generations AS span_generations, sp.starts AS span_starts,
            sp.ends AS span_ends
       FROM best h
       -- A shared node's records: its publications' ranges (all below the high-water mark: the node is visible).
       LEFT JOIN LATERAL (
         SELECT array_agg(p.session_id) AS sessions, array_agg(p.generation) AS generations,
                array_agg(p.start_seq) AS starts, array_agg(p.end_seq_exclusive) AS ends
           FROM optchat.publications p
          WHERE h.source = 'shared_node' AND p.scope_id = $1::text AND p.retired_at IS NULL
            AND p.publication_seq >= h.idx * (1::bigint << h.level)
            AND p.publication_seq < (h.idx + 1) * (1::bigint << h.level)
       ) sp ON true
      ORDER BY h.rank DESC, h.occurred_at DESC NULLS LAST, h.source, h.session_id, h.level, h.idx`,
    [
      scope.scopeId,
      search.candidates,
      scope.publicationHighWater,
      scope.ownSessionId,
      scope.ownGeneration,
      scope.ownBoundary,
      scope.sharedTreeId,
      filters.sessionId ?? null,
      filters.before ?? null,
      filters.after ?? null,
      limit,
      search.recordAverageLength,
      search.nodeAverageLength,
      search.k1,
      search.b,
      search.candidateCap,
      search.matches,
      search.ownTail,
      search.preferred,
      search.preferred !== search.candidates,
      search.nodeCandidateCap,
      scope.revisionEpoch,
      ...unitParams,
    ],
  );
  return result.rows.map((row) => {
    const index = Number(row.idx);
    const span = (startSeq: number, endSeq: number): RecordSpan => ({
      sessionId: row.session_id as string,
      generation: row.generation as number,
      startSeq,
      endSeq,
    });
    const spans: RecordSpan[] =
      row.source === "record"
        ? [span(index, index + 1)]
        : row.source === "session_node"
          ? [span(index * 2 ** row.level, (index + 1) * 2 ** row.level)]
          : (row.span_sessions ?? []).map((sessionId, i) => ({
              sessionId,
              generation: row.span_generations?.[i] as number,
              startSeq: Number(row.span_starts?.[i]),
              endSeq: Number(row.span_ends?.[i]),
            }));
    return {
      source: row.source,
      sessionId: row.session_id,
      generation: row.generation,
      level: row.level,
      index,
      kind: row.kind,
      occurredAt: row.occurred_at,
      rank: row.rank,
      text: row.node_text,
      payloadHash: row.payload_hash,
      spans,
    };
  });
}

/**
 * The first 64 KiB of each payload, as text, by hash (hex): read only for the hits a page shows, since a ranked
 * search looks at several times as many rows as it returns.
 */
export async function readRecordHeads(db: Queryable, hashes: readonly Buffer[]): Promise<Map<string, string>> {
  const heads = new Map<string, string>();
  if (hashes.length === 0) return heads;
  const result = await db.query<{ hash: Buffer; head: Buffer }>(
    "SELECT hash, substring(content FROM 1 FOR 65536) AS head FROM optchat.blobs WHERE hash = ANY($1::bytea[])",
    [hashes],
  );
  for (const row of result.rows) heads.set(row.hash.toString("hex"), payloadAsText(row.head));
  return heads;
}
