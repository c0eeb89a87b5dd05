-- Summary trees, their event log, persisted view revisions and projections, node failures.

-- One row per tree: a session generation's tree (leaves = records) or a scope's shared tree (leaves = publications).
-- The row is the tree's lock: sealing leaves, committing nodes and folding the view take it FOR UPDATE, so the
-- readiness checks of concurrent writers see each other (a sibling committed, a record sealed).
CREATE TABLE optchat.trees (
  tree_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  kind           text NOT NULL CHECK (kind IN ('session', 'shared')),
  session_id     text,
  generation     integer,
  scope_id       text REFERENCES optchat.scopes (scope_id),
  leaf_count     bigint NOT NULL DEFAULT 0 CHECK (leaf_count >= 0),
  -- Leaves are summarized strictly in order (seed 002 §4.1), so the built leaves are always a prefix [0, built_leaves).
  built_leaves   bigint NOT NULL DEFAULT 0 CHECK (built_leaves >= 0 AND built_leaves <= leaf_count),
  event_count    bigint NOT NULL DEFAULT 0,
  view_revision  integer NOT NULL DEFAULT 0,
  created_at     timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (session_id, generation) REFERENCES optchat.generations (session_id, generation),
  CHECK ((kind = 'session' AND session_id IS NOT NULL AND generation IS NOT NULL AND scope_id IS NULL)
      OR (kind = 'shared' AND scope_id IS NOT NULL AND session_id IS NULL))
);
CREATE UNIQUE INDEX trees_session_idx ON optchat.trees (session_id, generation) WHERE kind = 'session';
CREATE UNIQUE INDEX trees_scope_idx ON optchat.trees (scope_id) WHERE kind = 'shared';

-- Immutable nodes. A rebuild is a new revision with a later tree_event; a view revision resolves each part to the
-- newest node revision committed at or before its own event, so existing references never change their text.
CREATE TABLE optchat.nodes (
  tree_id         bigint NOT NULL REFERENCES optchat.trees (tree_id),
  level           integer NOT NULL CHECK (level >= 0 AND level <= 40),
  idx             bigint NOT NULL CHECK (idx >= 0),
  revision        integer NOT NULL DEFAULT 0 CHECK (revision >= 0),
  text            text NOT NULL,
  byte_length     integer NOT NULL CHECK (byte_length = octet_length(text)),
  -- leaf: sha256 of the source payload; parent: sha256 of each child's text, left then right
  input_hashes    bytea[] NOT NULL,
  summarizer      text NOT NULL,              -- 'free' when no model call was needed
  prompt_version  text,
  attempts        integer NOT NULL DEFAULT 0, -- model calls made for the final text (chunks included)
  overshoot       boolean NOT NULL DEFAULT false, -- kept the shortest try, still over the target size
  tree_event      bigint NOT NULL,
  job_id          uuid,
  job_attempt     integer,
  built_at        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tree_id, level, idx, revision)
);

-- The recorded chunking tree of a leaf whose input exceeded the summarizer's window (seed 000 §4): nothing clipped.
CREATE TABLE optchat.node_chunks (
  tree_id        bigint NOT NULL,
  level          integer NOT NULL,
  idx            bigint NOT NULL,
  revision       integer NOT NULL,
  chunk_level    integer NOT NULL,
  chunk_index    integer NOT NULL,
  char_start     integer NOT NULL,
  char_end       integer NOT NULL,
  text           text NOT NULL,
  PRIMARY KEY (tree_id, level, idx, revision, chunk_level, chunk_index),
  FOREIGN KEY (tree_id, level, idx, revision) REFERENCES optchat.nodes (tree_id, level, idx, revision)
);

-- Every fold input in order: a leaf appended or a node built. Replaying it must reproduce every persisted revision.
CREATE TABLE optchat.tree_events (
  tree_id    bigint NOT NULL REFERENCES optchat.trees (tree_id),
  event_no   bigint NOT NULL,
  kind       text NOT NULL CHECK (kind IN ('append', 'built')),
  level      integer NOT NULL,
  idx        bigint NOT NULL,
  PRIMARY KEY (tree_id, event_no)
);

CREATE TABLE optchat.view_revisions (
  tree_id     bigint NOT NULL REFERENCES optchat.trees (tree_id),
  revision    integer NOT NULL CHECK (revision >= 1),
  event_no    bigint NOT NULL,             -- the fold state after this event
  leaf_count  bigint NOT NULL,
  levels      integer[] NOT NULL,
  idxs        bigint[] NOT NULL,
  bytes       integer NOT NULL,
  shrinking   boolean NOT NULL,
  unbuilt     integer NOT NULL,            -- parts still showing the placeholder
  upper_bytes integer NOT NULL,            -- the fold thresholds in effect (settings can change between runs)
  lower_bytes integer NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tree_id, revision),
  CHECK (cardinality(levels) = cardinality(idxs))
);

-- Temporary coarser covers of a revision for a smaller budget, cached (seed 000 §6).
CREATE TABLE optchat.view_projections (
  tree_id     bigint NOT NULL,
  revision    integer NOT NULL,
  budget      integer NOT NULL,
  fits        boolean NOT NULL,
  levels      integer[] NOT NULL,
  idxs        bigint[] NOT NULL,
  bytes       integer NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tree_id, revision, budget),
  FOREIGN KEY (tree_id, revision) REFERENCES optchat.view_revisions (tree_id, revision)
);

-- Nodes whose summarization failed; cleared when the node is built. The first failure is reported once.
CREATE TABLE optchat.node_failures (
  tree_id          bigint NOT NULL,
  level            integer NOT NULL,
  idx              bigint NOT NULL,
  failures         integer NOT NULL,
  first_failed_at  timestamptz NOT NULL DEFAULT now(),
  last_failed_at   timestamptz NOT NULL DEFAULT now(),
  last_error       text NOT NULL,
  PRIMARY KEY (tree_id, level, idx)
);

-- Records stored before trees existed (development builds of the foundation only) would have no fold history.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM optchat.records) THEN
    RAISE EXCEPTION 'optchat: this database holds records from a development build without summary trees; migrate a fresh database and re-import them';
  END IF;
END $$;

-- Existing (empty) generations get their trees.
INSERT INTO optchat.trees (kind, session_id, generation)
SELECT 'session', session_id, generation FROM optchat.generations;
