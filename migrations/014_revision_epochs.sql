-- Revision epochs (issue 15 item 1: "a pinned snapshot keeps resolving exactly the revisions it pinned"; docs/compactor.md
-- "Revisions and rebuild").
--
-- 013 let a view revision resolve its parts to the node revisions committed at or before its own event, which covers
-- what a turn was shown. Every other read under a turn's snapshot (a zoom into another session's tree, into the own
-- tree before the turn's first assembly, into a publication's cover; search over summaries) had no such pin and read
-- the newest revisions, so a turn admitted before a rebuild could meet texts written after it. An epoch pins them all:
--
-- - optchat.revision_clock holds one counter. A rebuild's commit advances it once (under its tree locks, in its own
--   transaction), and every revision it writes carries the new value (nodes.revision_epoch); the revision it replaces
--   gets the same value as superseded_epoch. A first build (revision 0) carries 0: a node that did not exist at a
--   snapshot is read as it is now, as before (the range checks decide whether a turn may see it at all).
-- - A turn pins the counter at admission (turns.revision_epoch), in the same statement as its shared view, so the two
--   agree; a re-pin (retention epoch) takes it again.
-- - A reader at epoch R sees, of each address, the one revision with revision_epoch <= R that was not superseded at
--   or before R: `revision_epoch <= R AND (NOT superseded OR superseded_epoch > R)`. A revision superseded otherwise
--   (none today; superseded_epoch NULL) is seen by nobody.
-- - A revision superseded by a rebuild keeps its search vector now (013 cleared it), so a pinned search still finds the
--   old text; the search statistics keep counting only revisions that are not superseded.
CREATE TABLE optchat.revision_clock (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  epoch     integer NOT NULL CHECK (epoch >= 0)
);
-- Rebuilds committed before this migration are epoch 1 (their superseded rows had their search vectors cleared by 013:
-- a turn pinned before them and still running finds their old texts by zoom, not by search).
INSERT INTO optchat.revision_clock (epoch)
SELECT CASE WHEN EXISTS (SELECT 1 FROM optchat.nodes WHERE superseded) THEN 1 ELSE 0 END;

ALTER TABLE optchat.nodes
  ADD COLUMN revision_epoch integer NOT NULL DEFAULT 0 CHECK (revision_epoch >= 0),
  ADD COLUMN superseded_epoch integer CHECK (superseded_epoch IS NULL OR (superseded AND superseded_epoch >= revision_epoch));

UPDATE optchat.nodes SET superseded_epoch = 1 WHERE superseded;
UPDATE optchat.nodes n SET revision_epoch = 1
 WHERE n.revision > 0 AND EXISTS (SELECT 1 FROM optchat.nodes m
                                   WHERE m.tree_id = n.tree_id AND m.level = n.level AND m.idx = n.idx
                                     AND m.revision < n.revision AND m.superseded);

-- Every turn admitted so far read the newest revisions: it keeps doing so.
ALTER TABLE optchat.turns ADD COLUMN revision_epoch integer NOT NULL DEFAULT 0;
UPDATE optchat.turns SET revision_epoch = (SELECT epoch FROM optchat.revision_clock) WHERE revision_epoch = 0;
