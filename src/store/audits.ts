import { RETENTION_CHECKS } from "./audits-retention.js";
import type { Queryable } from "./db.js";
import { STUCK_TURN_ADVICE, stuckTurnsSql } from "./status.js";

export interface Violation {
  readonly audit:
    | "publication_integrity"
    | "publication_order"
    | "turn_visibility"
    | "snapshot_visibility"
    | "view_coverage"
    | "reachability"
    | "turn_liveness"
    | "retention"
    | "derivation";
  readonly subject: string;
  readonly problem: string;
}

/**
 * SQL audits of the invariants the design relies on. Each query returns the rows that break one invariant; an empty
 * result is a pass. They read everything, so they are for `optchat audit` and tests, not for hot paths.
 */
const CHECKS: readonly { audit: Violation["audit"]; problem: string; sql: string }[] = [
  {
    audit: "publication_integrity",
    problem: "publication numbers of the scope are not 0..n-1 matching the scope's counter",
    sql: `SELECT s.scope_id AS subject FROM optchat.scopes s
            LEFT JOIN optchat.publications p ON p.scope_id = s.scope_id
           GROUP BY s.scope_id, s.next_publication_seq
          HAVING count(p.publication_seq) <> s.next_publication_seq
              OR coalesce(max(p.publication_seq), -1) <> s.next_publication_seq - 1`,
  },
  {
    audit: "publication_integrity",
    // Ordered and disjoint from start_seq to end_seq_exclusive, with gaps where another turn's records lie between the
    // turn's own (exactly the turn's records: the turn_visibility checks below).
    problem: "the source cover is not ordered and disjoint from start_seq to end_seq_exclusive",
    sql: `SELECT p.scope_id || ':' || p.publication_seq AS subject FROM optchat.publications p
           WHERE cardinality(p.cover_levels) <> cardinality(p.cover_idxs) OR cardinality(p.cover_levels) = 0
              OR EXISTS (
                SELECT 1 FROM (
                  SELECT c.ord, c.idx * (1::bigint << c.level) AS start, (c.idx + 1) * (1::bigint << c.level) AS finish,
                         lag((c.idx + 1) * (1::bigint << c.level)) OVER (ORDER BY c.ord) AS previous_finish
                    FROM unnest(p.cover_levels, p.cover_idxs) WITH ORDINALITY AS c(level, idx, ord)
                ) t
                WHERE (t.ord = 1 AND t.start <> p.start_seq) OR (t.ord > 1 AND t.start < t.previous_finish)
              )
              OR (SELECT (c.idx + 1) * (1::bigint << c.level)
                    FROM unnest(p.cover_levels, p.cover_idxs) WITH ORDINALITY AS c(level, idx, ord)
                   ORDER BY c.ord DESC LIMIT 1) <> p.end_seq_exclusive`,
  },
  {
    audit: "publication_integrity",
    problem: "a record under the source cover is missing",
    sql: `SELECT p.scope_id || ':' || p.publication_seq AS subject FROM optchat.publications p
           WHERE p.retired_at IS NULL AND (SELECT count(*) FROM unnest(p.cover_levels, p.cover_idxs) AS c(level, idx)
                    JOIN optchat.records r ON r.session_id = p.session_id AND r.generation = p.generation
                     AND r.seq >= c.idx * (1::bigint << c.level) AND r.seq < (c.idx + 1) * (1::bigint << c.level))
                 <> (SELECT coalesce(sum(1::bigint << c.level), 0) FROM unnest(p.cover_levels) AS c(level))`,
  },
  {
    // The invariant of issue 9 item 4: what another session can read of a session (search, zoom on pub refs and on
    // the session ranges reachable from them, date, sessions) is what lies under its publications' source covers.
    audit: "turn_visibility",
    problem: "a record of a turn that is unfinished or unpublished is visible to other sessions (under a source cover)",
    sql: `SELECT p.scope_id || ':' || p.publication_seq || ' shows ' || r.session_id || ':' || r.generation || ':' || r.seq
                 || '+1 of turn ' || r.turn_id AS subject
            FROM optchat.publications p
            CROSS JOIN LATERAL unnest(p.cover_levels, p.cover_idxs) AS c(level, idx)
            JOIN optchat.records r ON r.session_id = p.session_id AND r.generation = p.generation
             AND r.seq >= c.idx * (1::bigint << c.level) AND r.seq < (c.idx + 1) * (1::bigint << c.level)
            LEFT JOIN optchat.turns tu ON tu.session_id = r.session_id AND tu.generation = r.generation AND tu.turn_id = r.turn_id
           -- A retired publication covers nothing any more (issue 15: its records are gone or no longer shared).
           WHERE p.retired_at IS NULL AND (tu.turn_id IS NULL OR tu.state = 'active'
              OR NOT EXISTS (SELECT 1 FROM optchat.publications q
                              WHERE q.scope_id = tu.scope_id AND q.session_id = tu.session_id
                                AND q.generation = tu.generation AND q.turn_id = tu.turn_id))`,
  },
  {
    audit: "turn_visibility",
    problem:
      "a publication's source cover is not exactly its turn's records in its range (another turn's record, or one of its own left out)",
    sql: `SELECT DISTINCT p.scope_id || ':' || p.publication_seq AS subject
            FROM optchat.publications p
            JOIN optchat.records r ON r.session_id = p.session_id AND r.generation = p.generation
             AND r.seq >= p.start_seq AND r.seq < p.end_seq_exclusive
           WHERE p.retired_at IS NULL AND (r.turn_id = p.turn_id) <> EXISTS (
                   SELECT 1 FROM unnest(p.cover_levels, p.cover_idxs) AS c(level, idx)
                    WHERE r.seq >= c.idx * (1::bigint << c.level) AND r.seq < (c.idx + 1) * (1::bigint << c.level))`,
  },
  {
    audit: "publication_order",
    problem: "a session's turns were published out of their admission order",
    sql: `SELECT DISTINCT a.session_id || ':' || a.generation || ':' || a.turn_id || ' before ' || b.turn_id AS subject
            FROM optchat.turns a
            JOIN optchat.turns b ON b.session_id = a.session_id AND b.generation = a.generation
             AND b.admission_seq > a.admission_seq
            JOIN optchat.publications pa ON pa.scope_id = a.scope_id AND pa.session_id = a.session_id
             AND pa.generation = a.generation AND pa.turn_id = a.turn_id
            JOIN optchat.publications pb ON pb.scope_id = b.scope_id AND pb.session_id = b.session_id
             AND pb.generation = b.generation AND pb.turn_id = b.turn_id
           WHERE pb.publication_seq < pa.publication_seq`,
  },
  {
    audit: "publication_order",
    problem:
      "a turn's publication state disagrees with its publications, or a later turn is published before a pending one",
    sql: `SELECT tu.session_id || ':' || tu.generation || ':' || tu.turn_id AS subject FROM optchat.turns tu
           WHERE (tu.publication_state = 'published') <> EXISTS (
                   SELECT 1 FROM optchat.publications p WHERE p.scope_id = tu.scope_id AND p.session_id = tu.session_id
                      AND p.generation = tu.generation AND p.turn_id = tu.turn_id)
              OR (tu.publication_state = 'pending' AND EXISTS (
                   SELECT 1 FROM optchat.turns later
                    WHERE later.session_id = tu.session_id AND later.generation = tu.generation
                      AND later.admission_seq > tu.admission_seq AND later.publication_state = 'published'))`,
  },
  {
    audit: "publication_integrity",
    problem: "a node of the source cover is not durable",
    sql: `SELECT p.scope_id || ':' || p.publication_seq AS subject FROM optchat.publications p
            JOIN optchat.trees t ON t.kind = 'session' AND t.session_id = p.session_id AND t.generation = p.generation
            CROSS JOIN LATERAL unnest(p.cover_levels, p.cover_idxs) AS c(level, idx)
           WHERE p.retired_at IS NULL
             AND NOT EXISTS (SELECT 1 FROM optchat.nodes n WHERE n.tree_id = t.tree_id AND n.level = c.level AND n.idx = c.idx)`,
  },
  {
    audit: "publication_integrity",
    problem: "the publication has no leaf in the shared tree, or the shared tree's leaves are not the publications",
    sql: `SELECT p.scope_id || ':' || p.publication_seq AS subject FROM optchat.publications p
            JOIN optchat.trees t ON t.kind = 'shared' AND t.scope_id = p.scope_id
           WHERE NOT EXISTS (SELECT 1 FROM optchat.nodes n WHERE n.tree_id = t.tree_id AND n.level = 0 AND n.idx = p.publication_seq)
          UNION ALL
          SELECT t.scope_id || ':tree' FROM optchat.trees t JOIN optchat.scopes s ON s.scope_id = t.scope_id
           WHERE t.kind = 'shared' AND (t.leaf_count <> s.next_publication_seq OR t.built_leaves <> t.leaf_count)`,
  },
  {
    audit: "snapshot_visibility",
    problem:
      "a turn's snapshot reaches beyond what was published, or pins a shared view revision beyond its high-water mark",
    sql: `SELECT tu.session_id || ':' || tu.generation || ':' || tu.turn_id AS subject FROM optchat.turns tu
            JOIN optchat.scopes s ON s.scope_id = tu.scope_id
            LEFT JOIN optchat.view_revisions v ON v.tree_id = tu.shared_tree_id AND v.revision = tu.shared_view_revision
           -- A snapshot from before the scope's retention epoch is never read again (re-pinned or refused first:
           -- src/memory/retention-epoch.ts); the revision it names may be gone with the deletion.
           WHERE tu.retention_epoch = s.retention_epoch AND (tu.publication_high_water > s.next_publication_seq
              OR (tu.shared_view_revision IS NOT NULL AND (v.revision IS NULL OR v.leaf_count > tu.publication_high_water)))`,
  },
  {
    audit: "snapshot_visibility",
    problem: "a turn's own boundary lies beyond its generation's records, or its shared tree belongs to another scope",
    sql: `SELECT tu.session_id || ':' || tu.generation || ':' || tu.turn_id AS subject FROM optchat.turns tu
            JOIN optchat.generations g ON g.session_id = tu.session_id AND g.generation = tu.generation
            LEFT JOIN optchat.trees st ON st.tree_id = tu.shared_tree_id
           WHERE tu.own_boundary > g.next_seq
              OR (tu.shared_tree_id IS NOT NULL AND (st.kind <> 'shared' OR st.scope_id <> tu.scope_id))`,
  },
  {
    audit: "snapshot_visibility",
    problem:
      "a node address does not resolve to exactly one revision at some revision epoch (migration 014: a revision superseded by a rebuild must end at the epoch its successor starts), or a turn pins an epoch the clock has not reached",
    sql: `SELECT n.tree_id || ':' || n.level || ':' || n.idx || ' revision ' || n.revision AS subject FROM optchat.nodes n
           WHERE n.superseded_epoch IS NOT NULL AND NOT EXISTS (
             SELECT 1 FROM optchat.nodes m
              WHERE m.tree_id = n.tree_id AND m.level = n.level AND m.idx = n.idx
                AND m.revision = (SELECT min(k.revision) FROM optchat.nodes k
                                   WHERE k.tree_id = n.tree_id AND k.level = n.level AND k.idx = n.idx AND k.revision > n.revision)
                AND m.revision_epoch = n.superseded_epoch)
          UNION ALL
          SELECT tu.session_id || ':' || tu.generation || ':' || tu.turn_id FROM optchat.turns tu
           WHERE tu.revision_epoch > (SELECT epoch FROM optchat.revision_clock)`,
  },
  {
    audit: "turn_liveness",
    problem: `stuck: the turn is still active but no process holds its session (the lease expired); ${STUCK_TURN_ADVICE}`,
    sql: `SELECT x.session_id || ':' || x.turn_id || ' (OpenCode session ' || x.host_session_id || ', last holder ' || x.holder || ')' AS subject
            FROM (${stuckTurnsSql({ session: "NULL::text", project: "NULL::text", holderGone: "false" })}) x`,
  },
  {
    audit: "reachability",
    problem: "a session leaf has no retained source record or payload",
    sql: `SELECT t.session_id || ':' || t.generation || ':' || n.idx || '+1' AS subject FROM optchat.nodes n
            JOIN optchat.trees t ON t.tree_id = n.tree_id AND t.kind = 'session'
           WHERE n.level = 0 AND NOT EXISTS (
             SELECT 1 FROM optchat.records r JOIN optchat.blobs b ON b.hash = r.payload_hash
              WHERE r.session_id = t.session_id AND r.generation = t.generation AND r.seq = n.idx)`,
  },
  {
    audit: "reachability",
    problem: "a parent node's children are missing",
    sql: `SELECT n.tree_id || ':' || (n.idx * (1::bigint << n.level)) || '+' || (1::bigint << n.level) AS subject FROM optchat.nodes n
           WHERE n.level > 0 AND (SELECT count(DISTINCT c.idx) FROM optchat.nodes c
                                   WHERE c.tree_id = n.tree_id AND c.level = n.level - 1 AND c.idx IN (2 * n.idx, 2 * n.idx + 1)) <> 2`,
  },
  {
    audit: "reachability",
    problem: "a shared leaf has no publication",
    sql: `SELECT t.scope_id || ':' || n.idx AS subject FROM optchat.nodes n
            JOIN optchat.trees t ON t.tree_id = n.tree_id AND t.kind = 'shared'
           WHERE n.level = 0 AND NOT EXISTS (
             SELECT 1 FROM optchat.publications p WHERE p.scope_id = t.scope_id AND p.publication_seq = n.idx)`,
  },
];

export async function runSqlAudits(db: Queryable): Promise<Violation[]> {
  const violations: Violation[] = [];
  for (const check of [...CHECKS, ...RETENTION_CHECKS]) {
    const result = await db.query<{ subject: string }>(check.sql);
    for (const row of result.rows)
      violations.push({ audit: check.audit, subject: row.subject, problem: check.problem });
  }
  return violations;
}

export async function listTreeIds(db: Queryable): Promise<{ treeId: number; label: string }[]> {
  const result = await db.query<{ tree_id: number; label: string }>(
    `SELECT tree_id, CASE WHEN kind = 'shared' THEN 'shared:' || scope_id ELSE session_id || ':' || generation END AS label
       FROM optchat.trees ORDER BY tree_id`,
  );
  return result.rows.map((row) => ({ treeId: Number(row.tree_id), label: row.label }));
}
