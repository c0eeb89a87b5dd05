import type { Queryable } from "./db.js";
import { countJobsByState, jobQueueInstalled, openJobsSummary } from "./job-queue.js";
import { readSchemaVersion } from "./migrate.js";

export interface StoreStatus {
  readonly serverVersion: string;
  readonly database: string;
  readonly schemaVersion: number;
  /** Row counts of every table in the optchat schema (the migrations bookkeeping table excluded). */
  readonly tables: Readonly<Record<string, number>>;
  /** Compactor jobs by queue and pg-boss state, e.g. `node:created`, `publish:completed` (empty without the queue). */
  readonly jobs: Readonly<Record<string, number>>;
  /** Nodes whose summary keeps failing. */
  readonly failingNodes: number;
  /** Finished turns whose publication keeps failing. */
  readonly failingPublications: number;
  /** Messages sealed but not summarized yet, over all session trees. */
  readonly pendingLeaves: number;
  /** Whether pg-boss's schema is installed (`optchat migrate` installs it). */
  readonly jobQueueInstalled: boolean;
}

export async function readStoreStatus(db: Queryable): Promise<StoreStatus> {
  const server = await db.query<{ version: string; database: string }>(
    "SELECT current_setting('server_version') AS version, current_database() AS database",
  );
  const schemaVersion = await readSchemaVersion(db);
  const tables: Record<string, number> = {};
  if (schemaVersion > 0) {
    const names = await db.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.tables
        WHERE table_schema = 'optchat' AND table_type = 'BASE TABLE' AND table_name <> 'migrations'
        ORDER BY table_name`,
    );
    if (names.rows.length > 0) {
      // Table names come from the catalogue, not from input; quote them anyway.
      const counts = await db.query<{ table_name: string; rows: number }>(
        names.rows
          .map(
            ({ table_name }) =>
              `SELECT '${table_name}' AS table_name, count(*)::bigint AS rows FROM optchat."${table_name.replace(/"/g, '""')}"`,
          )
          .join(" UNION ALL "),
      );
      for (const row of counts.rows) tables[row.table_name] = row.rows;
    }
  }
  const jobs: Record<string, number> = {};
  let failingNodes = 0;
  let failingPublications = 0;
  let pendingLeaves = 0;
  const queue = await jobQueueInstalled(db);
  if (queue) {
    Object.assign(jobs, await countJobsByState(db));
  }
  if (schemaVersion >= 3) {
    const failing = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM optchat.publication_failures");
    failingPublications = failing.rows[0]?.n ?? 0;
  }
  if (schemaVersion >= 2) {
    const health = await db.query<{ failing: number; pending: number }>(
      `SELECT (SELECT count(*)::int FROM optchat.node_failures) AS failing,
              (SELECT coalesce(sum(leaf_count - built_leaves), 0)::int FROM optchat.trees) AS pending`,
    );
    failingNodes = health.rows[0]?.failing ?? 0;
    pendingLeaves = health.rows[0]?.pending ?? 0;
  }
  return {
    serverVersion: server.rows[0]?.version ?? "?",
    database: server.rows[0]?.database ?? "?",
    schemaVersion,
    tables,
    jobs,
    failingNodes,
    failingPublications,
    pendingLeaves,
    jobQueueInstalled: queue,
  };
}

/** The health of one session, for `memory_inspect` and `optchat inspect`: what was stored, built, published, and failed. */
export interface SessionHealth {
  readonly records: number;
  readonly lastSealedAt: Date | null;
  readonly leaves: number;
  readonly builtLeaves: number;
  readonly failingNodes: number;
  readonly lastNodeError: string | null;
  readonly turns: {
    readonly active: number;
    readonly completed: number;
    readonly interrupted: number;
    readonly failed: number;
  };
  readonly lastTurn: {
    readonly turnId: string;
    readonly state: string;
    readonly admittedAt: Date;
    readonly finishedAt: Date | null;
  } | null;
  readonly publications: number;
  readonly lastPublication: { readonly seq: number; readonly outcome: string; readonly publishedAt: Date } | null;
  /** Finished turns that publish and are not published yet (waiting for summaries or failing). */
  readonly unpublishedTurns: number;
  readonly failingPublications: number;
  readonly lastPublicationError: string | null;
  readonly lease: {
    readonly holder: string;
    readonly fence: number;
    readonly expiresAt: Date;
    readonly live: boolean;
  } | null;
  /** Compactor jobs of every session waiting or running, by queue (the queue is shared). */
  readonly queuedJobs: { readonly node: number; readonly publish: number };
  /** How long the oldest job that could run has waited for a worker, in seconds (0 when none waits). */
  readonly oldestWaitingJobSeconds: number;
  /** Turns still active although no process holds the session any more (see `listStuckTurns`). */
  readonly stuckTurns: readonly StuckTurn[];
}

