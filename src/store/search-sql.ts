/**
 * The text of the ranked search's one statement (src/store/search.ts `searchRanked` binds its parameters): which rows
 * are candidates, as the snapshot's visibility allows (src/store/visibility.ts), and how they are scored and ordered.
 * Parameters: $1 scope, $2 candidates, $3 high-water mark, $4 own session, $5 own generation, $6 own boundary, $7
 * shared tree, $8 session filter, $9 before, $10 after, $11 limit, $12/$13 average lengths, $14 k1, $15 b, $16
 * candidate cap, $17 matches, $18 own tail, $19 preferred, $20 whether preferred differs, $21 node candidate cap, $22
 * revision epoch, then each unit's tsquery and weight.
 */
import { visibleAtEpoch } from "./nodes.js";
import { visiblePublications } from "./visibility.js";

export const FIXED_PARAMS = 22;

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

/** Other sessions' publications the snapshot sees (src/store/visibility.ts), narrowed by the session filter ($8). */
const FOREIGN = visiblePublications("p", { scope: "$1::text", highWater: "$3::bigint", except: "$4::text" });
const FOREIGN_WHERE = `${FOREIGN.where} AND ($8::text IS NULL OR p.session_id = $8::text)`;

/** The caller's own session as the session filter ($8) allows it: its history is read below its boundary. */
const OWN_ALLOWED = "($8::text IS NULL OR $8::text = $4::text)";

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
                 AND ${OWN_ALLOWED})
                OR EXISTS (SELECT 1 FROM ${FOREIGN.from}
                            WHERE p.session_id = r.session_id AND p.generation = r.generation
                              AND p.turn_id = r.turn_id AND r.seq >= p.start_seq AND r.seq < p.end_seq_exclusive
                              AND ${FOREIGN_WHERE}))
           AND ($9::timestamptz IS NULL OR r.occurred_at < $9::timestamptz)
           AND ($10::timestamptz IS NULL OR r.occurred_at > $10::timestamptz)`;
}

/** The ranked search's statement for `units` scoring units. */
export function rankedSearchSql(units: number): string {
  return `${candidateRecords()}
${rankedCandidates(units)}`;
}

/** The visible ranges, the caller's own tail, and the record candidates in order. */
function candidateRecords(): string {
  return `WITH q AS (SELECT $17::tsquery AS query),
     -- The record ranges the snapshot may see: the caller's own history before its boundary, and exactly the ranges
     -- of other sessions' publications below the high-water mark (not everything before the last one: an unpublished
     -- or later-published turn in between stays invisible).
     visible AS (
       SELECT $4::text AS session_id, $5::int AS generation, 0::bigint AS start_seq, $6::bigint AS end_seq
        WHERE ${OWN_ALLOWED}
          AND EXISTS (SELECT 1 FROM optchat.sessions s WHERE s.session_id = $4::text AND s.scope_id = $1::text)
       UNION ALL
       -- Each node of a publication's source cover: the turn's own records, never another turn's record that lies
       -- between them (a prompt queued during a tool call), nor a session node over both.
       SELECT p.session_id, p.generation, c.idx * (1::bigint << c.level), (c.idx + 1) * (1::bigint << c.level)
         FROM ${FOREIGN.from}
         CROSS JOIN LATERAL unnest(p.cover_levels, p.cover_idxs) AS c(level, idx)
        WHERE ${FOREIGN_WHERE}
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
           AND ts_match_vq(r.search, $17::tsquery) AND ${NOT_MEMORY_TOOL} AND ${OWN_ALLOWED}
           AND ($9::timestamptz IS NULL OR r.occurred_at < $9::timestamptz)
           AND ($10::timestamptz IS NULL OR r.occurred_at > $10::timestamptz)
        UNION ALL
        ${indexedRecords("$19", "true")}
        UNION ALL
        ${indexedRecords("$2", "$20::boolean AND NOT ts_match_vq(r.search, $19::tsquery)")})
        LIMIT $16::int
     ),`;
}

/** The summary candidates, every candidate scored, the best `limit`, each with the record ranges it covers. */
function rankedCandidates(units: number): string {
  const records = scoreExpression("c", units, "$12");
  const nodes = scoreExpression("c", units, "$13");
  return `     session_candidates AS (
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
      ORDER BY h.rank DESC, h.occurred_at DESC NULLS LAST, h.source, h.session_id, h.level, h.idx`;
}
