-- A turn's records and the order of a session's publications (issue 9, items 4 and 5; docs/shared-memory.md).
--
-- Records carry their turn, and a turn's records may interleave with another turn's (a prompt queued during a tool
-- call is stored between the running turn's records). A turn therefore owns a set of records, stored at finish as
-- maximal runs of consecutive seqs; its publication covers exactly those runs, never a record of another turn.
-- A session's turns are published in admission order, and a turn's publication is scheduled by the commit that makes
-- it ready (its outcome, the last node of its cover, the publication of the turn before it), never by polling.

-- Admission order within a session: one sequence for all turns (only the order matters, gaps are harmless).
CREATE SEQUENCE optchat.turn_admission_seq;
ALTER TABLE optchat.turns
  ADD COLUMN admission_seq bigint,
  -- Set when the turn finishes: its records sealed by then, as runs [run_starts[k], run_ends[k]) in seq order.
  ADD COLUMN run_starts bigint[],
  ADD COLUMN run_ends bigint[],
  -- pending: will be published (active, or finished and waiting for its cover or for the session's earlier turns);
  -- published; none: nothing to publish (a session that does not publish, or a turn without records).
  ADD COLUMN publication_state text;

UPDATE optchat.turns t SET admission_seq = o.n
  FROM (SELECT session_id, generation, turn_id,
               row_number() OVER (ORDER BY admitted_at, session_id, generation, turn_id) AS n
          FROM optchat.turns) o
 WHERE o.session_id = t.session_id AND o.generation = t.generation AND o.turn_id = t.turn_id;
SELECT setval('optchat.turn_admission_seq', coalesce((SELECT max(admission_seq) FROM optchat.turns), 0) + 1, false);
ALTER TABLE optchat.turns
  ALTER COLUMN admission_seq SET DEFAULT nextval('optchat.turn_admission_seq'),
  ALTER COLUMN admission_seq SET NOT NULL;
ALTER SEQUENCE optchat.turn_admission_seq OWNED BY optchat.turns.admission_seq;

-- Finished turns: their records as runs (gaps and islands: seq minus its rank is constant along a run).
UPDATE optchat.turns t SET run_starts = r.starts, run_ends = r.ends
  FROM (SELECT session_id, generation, turn_id, array_agg(run_start ORDER BY run_start) AS starts,
               array_agg(run_end ORDER BY run_start) AS ends
          FROM (SELECT session_id, generation, turn_id, min(seq) AS run_start, max(seq) + 1 AS run_end
                  FROM (SELECT session_id, generation, turn_id, seq,
                               seq - row_number() OVER (PARTITION BY session_id, generation, turn_id ORDER BY seq) AS island
                          FROM optchat.records) x
                 GROUP BY session_id, generation, turn_id, island) y
         GROUP BY session_id, generation, turn_id) r
 WHERE t.state <> 'active' AND r.session_id = t.session_id AND r.generation = t.generation AND r.turn_id = t.turn_id;
UPDATE optchat.turns SET run_starts = '{}', run_ends = '{}' WHERE state <> 'active' AND run_starts IS NULL;

UPDATE optchat.turns t SET publication_state = CASE
    WHEN EXISTS (SELECT 1 FROM optchat.publications p
                  WHERE p.scope_id = t.scope_id AND p.session_id = t.session_id AND p.generation = t.generation
                    AND p.turn_id = t.turn_id) THEN 'published'
    WHEN NOT t.publishes OR (t.state <> 'active' AND cardinality(t.run_starts) = 0) THEN 'none'
    ELSE 'pending' END;
ALTER TABLE optchat.turns
  ALTER COLUMN publication_state SET NOT NULL,
  ADD CONSTRAINT turns_publication_state_check CHECK (publication_state IN ('pending', 'published', 'none')),
  ADD CONSTRAINT turns_runs_check CHECK (
    (state = 'active') = (run_starts IS NULL)
    AND (run_starts IS NULL) = (run_ends IS NULL)
    AND cardinality(run_starts) = cardinality(run_ends));

-- The session's next turn to publish is the first pending one in admission order.
CREATE INDEX turns_publication_queue_idx ON optchat.turns (session_id, generation, admission_seq)
  WHERE publication_state = 'pending';
