-- Compactor workers' liveness (issue 37 item 3: `optchat status` says whether any worker is alive). pg-boss knows
-- claimed jobs, not idle workers, and a backlog must be a visible condition (seed 000 §16): every running compactor
-- worker (src/compactor/heartbeat.ts) upserts its row at start and then every few seconds, and marks it stopped at a
-- clean stop. A worker counts as alive while its beat is recent (src/core/health.ts WORKER_ALIVE_SECONDS); a killed
-- one simply stops beating. Rows are kept a day after their last beat so that status can say how long no worker has
-- been alive; each worker's start deletes older ones. Times are the server's (now()), like pg-boss's job times.
CREATE TABLE optchat.compactor_workers (
  worker_id         text PRIMARY KEY,
  host_name         text NOT NULL,
  pid               integer NOT NULL,
  -- Where it runs: 'optchat worker', 'OpenCode process', 'local server', or another caller's label.
  runs_in           text NOT NULL,
  summarizer        text NOT NULL,
  started_at        timestamptz NOT NULL DEFAULT now(),
  last_beat_at      timestamptz NOT NULL DEFAULT now(),
  stopped_at        timestamptz,
  -- Paused by its keeper (the local server pauses its worker while OpenCode processes run): alive, taking no jobs.
  paused            boolean NOT NULL DEFAULT false,
  jobs_finished     bigint NOT NULL DEFAULT 0,
  last_job_at       timestamptz,
  last_error        text,
  last_error_at     timestamptz
);
CREATE INDEX compactor_workers_last_beat_idx ON optchat.compactor_workers (last_beat_at);
