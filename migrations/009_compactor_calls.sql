-- The compactor's cost ledger (issue 13 item 4): one row per model call, successful or not, with the tokens the
-- provider reported (input = every input token: uncached + read from its prompt cache + written to it), how long it
-- took, what came of it, and where it belongs (scope, session, tree, node). `optchat cost` totals it per day, scope and
-- session and prices it with the price table (src/compactor/prices.ts) at read time, so overriding a price reprices
-- history; the budget cap (src/compactor/budget.ts) reads today's rows. No foreign keys: the ledger is history and
-- must not stop a session's deletion. Days are UTC.
CREATE TABLE optchat.compactor_calls (
  call_id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at                  timestamptz NOT NULL,
  provider            text NOT NULL,
  model               text NOT NULL,
  purpose             text NOT NULL CHECK (purpose IN ('leaf', 'merge', 'publication', 'retry')),
  input_tokens        integer NOT NULL CHECK (input_tokens >= 0),
  cache_read_tokens   integer NOT NULL CHECK (cache_read_tokens >= 0),
  cache_write_tokens  integer NOT NULL CHECK (cache_write_tokens >= 0),
  output_tokens       integer NOT NULL CHECK (output_tokens >= 0),
  latency_ms          integer NOT NULL CHECK (latency_ms >= 0),
  -- ok, over_limit, reference, refusal, empty, or a failure kind (rate_limited, overloaded, server, timeout, ...)
  outcome             text NOT NULL,
  scope_id            text,
  session_id          text,
  tree_id             bigint,
  level               integer,
  idx                 bigint,
  job_id              uuid
);
CREATE INDEX compactor_calls_at_idx ON optchat.compactor_calls (at);
CREATE INDEX compactor_calls_scope_at_idx ON optchat.compactor_calls (scope_id, at);
CREATE INDEX compactor_calls_session_at_idx ON optchat.compactor_calls (session_id, at);

-- Nodes the compactor built as labelled fallbacks because the budget was spent (summarizer 'fallback', seed 000 §10):
-- counted by `optchat status`, `optchat cost` and memory_inspect; rare, so a partial index keeps that cheap.
CREATE INDEX nodes_fallback_idx ON optchat.nodes (built_at) WHERE summarizer = 'fallback';
