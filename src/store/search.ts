import { payloadAsText } from "../core/payload.js";
import type { Queryable } from "./db.js";

/** What a search may see: the caller's scope and pinned snapshot, applied in SQL before any text is read. */
export interface SearchScope {
  readonly scopeId: string;
  readonly publicationHighWater: number;
  readonly sharedTreeId: number | null;
  readonly ownSessionId: string;
  readonly ownGeneration: number;
  /** Own records [0, ownBoundary) are searchable; the live turn is in the transcript. */
  readonly ownBoundary: number;
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
  /** The node text, or the record's first 64 KiB (for the excerpt). */
  readonly text: string;
  readonly validUtf8: boolean;
}

/**
 * Full-text search over records and summary nodes with our own tokens (a tsquery literal from src/core/tokenize.ts).
 * Visibility is part of the WHERE clause, so rows outside the snapshot are never read, ranked or excerpted:
 * - records and session nodes of the caller's own session below its boundary;
 * - records and session nodes of other sessions of the scope, current generation, inside one node of the source
 *   cover of one of their publications below the high-water mark (the turn's own records only);
 * - shared-tree nodes whose whole range is below the high-water mark.
 * Ordered by rank, then recency; `offset`/`limit` page it (the caller encodes them in its cursor).
 */
export async function searchVisible(
  db: Queryable,
  scope: SearchScope,
  tsquery: string,
  filters: SearchFilters,
  offset: number,
  limit: number,
): Promise<SearchHit[]> {
  const result = await db.query<{
    source: SearchHit["source"];
    session_id: string | null;
    generation: number | null;
    level: number;
    idx: number;
    kind: string | null;
    occurred_at: Date | null;
    rank: number;
    node_text: string | null;
    head: Buffer | null;
    valid_utf8: boolean;
  }>(
    `WITH q AS (SELECT $2::tsquery AS query),
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
          AND ($8::text IS NULL OR p.session_id = $8::text)
     ),
     hits AS (
       SELECT 'record'::text AS source, r.session_id, r.generation, 0 AS level, r.seq AS idx, r.kind, r.occurred_at,
              ts_rank(r.search, q.query) AS rank, NULL::text AS node_text, r.payload_hash
         FROM visible v CROSS JOIN q
         JOIN optchat.records r ON r.session_id = v.session_id AND r.generation = v.generation
          AND r.seq >= v.start_seq AND r.seq < v.end_seq
        WHERE r.search @@ q.query
          AND ($9::timestamptz IS NULL OR r.occurred_at < $9::timestamptz)
          AND ($10::timestamptz IS NULL OR r.occurred_at > $10::timestamptz)
       UNION ALL
       SELECT 'session_node', v.session_id, v.generation, n.level, n.idx, NULL, NULL, ts_rank(n.search, q.query), n.text, NULL
         FROM visible v CROSS JOIN q
         JOIN optchat.trees t ON t.kind = 'session' AND t.session_id = v.session_id AND t.generation = v.generation
         JOIN optchat.nodes n ON n.tree_id = t.tree_id AND n.level > 0
          AND n.idx * (1::bigint << n.level) >= v.start_seq AND (n.idx + 1) * (1::bigint << n.level) <= v.end_seq
        WHERE n.search @@ q.query AND $9::timestamptz IS NULL AND $10::timestamptz IS NULL
       UNION ALL
       SELECT 'shared_node', NULL, NULL, n.level, n.idx, NULL, NULL, ts_rank(n.search, q.query), n.text, NULL
         FROM q JOIN optchat.nodes n ON n.tree_id = $7::bigint AND (n.idx + 1) * (1::bigint << n.level) <= $3::bigint
        WHERE n.search @@ q.query AND $8::text IS NULL AND $9::timestamptz IS NULL AND $10::timestamptz IS NULL
     )
     SELECT h.source, h.session_id, h.generation, h.level, h.idx, h.kind, h.occurred_at, h.rank,
            h.node_text, substring(b.content FROM 1 FOR 65536) AS head, coalesce(b.valid_utf8, true) AS valid_utf8
       FROM hits h LEFT JOIN optchat.blobs b ON b.hash = h.payload_hash
      ORDER BY h.rank DESC, h.occurred_at DESC NULLS LAST, h.source, h.session_id, h.level, h.idx
      OFFSET $11::int LIMIT $12::int`,
    [
      scope.scopeId,
      tsquery,
      scope.publicationHighWater,
      scope.ownSessionId,
      scope.ownGeneration,
      scope.ownBoundary,
      scope.sharedTreeId,
      filters.sessionId ?? null,
      filters.before ?? null,
      filters.after ?? null,
      offset,
      limit,
    ],
  );
  return result.rows.map((row) => ({
    source: row.source,
    sessionId: row.session_id,
    generation: row.generation,
    level: row.level,
    index: Number(row.idx),
    kind: row.kind,
    occurredAt: row.occurred_at,
    rank: row.rank,
    text: row.node_text ?? payloadAsText(row.head ?? Buffer.alloc(0)),
    validUtf8: row.valid_utf8,
  }));
}
