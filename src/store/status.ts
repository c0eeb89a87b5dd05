import type { Queryable } from "./db.js";
import { readSchemaVersion } from "./migrate.js";

export interface StoreStatus {
  readonly serverVersion: string;
  readonly database: string;
  readonly schemaVersion: number;
  /** Row counts of every table in the optchat schema (the migrations bookkeeping table excluded). */
  readonly tables: Readonly<Record<string, number>>;
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
  return {
    serverVersion: server.rows[0]?.version ?? "?",
    database: server.rows[0]?.database ?? "?",
    schemaVersion,
    tables,
  };
}
