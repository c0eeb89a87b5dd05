/**
 * Audits of deletion and revocation (issue 15 item 4): nothing surviving derives from removed sources. Each query
 * returns the rows that break one invariant (empty = pass), like audits.ts, which runs them.
 *
 * Derivation is proved by input hashes: every node records the SHA-256 of what it was built from (a session leaf: its
 * record's payload; a parent: each child's text; a shared leaf: each source-cover node's text). If every node's
 * hashes match its inputs as they are now, then by induction every surviving text derives only from surviving records
 * (a node built from removed text would hash text that no longer exists anywhere).
 */
export const RETENTION_CHECKS: readonly { audit: "retention" | "derivation"; problem: string; sql: string }[] = [
  {
    audit: "retention",
    problem:
      "a forgotten session still has content (records, staged items, a tree, live publications, turn queries, injections)",
    sql: `SELECT s.session_id || ' keeps ' || x.what AS subject FROM optchat.sessions s
            CROSS JOIN LATERAL (
              SELECT 'records' WHERE EXISTS (SELECT 1 FROM optchat.records r WHERE r.session_id = s.session_id)
              UNION ALL SELECT 'staged items' WHERE EXISTS (SELECT 1 FROM optchat.staged_items i WHERE i.session_id = s.session_id)
              UNION ALL SELECT 'a session tree' WHERE EXISTS (SELECT 1 FROM optchat.trees t WHERE t.session_id = s.session_id)
              UNION ALL SELECT 'live publications' WHERE EXISTS (
                SELECT 1 FROM optchat.publications p WHERE p.session_id = s.session_id AND p.retired_at IS NULL)
              UNION ALL SELECT 'turn queries' WHERE EXISTS (
                SELECT 1 FROM optchat.turns tu WHERE tu.session_id = s.session_id AND tu.query IS NOT NULL)
              UNION ALL SELECT 'injections' WHERE EXISTS (SELECT 1 FROM optchat.injections j WHERE j.session_id = s.session_id)
              UNION ALL SELECT 'a title' WHERE s.title IS NOT NULL
            ) x(what)
           WHERE s.deleted_at IS NOT NULL`,
  },
  {
    audit: "retention",
    problem: "a retired publication's shared leaf is not the removed marker",
    sql: `SELECT p.scope_id || ':' || p.publication_seq AS subject FROM optchat.publications p
            JOIN optchat.trees t ON t.kind = 'shared' AND t.scope_id = p.scope_id
            JOIN optchat.nodes n ON n.tree_id = t.tree_id AND n.level = 0 AND n.idx = p.publication_seq
           WHERE p.retired_at IS NOT NULL AND (n.summarizer <> 'removed' OR cardinality(n.input_hashes) <> 0
              OR n.text NOT LIKE '[removed: %')`,
  },
  {
    audit: "derivation",
    problem: "a summary's input hashes are not its children's texts (it derives from text that is gone)",
    sql: `SELECT n.tree_id || ':' || (n.idx * (1::bigint << n.level)) || '+' || (1::bigint << n.level) AS subject
            FROM optchat.nodes n
           WHERE n.level > 0 AND n.input_hashes IS DISTINCT FROM ARRAY(
             SELECT (SELECT sha256(convert_to(c.text, 'UTF8')) FROM optchat.nodes c
                      WHERE c.tree_id = n.tree_id AND c.level = n.level - 1 AND c.idx = k.idx AND c.tree_event <= n.tree_event
                      ORDER BY c.revision DESC LIMIT 1)
               FROM unnest(ARRAY[2 * n.idx, 2 * n.idx + 1]) WITH ORDINALITY AS k(idx, ord) ORDER BY k.ord)`,
  },
  {
    audit: "derivation",
    problem: "a session leaf's input hash is not its record's payload",
    // A correlated lookup by the records' key: as a join, a planner without statistics on new rows nested the two
    // per-session scans (2.9 s for 5,000 records, quadratic in a session's records; bench delete hit the timeout).
    sql: `SELECT t.session_id || ':' || t.generation || ':' || n.idx || '+1' AS subject FROM optchat.nodes n
            JOIN optchat.trees t ON t.tree_id = n.tree_id AND t.kind = 'session'
           WHERE n.level = 0 AND n.input_hashes IS DISTINCT FROM ARRAY[(
             SELECT r.payload_hash FROM optchat.records r
              WHERE r.session_id = t.session_id AND r.generation = t.generation AND r.seq = n.idx)]`,
  },
  {
    audit: "derivation",
    problem: "a live publication's shared leaf does not hash its source cover's texts",
    sql: `SELECT p.scope_id || ':' || p.publication_seq AS subject FROM optchat.publications p
            JOIN optchat.trees t ON t.kind = 'shared' AND t.scope_id = p.scope_id
            JOIN optchat.nodes n ON n.tree_id = t.tree_id AND n.level = 0 AND n.idx = p.publication_seq
            JOIN optchat.trees st ON st.kind = 'session' AND st.session_id = p.session_id AND st.generation = p.generation
           -- The newest revision of the leaf (migration 013): an older one hashes the cover's texts before a rebuild.
           WHERE p.retired_at IS NULL AND NOT n.superseded AND n.input_hashes IS DISTINCT FROM ARRAY(
             SELECT sha256(convert_to(coalesce((SELECT c.text FROM optchat.nodes c
                      WHERE c.tree_id = st.tree_id AND c.level = cv.level AND c.idx = cv.idx
                      ORDER BY c.revision DESC LIMIT 1), ''), 'UTF8'))
               FROM unnest(p.cover_levels, p.cover_idxs) WITH ORDINALITY AS cv(level, idx, ord) ORDER BY cv.ord)`,
  },
  {
    audit: "retention",
    problem: "a scope's search statistics differ from a recount of its live published records and its nodes",
    sql: `WITH published AS (
            SELECT p.scope_id, r.search FROM optchat.publications p
              JOIN optchat.records r ON r.session_id = p.session_id AND r.generation = p.generation AND r.turn_id = p.turn_id
               AND r.seq >= p.start_seq AND r.seq < p.end_seq_exclusive
             WHERE p.retired_at IS NULL AND r.search IS NOT NULL
          ), terms AS (
            SELECT scope_id, u.lexeme AS term, count(*) AS documents
              FROM published CROSS JOIN LATERAL unnest(search) AS u(lexeme, positions, weights) GROUP BY scope_id, u.lexeme
          ), lengths AS (
            SELECT scope_id, count(*) AS documents, sum(length(search)) AS total_length FROM published GROUP BY scope_id
          ), trees AS (
            SELECT coalesce(t.scope_id, s.scope_id) AS scope_id, n.tree_id, count(*) AS documents,
                   coalesce(sum(length(n.search)), 0) AS total_length
              FROM optchat.nodes n JOIN optchat.trees t ON t.tree_id = n.tree_id
              LEFT JOIN optchat.sessions s ON s.session_id = t.session_id
             WHERE n.search IS NOT NULL AND NOT n.superseded GROUP BY 1, 2
          )
          SELECT coalesce(a.scope_id, b.scope_id) || ' term ' || coalesce(a.term, b.term) AS subject
            FROM optchat.search_term_counts a FULL JOIN terms b ON b.scope_id = a.scope_id AND b.term = a.term
           WHERE a.documents IS DISTINCT FROM b.documents
          UNION ALL
          SELECT coalesce(a.scope_id, b.scope_id) || ' records' FROM (SELECT * FROM optchat.search_scope_stats WHERE documents > 0) a
            FULL JOIN lengths b ON b.scope_id = a.scope_id
           WHERE a.documents IS DISTINCT FROM b.documents OR a.total_length IS DISTINCT FROM b.total_length
          UNION ALL
          SELECT coalesce(a.scope_id, b.scope_id) || ' tree ' || coalesce(a.tree_id, b.tree_id)
            FROM (SELECT * FROM optchat.search_tree_stats WHERE documents > 0) a
            FULL JOIN trees b ON b.scope_id = a.scope_id AND b.tree_id = a.tree_id
           WHERE a.documents IS DISTINCT FROM b.documents OR a.total_length IS DISTINCT FROM b.total_length`,
  },
];
