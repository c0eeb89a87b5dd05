import { payloadAsText } from "../core/payload.js";
import type { Queryable } from "./db.js";
import { rankedSearchSql } from "./search-sql.js";

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

interface HitRow {
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
}

/** A row of the ranked search as a hit, with the record ranges it covers. */
function toHit(row: HitRow): SearchHit {
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
  const result = await db.query<HitRow>(rankedSearchSql(search.units.length), [
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
  ]);
  return result.rows.map(toHit);
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