/** The row of a session's health query (snake_case as SQL gives it), mapped by `sessionHealthOf`. */
interface SessionHealthRow {
  records: number;
  last_sealed_at: Date | null;
  leaves: number | null;
  built_leaves: number | null;
  failing_nodes: number;
  last_node_error: string | null;
  turns: Record<string, number> | null;
  last_turn: { turn_id: string; state: string; admitted_at: string; finished_at: string | null } | null;
  publications: number;
  last_publication: { seq: number; outcome: string; published_at: string } | null;
  unpublished: number;
  failing_publications: number;
  last_publication_error: string | null;
  lease: { holder: string; fence: number; expires_at: string; live: boolean } | null;
}

export async function readSessionHealth(db: Queryable, sessionId: string): Promise<SessionHealth> {
  const result = await db.query<SessionHealthRow>(
    `WITH s AS (SELECT session_id, current_generation AS generation FROM optchat.sessions WHERE session_id = $1::text),
          t AS (SELECT tr.* FROM optchat.trees tr JOIN s ON tr.kind = 'session' AND tr.session_id = s.session_id
                                                       AND tr.generation = s.generation)
     SELECT (SELECT count(*)::int FROM optchat.records r JOIN s USING (session_id, generation)) AS records,
            (SELECT max(sealed_at) FROM optchat.records r JOIN s USING (session_id, generation)) AS last_sealed_at,
            (SELECT leaf_count FROM t) AS leaves,
            (SELECT built_leaves FROM t) AS built_leaves,
            (SELECT count(*)::int FROM optchat.node_failures f JOIN t USING (tree_id)) AS failing_nodes,
            (SELECT f.last_error FROM optchat.node_failures f JOIN t USING (tree_id)
              ORDER BY f.last_failed_at DESC LIMIT 1) AS last_node_error,
            (SELECT jsonb_object_agg(state, n) FROM (SELECT state, count(*)::int AS n FROM optchat.turns
              WHERE session_id = $1::text GROUP BY state) x) AS turns,
            (SELECT jsonb_build_object('turn_id', turn_id, 'state', state, 'admitted_at', admitted_at,
                                       'finished_at', finished_at)
               FROM optchat.turns WHERE session_id = $1::text ORDER BY admitted_at DESC LIMIT 1) AS last_turn,
            (SELECT count(*)::int FROM optchat.publications WHERE session_id = $1::text) AS publications,
            (SELECT jsonb_build_object('seq', publication_seq, 'outcome', outcome, 'published_at', published_at)
               FROM optchat.publications WHERE session_id = $1::text
              ORDER BY published_at DESC LIMIT 1) AS last_publication,
            (SELECT count(*)::int FROM optchat.turns tu WHERE tu.session_id = $1::text AND tu.state <> 'active'
                AND tu.publishes AND NOT EXISTS (SELECT 1 FROM optchat.publications p WHERE p.session_id = tu.session_id
                  AND p.generation = tu.generation AND p.turn_id = tu.turn_id)) AS unpublished,
            (SELECT count(*)::int FROM optchat.publication_failures WHERE session_id = $1::text) AS failing_publications,
            (SELECT last_error FROM optchat.publication_failures WHERE session_id = $1::text
              ORDER BY last_failed_at DESC LIMIT 1) AS last_publication_error,
            (SELECT jsonb_build_object('holder', holder, 'fence', fence, 'expires_at', expires_at,
                                       'live', expires_at > now())
               FROM optchat.session_leases WHERE session_id = $1::text) AS lease`,
    [sessionId],
  );
  const row = result.rows[0];
  if (!row) throw new Error("readSessionHealth returned no row");
  const queue = (await jobQueueInstalled(db))
    ? await openJobsSummary(db)
    : { node: 0, publish: 0, oldestWaitingSeconds: 0 };
  const stuckTurns = (row.turns?.active ?? 0) > 0 ? await listStuckTurns(db, { sessionId }) : [];
  return sessionHealthOf(row, queue, stuckTurns);
}

