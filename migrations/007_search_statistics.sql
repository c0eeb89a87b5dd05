-- Term statistics for BM25 ranking (issue 10): how many published records of a scope contain each term, and the
-- scope's record and summary counts and total lengths. Search reads them to weight query words by rarity and to
-- normalise by document length; they are per scope, so one scope's content never changes another's scores.
--
-- Records are counted when their turn is published (src/store/publications.ts insertPublication, in the statement
-- that inserts the publication, under the scope row's lock): off the ingest path, one writer per scope at a time,
-- and an unpublished turn's words never move a score. A turn not yet published (the caller's own recent history) is
-- searchable but not counted yet: a bounded lag, documented in docs/shared-memory.md. Summary nodes are counted per
-- tree when written (src/store/tree-changes.ts insertNode; the writer holds the tree row's lock).
--
-- Length is the number of distinct terms of a document (tsvector length(), read in O(1)), the same measure search
-- uses for the document being scored. Records and nodes are never deleted; every revision of a node is counted.

CREATE TABLE optchat.search_term_counts (
  scope_id    text NOT NULL REFERENCES optchat.scopes (scope_id),
  term        text COLLATE "C" NOT NULL,
  documents   bigint NOT NULL CHECK (documents > 0),
  PRIMARY KEY (scope_id, term)
);

CREATE TABLE optchat.search_scope_stats (
  scope_id      text PRIMARY KEY REFERENCES optchat.scopes (scope_id),
  documents     bigint NOT NULL CHECK (documents >= 0),
  total_length  bigint NOT NULL CHECK (total_length >= 0)
);

CREATE TABLE optchat.search_tree_stats (
  scope_id      text NOT NULL REFERENCES optchat.scopes (scope_id),
  tree_id       bigint NOT NULL REFERENCES optchat.trees (tree_id),
  documents     bigint NOT NULL CHECK (documents >= 0),
  total_length  bigint NOT NULL CHECK (total_length >= 0),
  PRIMARY KEY (scope_id, tree_id)
);

-- Backfill from the vectors already stored: the records of published turns, and every node.
CREATE TEMPORARY TABLE published_search ON COMMIT DROP AS
SELECT p.scope_id, r.search
  FROM optchat.publications p
  JOIN optchat.records r ON r.session_id = p.session_id AND r.generation = p.generation AND r.turn_id = p.turn_id
   AND r.seq >= p.start_seq AND r.seq < p.end_seq_exclusive
 WHERE r.search IS NOT NULL;

INSERT INTO optchat.search_term_counts (scope_id, term, documents)
SELECT ps.scope_id, u.lexeme, count(*)
  FROM published_search ps CROSS JOIN LATERAL unnest(ps.search) AS u(lexeme, positions, weights)
 GROUP BY ps.scope_id, u.lexeme;

INSERT INTO optchat.search_scope_stats (scope_id, documents, total_length)
SELECT scope_id, count(*), coalesce(sum(length(search)), 0) FROM published_search GROUP BY scope_id;

INSERT INTO optchat.search_tree_stats (scope_id, tree_id, documents, total_length)
SELECT coalesce(t.scope_id, s.scope_id), n.tree_id, count(*), coalesce(sum(length(n.search)), 0)
  FROM optchat.nodes n
  JOIN optchat.trees t ON t.tree_id = n.tree_id
  LEFT JOIN optchat.sessions s ON s.session_id = t.session_id
 WHERE n.search IS NOT NULL
 GROUP BY coalesce(t.scope_id, s.scope_id), n.tree_id;
