import pg from "pg";
import { OptchatError } from "../core/errors.js";

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;
/** Anything that can run a query: a pool, a pooled client or a dedicated client. */
export type Queryable = Pick<pg.Pool | pg.PoolClient | pg.Client, "query">;

export interface DatabaseSettings {
  readonly databaseUrl: string;
  readonly poolSize: number;
  readonly statementTimeoutMs: number;
}

/**
 * bigint (int8) columns hold seqs, ids and byte counts that stay far below 2^53: our connections parse them as numbers.
 * Set per connection, not globally, so that other users of `pg` in the host process keep their own parsing.
 */
const types = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === pg.types.builtins.INT8
      ? (value: string) => Number(value)
      : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
};

export function openPool(settings: DatabaseSettings, applicationName = "optchat"): Pool {
  const pool = new pg.Pool({
    connectionString: settings.databaseUrl,
    max: settings.poolSize,
    application_name: applicationName,
    statement_timeout: settings.statementTimeoutMs === 0 ? undefined : settings.statementTimeoutMs,
    connectionTimeoutMillis: 10_000,
    types,
  });
  // An idle client's error (e.g. the server restarted) must not crash the host process; the next query reports it.
  pool.on("error", () => {});
  // Neither may a checked-out client's: node-postgres emits 'error' on a client whose connection ends while it is out
  // of the pool (inside withTransaction), after failing its query, and the pool listens only to idle clients. Without
  // this, a PostgreSQL restart during a transaction was an uncaught exception (tests/integration/db-connection-loss).
  pool.on("connect", (client) => {
    client.on("error", () => {});
  });
  return pool;
}

/** A dedicated (unpooled) client: migrations and LISTEN need one (postgres-stack-facts). */
export async function connectClient(databaseUrl: string, applicationName = "optchat"): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: databaseUrl, application_name: applicationName, types });
  client.on("error", () => {});
  try {
    await client.connect();
  } catch (error) {
    throw databaseUnavailable(databaseUrl, error);
  }
  return client;
}

export function databaseUnavailable(databaseUrl: string, error: unknown): OptchatError {
  const reason = error instanceof Error ? error.message : String(error);
  let where = "(unparseable URL)";
  try {
    const url = new URL(databaseUrl);
    where = `${url.hostname}:${url.port || "5432"}/${url.pathname.replace(/^\//, "")}`;
  } catch {}
  return new OptchatError(
    "DATABASE_UNAVAILABLE",
    `Cannot reach PostgreSQL at ${where}: ${reason}. Start it (docker compose up -d db) or point DATABASE_URL at a running server.`,
    { where, sqlState: sqlStateOf(error) },
    { cause: error },
  );
}

/**
 * SQLSTATEs after which the whole transaction is safe to run again. Everything else is a real error.
 * - 40001 serialization_failure: SERIALIZABLE transactions that conflicted (publication path, DESIGN §4).
 * - 40P01 deadlock_detected: Postgres aborted one side; the other committed.
 * - 55P03 lock_not_available: a NOWAIT/lock_timeout lock was busy.
 */
export const RETRYABLE_SQLSTATES: Readonly<Record<string, string>> = Object.freeze({
  "40001": "serialization_failure",
  "40P01": "deadlock_detected",
  "55P03": "lock_not_available",
});

export function sqlStateOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

export function isRetryable(error: unknown): boolean {
  const state = sqlStateOf(error);
  return state !== undefined && state in RETRYABLE_SQLSTATES;
}

export type IsolationLevel = "read committed" | "repeatable read" | "serializable";

export interface TransactionOptions {
  readonly isolation?: IsolationLevel;
  /** Attempts in all, for retryable SQLSTATEs only (default 8). */
  readonly attempts?: number;
}

/**
 * Runs `work` in one transaction on a pooled client, retrying the whole transaction (with jittered backoff) when it
 * fails with a retryable SQLSTATE. `work` must therefore be safe to run again: no side effects outside the database.
 */
export async function withTransaction<T>(
  pool: Pool,
  work: (client: PoolClient) => Promise<T>,
  options: TransactionOptions = {},
): Promise<T> {
  const attempts = options.attempts ?? 8;
  const begin = options.isolation ? `BEGIN ISOLATION LEVEL ${options.isolation.toUpperCase()}` : "BEGIN";
  for (let attempt = 1; ; attempt++) {
    const client = await pool.connect();
    let broken = false;
    try {
      await client.query(begin);
      const result = await work(client);
      await client.query("COMMIT");
      return result;
    } catch (error) {
      try {
        await client.query("ROLLBACK");
      } catch {
        broken = true; // the connection itself failed; do not return it to the pool
      }
      if (attempt >= attempts || !isRetryable(error)) throw error;
      await sleep(Math.min(200, 2 ** attempt) * (0.5 + Math.random()));
    } finally {
      client.release(broken);
    }
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
