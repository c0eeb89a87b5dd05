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

/**
 * A pool of connections to the optchat database. `readOnly` makes every transaction on them read-only at the server
 * (`default_transaction_read_only`), so a reader such as `optchat browse` fails with 25006 instead of writing a row,
 * whatever code path it reaches. `idleMs`: how long an idle connection stays open (node-postgres's default, 10 s,
 * unless given).
 */
export function openPool(
  settings: DatabaseSettings,
  applicationName = "optchat",
  readOnly = false,
  idleMs?: number,
): Pool {
  const pool = new pg.Pool({
    connectionString: settings.databaseUrl,
    max: settings.poolSize,
    ...(idleMs === undefined ? {} : { idleTimeoutMillis: idleMs }),
    application_name: applicationName,
    ...(readOnly ? { options: "-c default_transaction_read_only=on" } : {}),
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

export function databaseUnavailable(databaseUrl: string, error: unknown, retriedMs?: number): OptchatError {
  const reason = error instanceof Error ? error.message : String(error);
  let where = "(unparseable URL)";
  let database = "";
  try {
    const url = new URL(databaseUrl);
    database = decodeURIComponent(url.pathname.replace(/^\//, ""));
    const socketDir = url.searchParams.get("host");
    where = socketDir?.startsWith("/")
      ? `${socketDir}:${url.port || "5432"}/${database}`
      : `${url.hostname}:${url.port || "5432"}/${database}`;
  } catch {}
  const sqlState = sqlStateOf(error);
  const server = where.slice(0, where.lastIndexOf("/"));
  // The server answered in these cases, so "start it" would send the user to the wrong fix.
  const message =
    sqlState === "3D000"
      ? `No database "${database}" on the PostgreSQL server at ${server}: run \`optchat migrate\` (it creates the database and its schema) or point DATABASE_URL at an existing database.`
      : sqlState === "28P01" || sqlState === "28000"
        ? `PostgreSQL at ${where} refused the login: ${reason}. Fix the user or password in DATABASE_URL.`
        : sqlState === "53300"
          ? `PostgreSQL at ${where} refused a connection: ${reason}. Lower OPTCHAT_POOL_SIZE (connections per process), stop other clients, or raise the server's max_connections${retriedMs !== undefined ? `; retried for ${retriedMs} ms (OPTCHAT_DATABASE_RETRY_MS)` : ""}.`
          : `Cannot reach PostgreSQL at ${where}: ${reason}. ${where.startsWith("/") ? "The embedded server starts by itself: see `optchat db status` and the server.log in OPTCHAT_DATA_DIR," : "Start it (docker compose up -d db)"} or point DATABASE_URL at a running server${retriedMs !== undefined ? `; retried for ${retriedMs} ms (raise OPTCHAT_DATABASE_RETRY_MS to wait longer for a restart)` : ""}.`;
  return new OptchatError(
    "DATABASE_UNAVAILABLE",
    message,
    { where, sqlState, ...(retriedMs !== undefined ? { retriedMs } : {}) },
    { cause: error },
  );
}

/**
 * How the whole operation may be retried after a failure:
 * - conflict: the transaction lost a race and Postgres rolled it back; running it again is always safe.
 * - unavailable: the server is restarting or the connection broke. A COMMIT whose answer was lost may have committed,
 *   so only idempotent operations are run again; the others fail with DATABASE_UNAVAILABLE at once.
 */
export type DatabaseFailure = "conflict" | "unavailable";

/**
 * The one table of retryable SQLSTATEs (everything else is a real error, never retried):
 * - 40001 serialization_failure: SERIALIZABLE transactions that conflicted (publication path, DESIGN §4).
 * - 40P01 deadlock_detected: Postgres aborted one side; the other committed.
 * - 55P03 lock_not_available: a NOWAIT/lock_timeout lock was busy.
 * - 57P01 admin_shutdown / 57P02 crash_shutdown: the server is stopping or restarting (its backends are terminated;
 *   an administrator's pg_terminate_backend gives 57P01 too).
 * - 57P03 cannot_connect_now: "the database system is starting up" (or shutting down, or in recovery).
 * - 08000, 08001, 08003, 08004, 08006 connection_exception and its subclasses.
 * - 53300 too_many_connections: a restart's clients all reconnect at once.
 */
export const RETRYABLE_SQLSTATES: Readonly<
  Record<string, { readonly name: string; readonly failure: DatabaseFailure }>
> = Object.freeze({
  "40001": { name: "serialization_failure", failure: "conflict" },
  "40P01": { name: "deadlock_detected", failure: "conflict" },
  "55P03": { name: "lock_not_available", failure: "conflict" },
  "57P01": { name: "admin_shutdown", failure: "unavailable" },
  "57P02": { name: "crash_shutdown", failure: "unavailable" },
  "57P03": { name: "cannot_connect_now", failure: "unavailable" },
  "08000": { name: "connection_exception", failure: "unavailable" },
  "08001": { name: "sqlclient_unable_to_establish_sqlconnection", failure: "unavailable" },
  "08003": { name: "connection_does_not_exist", failure: "unavailable" },
  "08004": { name: "sqlserver_rejected_establishment_of_sqlconnection", failure: "unavailable" },
  "08006": { name: "connection_failure", failure: "unavailable" },
  "53300": { name: "too_many_connections", failure: "unavailable" },
});

/** Socket errors of a server that is down or restarting (Node's `code`; they carry no SQLSTATE). */
const UNAVAILABLE_SOCKET_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "EAI_AGAIN",
]);

/**
 * node-postgres's own errors for a connection that broke or never came up; they have neither a SQLSTATE nor a socket
 * code (pg 8.16: client.js, pg-pool index.js). Matched on their fixed texts.
 */
const UNAVAILABLE_DRIVER_MESSAGES = [
  /^Connection terminated/, // "... unexpectedly", "... due to connection timeout"
  /^timeout exceeded when trying to connect$/,
  /^Client has encountered a connection error and is not queryable$/,
  /^Client was closed and is not queryable$/,
];

/** A server that answers but refuses the connection: 3D000 no such database, 28000/28P01 the login. */
const CONNECTION_REFUSALS = new Set(["3D000", "28000", "28P01"]);

export function sqlStateOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** Is `error` unique_violation (SQLSTATE 23505) on the constraint named `constraint`? */
export function isUniqueViolationOf(error: unknown, constraint: string): boolean {
  return sqlStateOf(error) === "23505" && (error as { constraint?: unknown }).constraint === constraint;
}

/** How `error` (or an error it wraps: pg-boss, AggregateError of several addresses) may be retried, if at all. */
export function databaseFailureOf(error: unknown, depth = 0): DatabaseFailure | undefined {
  if (error === null || typeof error !== "object" || depth > 4) return undefined;
  if (error instanceof OptchatError) return undefined; // already decided (and mapped) by an inner call
  const state = sqlStateOf(error);
  if (state !== undefined) return RETRYABLE_SQLSTATES[state]?.failure;
  const code = (error as { code?: unknown }).code;
  if (typeof code === "string" && UNAVAILABLE_SOCKET_CODES.has(code)) return "unavailable";
  const message = (error as { message?: unknown }).message;
  if (typeof message === "string" && UNAVAILABLE_DRIVER_MESSAGES.some((pattern) => pattern.test(message)))
    return "unavailable";
  for (const inner of [...((error as { errors?: unknown[] }).errors ?? []), (error as { cause?: unknown }).cause]) {
    const failure = databaseFailureOf(inner, depth + 1);
    if (failure) return failure;
  }
  return undefined;
}

export function isRetryable(error: unknown): boolean {
  return databaseFailureOf(error) === "conflict";
}

/** What `withRetry` needs to know about the database: where it is (for the message) and how long to keep trying. */
export interface RetryPolicy {
  readonly databaseUrl: string;
  /** How long an idempotent operation is retried while the server is unavailable (OPTCHAT_DATABASE_RETRY_MS). */
  readonly unavailableRetryMs: number;
  /** Called before each wait while the server is unavailable: starts the embedded server again (its errors ignored). */
  readonly recover?: () => Promise<void>;
}

export interface RetryOptions {
  /** Safe to run again after its connection broke, even if its COMMIT may have landed. */
  readonly idempotent: boolean;
  /** Where the database is and how long to wait for it; without one, an unavailable database's error is passed on. */
  readonly policy?: RetryPolicy;
  /** Attempts in all after conflicts (default 8). */
  readonly conflictAttempts?: number;
  /** Injected for tests; default the real clock and timers. */
  readonly now?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
}

/**
 * The one retry helper. Runs `operation` and runs it again, with jittered backoff, after a conflict (up to
 * `conflictAttempts` in all) or, when the operation is idempotent and a `policy` is given, while the database is
 * unavailable (for up to `policy.unavailableRetryMs`, backoff 50 ms doubling to 1 s). With a policy, an unavailable
 * database that stays so, or that breaks a non-idempotent operation, becomes DATABASE_UNAVAILABLE naming the server,
 * the fix and the setting; every other error is thrown unchanged.
 */
export async function withRetry<T>(operation: () => Promise<T>, options: RetryOptions): Promise<T> {
  const policy = options.policy;
  const now = options.now ?? Date.now;
  const pause = options.sleep ?? sleep;
  const conflictAttempts = options.conflictAttempts ?? 8;
  const started = now();
  let unavailableWait = 50;
  for (let attempt = 1; ; attempt++) {
    try {
      return await operation();
    } catch (error) {
      const failure = databaseFailureOf(error);
      if (failure === "conflict" && attempt < conflictAttempts) {
        await pause(Math.min(200, 2 ** attempt) * (0.5 + Math.random()));
        continue;
      }
      if (policy !== undefined && failure === undefined && CONNECTION_REFUSALS.has(sqlStateOf(error) ?? "")) {
        throw databaseUnavailable(policy.databaseUrl, error); // dropped database, revoked login: never retried
      }
      if (failure !== "unavailable" || policy === undefined) throw error;
      const elapsed = now() - started;
      if (!options.idempotent || elapsed >= policy.unavailableRetryMs) {
        throw databaseUnavailable(policy.databaseUrl, error, options.idempotent ? Math.round(elapsed) : undefined);
      }
      await policy.recover?.().catch(() => {});
      // Jittered (a restart's clients should not reconnect in step), never past the bound: one last try at the end.
      await pause(Math.min(policy.unavailableRetryMs - elapsed, unavailableWait * (0.75 + Math.random() / 2)));
      unavailableWait = Math.min(1000, unavailableWait * 2);
    }
  }
}

export type IsolationLevel = "read committed" | "repeatable read" | "serializable";

export interface TransactionOptions {
  readonly isolation?: IsolationLevel;
  /** Attempts in all, for conflicts only (default 8). */
  readonly attempts?: number;
}

/**
 * Runs `work` in one transaction on a pooled client, retrying the whole transaction (with jittered backoff) after a
 * conflict (RETRYABLE_SQLSTATES). `work` must therefore be safe to run again: no side effects outside the database.
 * A broken connection is not retried here: whether running it again is safe is the caller's (the service API's
 * `withRetry` with `idempotent`), and its error is passed on unchanged.
 */
export async function withTransaction<T>(
  pool: Pool,
  work: (client: PoolClient) => Promise<T>,
  options: TransactionOptions = {},
): Promise<T> {
  const begin = options.isolation ? `BEGIN ISOLATION LEVEL ${options.isolation.toUpperCase()}` : "BEGIN";
  return await withRetry(
    async () => {
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
        throw error;
      } finally {
        client.release(broken);
      }
    },
    { idempotent: false, conflictAttempts: options.attempts ?? 8 },
  );
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
