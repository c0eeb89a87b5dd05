-- View revisions stored as changes, and no separate event log (issue 9 item 6: with no compactor running, 59,500
-- records wrote 8,666 revisions of 811 parts each, 27 MB, and tree_events grew 3.6 rows per record).
--
-- 1. A view part is a row valid over a range of revisions: it enters the view at from_revision and leaves it (merged
--    into its parent) at until_revision. Parts are never split and a merged part never returns (seed 002 §5.2), so
--    every node address appears at most once per tree: at most 2N-1 rows for N leaves, and every revision R stays
--    exactly reproducible as the parts with from_revision <= R < until_revision. A revision row keeps only its facts
--    (event, size, thresholds); an append writes one part row instead of the whole frontier.
-- 2. The fold's events are derived, not stored: a built event is the node row committed at it (nodes.tree_event), and
--    every other event number up to trees.event_count is an append, of the leaves in order (leaves are appended
--    strictly in order). tree_events duplicated exactly that; it is checked against the derivation and dropped.
-- 3. The tree row carries the latest fold state's size and mode, so a writer holding the tree lock can append a leaf
--    without reading the frontier when no merge can follow (src/core/fold.ts appendWithoutFit).

CREATE TABLE optchat.view_parts (
  tree_id         bigint NOT NULL REFERENCES optchat.trees (tree_id),
  level           integer NOT NULL CHECK (level >= 0 AND level <= 40),
  idx             bigint NOT NULL CHECK (idx >= 0),
  from_revision   integer NOT NULL CHECK (from_revision >= 1),
  until_revision  integer,                  -- null: still in the latest revision
  PRIMARY KEY (tree_id, level, idx),
  CHECK (until_revision IS NULL OR until_revision > from_revision)
);
-- The latest revision's parts (until_revision IS NULL sorts last), and an older revision's as the parts that left
-- after it plus the current ones: a recently pinned revision reads little more than the current frontier.
CREATE INDEX view_parts_until_idx ON optchat.view_parts (tree_id, until_revision) INCLUDE (from_revision, level, idx);

ALTER TABLE optchat.trees
  ADD COLUMN view_bytes integer NOT NULL DEFAULT 0,
  ADD COLUMN view_shrinking boolean NOT NULL DEFAULT false,
  ADD COLUMN view_unbuilt integer NOT NULL DEFAULT 0;

-- Existing revisions become part intervals. Each part's revisions must be contiguous (the fold never brings a merged
-- part back); anything else is refused rather than stored differently.
CREATE TEMPORARY TABLE migrated_parts ON COMMIT DROP AS
SELECT v.tree_id, p.level, p.idx, min(v.revision) AS from_revision, max(v.revision) AS last_revision,
       count(*) AS revisions
  FROM optchat.view_revisions v CROSS JOIN LATERAL unnest(v.levels, v.idxs) AS p(level, idx)
 GROUP BY v.tree_id, p.level, p.idx;

DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM migrated_parts WHERE revisions <> last_revision - from_revision + 1) THEN
    RAISE EXCEPTION 'optchat: a view part leaves and re-enters its view (run optchat audit on the previous version; the view fold never does this)';
  END IF;
END $$;

INSERT INTO optchat.view_parts (tree_id, level, idx, from_revision, until_revision)
SELECT m.tree_id, m.level, m.idx, m.from_revision,
       CASE WHEN m.last_revision = t.view_revision THEN NULL ELSE m.last_revision + 1 END
  FROM migrated_parts m JOIN optchat.trees t ON t.tree_id = m.tree_id;

UPDATE optchat.trees t SET view_bytes = v.bytes, view_shrinking = v.shrinking, view_unbuilt = v.unbuilt
  FROM optchat.view_revisions v WHERE v.tree_id = t.tree_id AND v.revision = t.view_revision;

ALTER TABLE optchat.view_revisions DROP COLUMN levels, DROP COLUMN idxs;

-- The event log must be exactly what the nodes and counters imply before it goes.
DO $$
BEGIN
  IF EXISTS (
       SELECT 1 FROM optchat.tree_events e
        WHERE e.kind = 'built' AND NOT EXISTS (
          SELECT 1 FROM optchat.nodes n
           WHERE n.tree_id = e.tree_id AND n.tree_event = e.event_no AND n.level = e.level AND n.idx = e.idx))
     OR EXISTS (
       SELECT 1 FROM optchat.nodes n
        WHERE NOT EXISTS (SELECT 1 FROM optchat.tree_events e
                           WHERE e.tree_id = n.tree_id AND e.event_no = n.tree_event AND e.kind = 'built'))
     OR EXISTS (
       SELECT 1 FROM (
         SELECT e.idx, row_number() OVER (PARTITION BY e.tree_id ORDER BY e.event_no) - 1 AS nth
           FROM optchat.tree_events e WHERE e.kind = 'append') a
        WHERE a.idx <> a.nth)
     OR EXISTS (
       SELECT 1 FROM optchat.trees t
        WHERE t.event_count <> (SELECT count(*) FROM optchat.tree_events e WHERE e.tree_id = t.tree_id)
           OR t.leaf_count <> (SELECT count(*) FROM optchat.tree_events e WHERE e.tree_id = t.tree_id AND e.kind = 'append'))
  THEN
    RAISE EXCEPTION 'optchat: tree_events disagrees with the nodes and tree counters (run optchat audit on the previous version)';
  END IF;
END $$;

DROP TABLE optchat.tree_events;
