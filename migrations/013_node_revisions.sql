-- Node revisions (issue 15 item 1; docs/compactor.md "Revisions and rebuild").
--
-- A node address (tree, level, idx) may hold several revisions (002 made `revision` part of the key): `optchat rebuild`
-- commits a new revision of a node built by an older model or prompt version, or of a labelled fallback, and of every
-- node derived from it. Each revision row keeps what it was made from (input_hashes), the summarizer identity (the
-- provider and model, or 'free' / 'fallback' / 'removed') and the prompt version. A view revision resolves each part to
-- the newest node revision committed at or before its own event (nodes.tree_event), so a pinned view keeps reading the
-- revisions it pinned while newer views read the new ones.
--
-- `superseded` marks every revision but the newest of its address. Only the newest is searched and counted (its search
-- vector is kept, a superseded one's is cleared, and the tree's search statistics count exactly the rows that have
-- one), and only the newest counts as a fallback or derives a publication's shared leaf; superseded rows stay for the
-- pinned views and the audit's refold (their build events are part of the fold's derived log).
ALTER TABLE optchat.nodes ADD COLUMN superseded boolean NOT NULL DEFAULT false;

-- Rows written before this migration: every revision below the newest of its address (none exist in practice: no
-- code path wrote a second revision before this migration, except the marker leaves of retired publications, which were updated
-- in place).
WITH older AS (
  SELECT n.tree_id, n.level, n.idx, n.revision, length(n.search) AS terms FROM optchat.nodes n
   WHERE EXISTS (SELECT 1 FROM optchat.nodes m
                  WHERE m.tree_id = n.tree_id AND m.level = n.level AND m.idx = n.idx AND m.revision > n.revision)
), stats AS (
  UPDATE optchat.search_tree_stats s
     SET documents = s.documents - x.documents, total_length = s.total_length - x.total_length
    FROM (SELECT tree_id, count(terms) AS documents, coalesce(sum(terms), 0) AS total_length FROM older GROUP BY tree_id) x
   WHERE s.tree_id = x.tree_id
)
UPDATE optchat.nodes n SET superseded = true, search = NULL
  FROM older o WHERE n.tree_id = o.tree_id AND n.level = o.level AND n.idx = o.idx AND n.revision = o.revision;

-- Current fallbacks only: a fallback replaced by a rebuild is no longer counted by status, cost and memory_inspect.
DROP INDEX optchat.nodes_fallback_idx;
CREATE INDEX nodes_fallback_idx ON optchat.nodes (built_at) WHERE summarizer = 'fallback' AND NOT superseded;
