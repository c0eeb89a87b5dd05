-- Host adapter support (OpenCode plugin): session leases, recorded injections and adapter problems.

-- One process drives a session's turns at a time (seed 000 §13; OpenCode 1.18.33 loops forever when two processes
-- prompt one session). A lease is never deleted: release expires it, so the fence only ever grows and a holder that
-- lost its lease can tell by its fence.
CREATE TABLE optchat.session_leases (
  session_id   text PRIMARY KEY REFERENCES optchat.sessions (session_id),
  holder       text NOT NULL,
  fence        bigint NOT NULL CHECK (fence > 0),
  acquired_at  timestamptz NOT NULL DEFAULT now(),
  renewed_at   timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL
);

-- What each model request of a turn was given (memory_inspect, `optchat inspect`): sizes, blocks, snapshot, query.
CREATE TABLE optchat.injections (
  injection_id  bigserial PRIMARY KEY,
  session_id    text NOT NULL REFERENCES optchat.sessions (session_id),
  turn_id       text,
  created_at    timestamptz NOT NULL DEFAULT now(),
  holder        text NOT NULL,
  status        text NOT NULL CHECK (status IN ('injected', 'not_ready', 'budget_exceeded', 'failed', 'skipped')),
  mode          text NOT NULL,
  query         text,
  detail        jsonb NOT NULL DEFAULT '{}'::jsonb,
  error         text
);
CREATE INDEX injections_session_idx ON optchat.injections (session_id, injection_id DESC);

-- Errors the adapter caught instead of throwing into the host (a throw inside an OpenCode hook can kill the turn).
-- host_session_id, not session_id: the problem may be that the session could not be opened.
CREATE TABLE optchat.adapter_problems (
  problem_id       bigserial PRIMARY KEY,
  host             text NOT NULL,
  host_session_id  text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  holder           text NOT NULL,
  operation        text NOT NULL,
  code             text,
  message          text NOT NULL
);
CREATE INDEX adapter_problems_session_idx ON optchat.adapter_problems (host, host_session_id, problem_id DESC);
