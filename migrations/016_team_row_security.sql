-- Team memory on one shared PostgreSQL (issue 41; docs/team.md): who owns a session, whether it is shared with the
-- project's team, which person may read which scope, and row-level security on every table that holds memory text.
--
-- Roles are cluster-wide and several optchat databases may share one cluster (the test suite makes one per file), so
-- this migration creates no role and names none but the schema's owner: `optchat team init` creates the group role
-- and records it in optchat.team; people and their grants are rows of this database (team_members, team_grants), and
-- the policies read those rows, never role membership alone. Until `optchat team init` has run (optchat.team is
-- empty) every role that may use the tables sees every row: single-user mode works as before, also for a non-superuser
-- table owner (FORCE ROW LEVEL SECURITY subjects the owner to the policies).

CREATE TABLE optchat.team (
  singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  group_role  text NOT NULL,                 -- the role every member belongs to; holds the table privileges
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE optchat.team_members (
  role_name     text PRIMARY KEY,            -- the person's login role (current_user when they connect)
  display_name  text,                        -- shown on shared memory lines; a name the person chose
  added_at      timestamptz NOT NULL DEFAULT now()
);

-- Which member may read which scope (a project's scope is 'project:' and OpenCode's project id).
CREATE TABLE optchat.team_grants (
  role_name   text NOT NULL REFERENCES optchat.team_members (role_name) ON DELETE CASCADE,
  scope_id    text NOT NULL,
  granted_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (role_name, scope_id)
);

-- Whether the current role sees every row: no team is configured, or it is (or inherits) the schema's owner, the
-- operator. Policies call the three functions as scalar subqueries, so each runs once per statement (an InitPlan),
-- never per row; and per statement, so a revoked grant or a removed member takes effect on the next statement.
CREATE FUNCTION optchat.team_sees_all() RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT NOT EXISTS (SELECT 1 FROM optchat.team)
      OR pg_catalog.pg_has_role(current_user,
           (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'optchat'), 'USAGE')
$$;

-- The current role when it is a member of the team, else NULL (equal to no owner).
CREATE FUNCTION optchat.team_reader() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT m.role_name FROM optchat.team_members m WHERE m.role_name = current_user
$$;

-- The scopes granted to the current role (empty unless it is a member).
CREATE FUNCTION optchat.team_scopes() RETURNS text[] LANGUAGE sql STABLE AS $$
  SELECT coalesce(array_agg(g.scope_id), '{}') FROM optchat.team_grants g WHERE g.role_name = current_user
$$;

GRANT SELECT ON optchat.team, optchat.team_members, optchat.team_grants TO PUBLIC;

-- Ownership and visibility: the owner is the role that opened the session (current_user by default; the plugin of a
-- person connecting as their own login needs to do nothing). A private session's turns never publish.
ALTER TABLE optchat.sessions
  ADD COLUMN owner_role text NOT NULL DEFAULT current_user,
  ADD COLUMN visibility text NOT NULL DEFAULT 'shared' CONSTRAINT sessions_visibility_check
    CHECK (visibility IN ('shared', 'private'));
ALTER TABLE optchat.adapter_problems ADD COLUMN owner_role text NOT NULL DEFAULT current_user;
-- Rows written before this migration belong to the role that migrates (the operator).
UPDATE optchat.sessions SET owner_role = current_user;
UPDATE optchat.adapter_problems SET owner_role = current_user;

-- Indexes leading with what the policies test. Every other protected table is reached through sessions or trees by
-- a key its primary key or an existing index already leads with (session_id, tree_id, scope_id).
CREATE INDEX sessions_owner_idx ON optchat.sessions (owner_role);
CREATE INDEX sessions_scope_visibility_idx ON optchat.sessions (scope_id, visibility);
CREATE INDEX adapter_problems_owner_idx ON optchat.adapter_problems (owner_role);

-- The policies. Sessions are the root: a person sees their own sessions and the shared sessions of scopes granted to
-- them; every session-keyed table follows the sessions the reader sees, tree-keyed tables the trees it sees (a shared
-- tree by its scope's grant), scope statistics the granted scopes. Sub-selects in a policy are themselves subject to
-- the policies of the tables they read, so the rule is written once, on sessions.
DO $policies$
DECLARE
  operator text := (SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'optchat');
  visible_sessions constant text := 'session_id IN (SELECT s.session_id FROM optchat.sessions s)';
  visible_trees constant text := 'tree_id IN (SELECT tr.tree_id FROM optchat.trees tr)';
  granted_scope constant text := 'scope_id = ANY ((SELECT optchat.team_scopes())::text[])';
  t record;
BEGIN
  FOR t IN SELECT * FROM (VALUES
    ('sessions', 'owner_role = (SELECT optchat.team_reader()) OR (visibility = ''shared'' AND ' || granted_scope || ')'),
    ('records', visible_sessions),
    ('staged_items', visible_sessions),
    ('ingest_conflicts', visible_sessions),
    ('turns', visible_sessions),
    ('publications', visible_sessions),
    ('publication_failures', visible_sessions),
    ('injections', visible_sessions),
    ('trees', '(kind = ''session'' AND ' || visible_sessions || ') OR (kind = ''shared'' AND ' || granted_scope || ')'),
    ('nodes', visible_trees),
    ('node_chunks', visible_trees),
    ('node_failures', visible_trees),
    ('view_parts', visible_trees),
    ('view_revisions', visible_trees),
    ('view_projections', visible_trees),
    ('search_tree_stats', visible_trees),
    ('search_term_counts', granted_scope),
    ('search_scope_stats', granted_scope),
    ('compactor_calls', visible_sessions || ' OR (session_id IS NULL AND ' || granted_scope || ')'),
    ('adapter_problems', 'owner_role = (SELECT optchat.team_reader())'),
    ('blobs', 'EXISTS (SELECT 1 FROM optchat.records r WHERE r.payload_hash = blobs.hash)')
  ) AS v(name, rule) LOOP
    EXECUTE format('ALTER TABLE optchat.%I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', t.name);
    -- The operator's own policy: a constant true, so its statements carry no security qual at all and keep their
    -- plans (a full-text operator is not leakproof and cannot use an index below a security qual).
    EXECUTE format('CREATE POLICY operator_all ON optchat.%I TO %s USING (true) WITH CHECK (true)', t.name, operator);
    IF t.name = 'blobs' THEN
      -- A payload is read through a record the reader sees; writing one reveals nothing (it is addressed by its hash).
      EXECUTE format('CREATE POLICY team_read ON optchat.blobs FOR SELECT USING ((SELECT optchat.team_sees_all()) OR %s)', t.rule);
      EXECUTE 'CREATE POLICY team_write ON optchat.blobs FOR INSERT WITH CHECK (true)';
    ELSE
      EXECUTE format('CREATE POLICY team_rule ON optchat.%I USING ((SELECT optchat.team_sees_all()) OR %s)'
                     ' WITH CHECK ((SELECT optchat.team_sees_all()) OR %s)', t.name, t.rule,
                     -- A new tree is empty: a session's is inserted in the statement that inserts the session (which
                     -- that statement's sub-selects cannot see yet), and a member's first session in a project nobody
                     -- has used creates the project's shared tree before any grant. Reading still needs USING.
                     CASE WHEN t.name = 'trees' THEN t.rule || ' OR (leaf_count = 0 AND event_count = 0)'
                          ELSE t.rule END);
    END IF;
  END LOOP;
END $policies$;
