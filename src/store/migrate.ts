import { fileURLToPath } from "node:url";
import pg from "pg";
import { OptchatError } from "../core/errors.js";
import { connectClient, databaseUnavailable, type Queryable, sqlStateOf } from "./db.js";

export const MIGRATIONS_DIRECTORY = fileURLToPath(new URL("../../migrations", import.meta.url));

/**
 * The schema version this code needs: the number of the newest file in migrations/ (they are numbered 1, 2, ...
 * without gaps; postgres-migrations refuses a gap). Kept by hand so that opening memory reads no files (an installed
 * package's migrations folder need not sit next to the code that runs); tests/unit/schema-version.test.ts fails when
 * a migration is added without raising it.
 */
export const SCHEMA_VERSION = 16;

export interface MigrationOutcome {
  readonly databaseCreated: boolean;
  readonly applied: readonly string[];
  readonly schemaVersion: number;
}

/**
 * Creates the database named by the URL if it is missing (connecting to the server's `postgres` database). Safe when
 * several processes do it at once: the loser of the race sees duplicate_database (42P04) or, when both passed the
 * catalogue check together, unique_violation (23505) on pg_database, and treats either as "already there".
 */
export async function ensureDatabase(databaseUrl: string): Promise<boolean> {
  const url = new URL(databaseUrl);
  const name = decodeURIComponent(url.pathname.replace(/^\//, ""));
  const probe = new pg.Client({ connectionString: databaseUrl });
  probe.on("error", () => {});
  try {
    await probe.connect();
    await probe.end().catch(() => {});
    return false;
  } catch (error) {
    // Not awaited: in Bun (OpenCode's runtime) end() after a refused connect never settles.
    probe.end().catch(() => {});
    if (sqlStateOf(error) !== "3D000") throw databaseUnavailable(databaseUrl, error); // 3D000: invalid_catalog_name
  }
  url.pathname = "/postgres";
  const admin = await connectClient(url.toString(), "optchat-migrate");
  try {
    await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
    return true;
  } catch (error) {
    const state = sqlStateOf(error);
    if (state === "42P04" || state === "23505") return false;
    throw new OptchatError(
      "DATABASE_UNAVAILABLE",
      `Cannot create database "${name}": ${(error as Error).message}. Create it yourself or give the DATABASE_URL role CREATEDB.`,
      { database: name, sqlState: state },
      { cause: error },
    );
  } finally {
    await admin.end().catch(() => {});
  }
}

/**
 * Applies the numbered SQL files in migrations/ with postgres-migrations, on a dedicated client: a pool is unsafe
 * (postgres-stack-facts: a leaked START TRANSACTION; a CONCURRENTLY index hung). postgres-migrations holds an advisory
 * lock while it works, so concurrent runs apply each file exactly once; its bookkeeping table lives in our schema.
 */
export async function migrateDatabase(
  databaseUrl: string,
  log: (line: string) => void = () => {},
): Promise<MigrationOutcome> {
  const databaseCreated = await ensureDatabase(databaseUrl);
  const client = await connectClient(databaseUrl, "optchat-migrate");
  try {
    // CREATE SCHEMA IF NOT EXISTS can still race (23505 on pg_namespace) when two processes start at once.
    try {
      await client.query("CREATE SCHEMA IF NOT EXISTS optchat");
    } catch (error) {
      if (sqlStateOf(error) !== "23505") throw error;
    }
    await client.query("SET search_path TO optchat");
    // Imported here: every process reads SCHEMA_VERSION and readSchemaVersion from this module, few migrate (the
    // package was ~6 ms of the plugin's import in OpenCode's Bun).
    const { migrate: runPostgresMigrations } = await import("postgres-migrations");
    const applied = await runPostgresMigrations({ client }, MIGRATIONS_DIRECTORY, { logger: log });
    const schemaVersion = await readSchemaVersion(client);
    return { databaseCreated, applied: applied.map((m) => `${m.id}_${m.name}`), schemaVersion };
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * What opening memory checks, in one round trip: the highest applied migration id (0 when the schema has never been
 * migrated) and whether pg-boss's schema is installed. It was three statements, each waited for by a host's first
 * prompt while OpenCode starts (issue 9 item 2).
 */
export async function readSchemaState(db: Queryable): Promise<{ version: number; jobQueue: boolean }> {
  try {
    const result = await db.query<{ version: number | null; job_queue: boolean }>(
      `SELECT (SELECT max(id)::int FROM optchat.migrations) AS version,
              to_regclass('pgboss.job') IS NOT NULL AS job_queue`,
    );
    return { version: result.rows[0]?.version ?? 0, jobQueue: result.rows[0]?.job_queue === true };
  } catch (error) {
    // Never migrated: no optchat schema (3F000) or no migrations table (42P01). The version alone refuses the open.
    const state = sqlStateOf(error);
    if (state === "42P01" || state === "3F000") return { version: 0, jobQueue: false };
    throw error;
  }
}

/** The highest applied migration id, or 0 when the schema has never been migrated. */
export async function readSchemaVersion(client: Pick<pg.ClientBase, "query">): Promise<number> {
  const exists = await client.query<{ present: boolean }>(
    "SELECT to_regclass('optchat.migrations') IS NOT NULL AS present",
  );
  if (!exists.rows[0]?.present) return 0;
  const result = await client.query<{ version: number | null }>(
    "SELECT max(id)::int AS version FROM optchat.migrations",
  );
  return result.rows[0]?.version ?? 0;
}

/** Whether the database holds optchat's schema (its migrations table). */
export async function holdsOptchatSchema(client: Pick<pg.ClientBase, "query">): Promise<boolean> {
  const { rows } = await client.query<{ present: boolean }>(
    "SELECT to_regclass('optchat.migrations') IS NOT NULL AS present",
  );
  return rows[0]?.present === true;
}
