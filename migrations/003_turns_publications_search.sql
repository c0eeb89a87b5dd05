-- Shared memory: turns with their pinned snapshots, publications (the shared tree's leaves), search vectors.

ALTER TABLE optchat.scopes ADD COLUMN next_publication_seq bigint NOT NULL DEFAULT 0;

-- One row per admitted turn. The snapshot columns are written once, at admission (seed 000 §9), and every context
-- assembly and retrieval of the turn uses them unchanged.
CREATE TABLE optchat.turns (
  session_id            text NOT NULL,
  generation            integer NOT NULL,
  turn_id               text NOT NULL,
  state                 text NOT NULL CHECK (state IN ('active', 'completed', 'interrupted', 'failed')),
  admitted_at           timestamptz NOT NULL DEFAULT now(),
  finished_at           timestamptz,
  query                 text,                 -- the user request that started the turn (for inspection)
  publishes             boolean NOT NULL,     -- false for isolated sessions and subagent sessions
  scope_id              text NOT NULL REFERENCES optchat.scopes (scope_id),
  policy_revision       integer NOT NULL,
  retention_epoch       integer NOT NULL,
  shared_tree_id        bigint REFERENCES optchat.trees (tree_id),
  shared_view_revision  integer,              -- null: no shared view (isolated, or nothing published yet)
  publication_high_water bigint NOT NULL,     -- publications [0, this) are visible to the turn
  own_boundary          bigint NOT NULL,      -- own records [0, this) are the session's earlier history
  own_view_revision     integer,              -- pinned at the first context assembly of the turn
  PRIMARY KEY (session_id, generation, turn_id),
  FOREIGN KEY (session_id, generation) REFERENCES optchat.generations (session_id, generation)
);

CREATE TABLE optchat.publications (
  scope_id           text NOT NULL REFERENCES optchat.scopes (scope_id),
  publication_seq    bigint NOT NULL CHECK (publication_seq >= 0),
  session_id         text NOT NULL,
  generation         integer NOT NULL,
  turn_id            text NOT NULL,
  start_seq          bigint NOT NULL,
  end_seq_exclusive  bigint NOT NULL CHECK (end_seq_exclusive > start_seq),
  outcome            text NOT NULL CHECK (outcome IN ('completed', 'interrupted', 'failed')),
  completed_at       timestamptz NOT NULL,
  published_at       timestamptz NOT NULL DEFAULT now(),
  cover_levels       integer[] NOT NULL,
  cover_idxs         bigint[] NOT NULL,
  PRIMARY KEY (scope_id, publication_seq),
  UNIQUE (scope_id, session_id, generation, turn_id),
  FOREIGN KEY (session_id, generation, turn_id) REFERENCES optchat.turns (session_id, generation, turn_id)
);
CREATE INDEX publications_session_idx ON optchat.publications (session_id, generation, end_seq_exclusive);

-- Publications whose summary keeps failing; cleared when the turn is published. Retried forever after a fixed delay.
CREATE TABLE optchat.publication_failures (
  session_id       text NOT NULL,
  generation       integer NOT NULL,
  turn_id          text NOT NULL,
  failures         integer NOT NULL,
  first_failed_at  timestamptz NOT NULL DEFAULT now(),
  last_failed_at   timestamptz NOT NULL DEFAULT now(),
  last_error       text NOT NULL,
  PRIMARY KEY (session_id, generation, turn_id)
);

-- Full-text search over our own tokens (src/core/tokenize.ts): Latin words, CJK bigrams. Stored as tsvector literals
-- built by the application, never by to_tsvector, whose parsers return one token per CJK run.
ALTER TABLE optchat.records ADD COLUMN search tsvector;
ALTER TABLE optchat.nodes ADD COLUMN search tsvector;
CREATE INDEX records_search_idx ON optchat.records USING gin (search);
CREATE INDEX nodes_search_idx ON optchat.nodes USING gin (search);

-- Every scope that shares memory gets its shared tree.
INSERT INTO optchat.trees (kind, scope_id)
SELECT 'shared', scope_id FROM optchat.scopes WHERE kind <> 'isolated'
ON CONFLICT DO NOTHING;