/** The domain form of a session's health row, with the job queue's state and the stuck turns read beside it. */
function sessionHealthOf(
  row: SessionHealthRow,
  queue: { readonly node: number; readonly publish: number; readonly oldestWaitingSeconds: number },
  stuckTurns: readonly StuckTurn[],
): SessionHealth {
  const turns = row.turns ?? {};
  return {
    records: row.records,
    lastSealedAt: row.last_sealed_at,
    leaves: Number(row.leaves ?? 0),
    builtLeaves: Number(row.built_leaves ?? 0),
    failingNodes: row.failing_nodes,
    lastNodeError: row.last_node_error,
    turns: {
      active: turns.active ?? 0,
      completed: turns.completed ?? 0,
      interrupted: turns.interrupted ?? 0,
      failed: turns.failed ?? 0,
    },
    lastTurn: row.last_turn
      ? {
          turnId: row.last_turn.turn_id,
          state: row.last_turn.state,
          admittedAt: new Date(row.last_turn.admitted_at),
          finishedAt: row.last_turn.finished_at ? new Date(row.last_turn.finished_at) : null,
        }
      : null,
    publications: row.publications,
    lastPublication: row.last_publication
      ? {
          seq: Number(row.last_publication.seq),
          outcome: row.last_publication.outcome,
          publishedAt: new Date(row.last_publication.published_at),
        }
      : null,
    unpublishedTurns: row.unpublished,
    failingPublications: row.failing_publications,
    lastPublicationError: row.last_publication_error,
    lease: row.lease
      ? {
          holder: row.lease.holder,
          fence: Number(row.lease.fence),
          expiresAt: new Date(row.lease.expires_at),
          live: row.lease.live,
        }
      : null,
    queuedJobs: { node: queue.node, publish: queue.publish },
    oldestWaitingJobSeconds: queue.oldestWaitingSeconds,
    stuckTurns,
  };
}

/** Leaves of a session tree and how many are built (0/0 when the tree does not exist yet). */
export async function readTreeProgress(
  db: Queryable,
  sessionId: string,
  generation: number,
): Promise<{ leaves: number; builtLeaves: number }> {
  const result = await db.query<{ leaf_count: string; built_leaves: string }>(
    `SELECT leaf_count, built_leaves FROM optchat.trees
      WHERE kind = 'session' AND session_id = $1::text AND generation = $2::int`,
    [sessionId, generation],
  );
  const row = result.rows[0];
  return { leaves: Number(row?.leaf_count ?? 0), builtLeaves: Number(row?.built_leaves ?? 0) };
}

/** A turn left active by a host process that no longer holds its session (see `stuckTurnsSql`). */
export interface StuckTurn {
  readonly sessionId: string;
  readonly hostSessionId: string;
  readonly turnId: string;
  readonly admittedAt: Date;
  readonly holder: string;
  readonly leaseExpiredAt: Date;
}

/**
 * Active turns of sessions whose lease has expired: the process that drove the turn stopped (killed, or closed before
 * its outcome was written) and nobody is working on it. A host that takes a lease for every turn (the OpenCode plugin
 * does, and renews it while a turn runs) never leaves a live turn behind an expired lease; sessions that never took a
 * lease (service API callers) are not judged. The arguments are SQL expressions: `session` and `project` restrict to
 * one session or one project (NULL: all); `holderGone` also counts a lease that has not expired (for a caller that
 * knows its holder is gone).
 */
export function stuckTurnsSql(where: { session: string; project: string; holderGone: string }): string {
  return `
  SELECT t.session_id, s.host_session_id, t.turn_id, t.admitted_at, l.holder, l.expires_at
    FROM optchat.turns t
    JOIN optchat.sessions s ON s.session_id = t.session_id
    JOIN optchat.session_leases l ON l.session_id = t.session_id
   WHERE t.state = 'active' AND (l.expires_at < now() OR ${where.holderGone})
     AND (${where.session} IS NULL OR t.session_id = ${where.session})
     AND (${where.project} IS NULL OR s.project_id = ${where.project})
   ORDER BY t.session_id, t.admitted_at`;
}

const STUCK_TURNS_QUERY = stuckTurnsSql({ session: "$1::text", project: "$2::text", holderGone: "$3::boolean" });

export async function listStuckTurns(
  db: Queryable,
  filter: { sessionId?: string; projectId?: string; holderGone?: boolean } = {},
): Promise<StuckTurn[]> {
  const result = await db.query<{
    session_id: string;
    host_session_id: string;
    turn_id: string;
    admitted_at: Date;
    holder: string;
    expires_at: Date;
  }>(STUCK_TURNS_QUERY, [filter.sessionId ?? null, filter.projectId ?? null, filter.holderGone === true]);
  return result.rows.map((row) => ({
    sessionId: row.session_id,
    hostSessionId: row.host_session_id,
    turnId: row.turn_id,
    admittedAt: row.admitted_at,
    holder: row.holder,
    leaseExpiredAt: row.expires_at,
  }));
}

/** What to do about a stuck turn; the same words in `optchat inspect`, `memory_inspect` and `optchat audit`. */
export const STUCK_TURN_ADVICE =
  "its process stopped before recording the turn's outcome (killed, or closed at once after the answer). Prompt the session again in OpenCode: the plugin then stores what OpenCode's transcript holds of the turn and records its real outcome";
