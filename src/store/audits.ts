import type { Queryable } from "./db.js";
import { STUCK_TURN_ADVICE, STUCK_TURNS_SQL } from "./status.js";

export interface Violation {
  readonly audit: "publication_integrity" | "snapshot_visibility" | "view_coverage" | "reachability" | "turn_liveness";
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
    problem: "the source cover does not tile [start_seq, end_seq_exclusive) in order",
    sql: `SELECT p.scope_id || ':' || p.publication_seq AS subject FROM optchat.publications p
           WHERE cardinality(p.cover_levels) <> cardinality(p.cover_idxs) OR cardinality(p.cover_levels) = 0
              OR EXISTS (
                SELECT 1 FROM (
                  SELECT c.ord, c.idx * (1::bigint << c.level) AS start, (c.idx + 1) * (1::bigint << c.level) AS finish,
                         lag((c.idx + 1) * (1::bigint << c.level)) OVER (ORDER BY c.ord) AS previous_finish
                    FROM unnest(p.cover_levels, p.cover_idxs) WITH ORDINALITY AS c(level, idx, ord)
                ) t
                WHERE (t.ord = 1 AND t.start <> p.start_seq) OR (t.ord > 1 AND t.start <> t.previous_finish)
              )
              OR (SELECT (c.idx + 1) * (1::bigint << c.level)
                    FROM unnest(p.cover_levels, p.cover_idxs) WITH ORDINALITY AS c(level, idx, ord)
                   ORDER BY c.ord DESC LIMIT 1) <> p.end_seq_exclusive`,
  },
  {
    audit: "publication_integrity",
    problem: "a record of the published range is missing",
    sql: `SELECT p.scope_id || ':' || p.publication_seq AS subject FROM optchat.publications p
           WHERE (SELECT count(*) FROM optchat.records r WHERE r.session_id = p.session_id AND r.generation = p.generation
                     AND r.seq >= p.start_seq AND r.seq < p.end_seq_exclusive) <> p.end_seq_exclusive - p.start_seq`,
  },
  {
    audit: "publication_integrity",
    problem: "a node of the source cover is not durable",
    sql: `SELECT p.scope_id || ':' || p.publication_seq AS subject FROM optchat.publications p
            JOIN optchat.trees t ON t.kind = 'session' AND t.session_id = p.session_id AND t.generation = p.generation
            CROSS JOIN LATERAL unnest(p.cover_levels, p.cover_idxs) AS c(level, idx)
           WHERE NOT EXISTS (SELECT 1 FROM optchat.nodes n WHERE n.tree_id = t.tree_id AND n.level = c.level AND n.idx = c.idx)`,
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
           WHERE tu.publication_high_water > s.next_publication_seq
              OR (tu.shared_view_revision IS NOT NULL AND (v.revision IS NULL OR v.leaf_count > tu.publication_high_water))`,
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
    audit: "turn_liveness",
    problem: `stuck: the turn is still active but no process holds its session (the lease expired); ${STUCK_TURN_ADVICE}`,
    sql: `SELECT x.session_id || ':' || x.turn_id || ' (OpenCode session ' || x.host_session_id || ', last holder ' || x.holder || ')' AS subject
            FROM (${STUCK_TURNS_SQL.replaceAll("$1::text", "NULL::text").replaceAll("$2::boolean", "false")}) x`,
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
  for (const check of CHECKS) {
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
