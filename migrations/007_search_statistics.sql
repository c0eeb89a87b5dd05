-- Term statistics for BM25 ranking (issue 10): how many records of a scope contain each term, and the scope's
-- record and summary counts and total lengths. Search reads them to weight query words by rarity and to normalise
-- by document length; they are per scope, so one scope's content never changes another's scores.
--
-- Rows are per session (records) and per tree (summary nodes), not per scope, so that the writers of different
-- sessions of one scope never update the same row: the record ingest upserts its own session's rows in the same
-- statement that writes the records (src/store/ingest-commit.ts), and a session has one writer at a time. A scope's
-- figure is the sum over its sessions' rows, read through the primary key for the query's few terms.
--
-- Length is the number of distinct terms of a document (tsvector length(), O(1) to read), the same measure search
-- uses for the document being scored. Records and nodes are never deleted; statistics count every generation of a
-- session (an older generation's records stay counted after a reset, a bounded overcount).

CREATE TABLE optchat.search_term_counts (
  scope_id    text NOT NULL REFERENCES optchat.scopes (scope_id),
  term        text COLLATE "C" NOT NULL,
  session_id  text NOT NULL,
  documents   bigint NOT NULL CHECK (documents > 0),
  PRIMARY KEY (scope_id, term, session_id)
);

CREATE TABLE optchat.search_session_stats (
  scope_id      text NOT NULL REFERENCES optchat.scopes (scope_id),
  session_id    text NOT NULL,
  documents     bigint NOT NULL CHECK (documents >= 0),
  total_length  bigint NOT NULL CHECK (total_length >= 0),
  PRIMARY KEY (scope_id, session_id)
);

CREATE TABLE optchat.search_tree_stats (
  scope_id      text NOT NULL REFERENCES optchat.scopes (scope_id),
  tree_id       bigint NOT NULL REFERENCES optchat.trees (tree_id),
  documents     bigint NOT NULL CHECK (documents >= 0),
  total_length  bigint NOT NULL CHECK (total_length >= 0),
  PRIMARY KEY (scope_id, tree_id)
);

-- Backfill from the vectors already stored.
INSERT INTO optchat.search_term_counts (scope_id, term, session_id, documents)
SELECT s.scope_id, u.lexeme, r.session_id, count(*)
  FROM optchat.records r
  JOIN optchat.sessions s ON s.session_id = r.session_id
  CROSS JOIN LATERAL unnest(r.search) AS u(lexeme, positions, weights)
 WHERE r.search IS NOT NULL
 GROUP BY s.scope_id, u.lexeme, r.session_id;

INSERT INTO optchat.search_session_stats (scope_id, session_id, documents, total_length)
SELECT s.scope_id, r.session_id, count(*), coalesce(sum(length(r.search)), 0)
  FROM optchat.records r
  JOIN optchat.sessions s ON s.session_id = r.session_id
 WHERE r.search IS NOT NULL
 GROUP BY s.scope_id, r.session_id;

INSERT INTO optchat.search_tree_stats (scope_id, tree_id, documents, total_length)
SELECT coalesce(t.scope_id, s.scope_id), n.tree_id, count(*), coalesce(sum(length(n.search)), 0)
  FROM optchat.nodes n
  JOIN optchat.trees t ON t.tree_id = n.tree_id
  LEFT JOIN optchat.sessions s ON s.session_id = t.session_id
 WHERE n.search IS NOT NULL
 GROUP BY coalesce(t.scope_id, s.scope_id), n.tree_id;
