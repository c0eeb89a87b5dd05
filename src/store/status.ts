import type { Queryable } from "./db.js";
import { jobQueueInstalled, readSchemaVersion } from "./migrate.js";

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
  if (await jobQueueInstalled(db)) {
    const states = await db.query<{ state: string; n: number }>(
      `SELECT replace(name, 'optchat-', '') || ':' || state::text AS state, count(*)::int AS n FROM pgboss.job
        WHERE name IN ('optchat-node', 'optchat-publish') GROUP BY 1 ORDER BY 1`,
    );
    for (const row of states.rows) jobs[row.state] = row.n;
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
  };
}
