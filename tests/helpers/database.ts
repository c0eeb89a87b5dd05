import { randomBytes } from "node:crypto";
import pg from "pg";
import { inject } from "vitest";
import { withDatabase } from "../../scripts/bench/common.js";
import { eventually } from "./polling.js";

async function adminQuery(sql: string): Promise<void> {
  const admin = new pg.Client({ connectionString: inject("adminUrl") });
  await admin.connect();
  try {
    await admin.query(sql);
  } finally {
    await admin.end();
  }
}

/** A fresh database cloned from the migrated template; named after this process so leftovers can be cleaned. */
export async function createTestDatabase(): Promise<{ name: string; url: string; drop(): Promise<void> }> {
  const name = `optchat_t_${process.pid}_${randomBytes(4).toString("hex")}`;
  await adminQuery(`CREATE DATABASE ${name} TEMPLATE ${inject("templateDatabase")}`);
  return {
    name,
    url: withDatabase(inject("adminUrl"), name),
    drop: () => adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`),
  };
}

/**
 * A database outage as clients see it: new connections refused (SQLSTATE 55000) and open ones terminated, until the
 * returned function lets them in again.
 */
export async function refuseConnections(name: string): Promise<() => Promise<void>> {
  await adminQuery(`ALTER DATABASE ${name} WITH ALLOW_CONNECTIONS false`);
  await adminQuery(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${name}'`);
  return () => adminQuery(`ALTER DATABASE ${name} WITH ALLOW_CONNECTIONS true`);
}

/** A name for a database that does not exist yet (for tests of `optchat migrate` creating it). */
export function freshDatabaseName(): { name: string; url: string; drop(): Promise<void> } {
  const name = `optchat_t_${process.pid}_${randomBytes(4).toString("hex")}`;
  return {
    name,
    url: withDatabase(inject("adminUrl"), name),
    drop: () => adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`),
  };
}

/** Waits until no backend of the pool's database is left idle in a transaction (a killed one rolled back). */
export async function noOpenTransaction(db: Pick<pg.Pool, "query">): Promise<void> {
  await eventually(
    async () => {
      const { rows } = await db.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
      );
      return rows[0].n === 0 ? true : undefined;
    },
    10_000,
    "the killed transaction to be rolled back",
  );
}

/**
 * Waits until `count` backends of the pool's database wait on a lock (pg_stat_activity): the moment a concurrent
 * writer is known to be blocked behind a held transaction, instead of a sleep that hopes it got there.
 */
export async function waitForLockWaiters(db: Pick<pg.Pool, "query">, count = 1, timeoutMs = 10_000): Promise<void> {
  await eventually(
    async () => {
      const { rows } = await db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
      );
      return (rows[0]?.n ?? 0) >= count ? true : undefined;
    },
    timeoutMs,
    `${count} backend(s) waiting on a lock`,
  );
}

/**
 * Waits until no optchat job is queued or running (pgboss.job): what a started worker would do has been done. For
 * "nothing happens" checks, instead of a sleep that hopes a stray job would have run by then.
 */
export async function waitForIdleQueues(db: Pick<pg.Pool, "query">, timeoutMs = 30_000): Promise<void> {
  await eventually(
    async () => {
      const { rows } = await db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pgboss.job WHERE name LIKE 'optchat-%' AND state IN ('created', 'retry', 'active')",
      );
      return rows[0]?.n === 0 ? true : undefined;
    },
    timeoutMs,
    "the job queues to drain",
  );
}

/** Waits until the database holds exactly `count` publications (of every scope). */
export async function waitForPublications(
  db: Pick<pg.Pool, "query">,
  count: number,
  timeoutMs: number,
  what: string,
): Promise<void> {
  await eventually(
    async () => {
      const { rows } = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM optchat.publications");
      return rows[0]?.n === count ? true : undefined;
    },
    timeoutMs,
    what,
  );
}

/** A digest of every row of every optchat table and of pgboss.job: equal digests mean nothing was written. */
export async function databaseDigest(db: Pick<pg.Pool, "query">): Promise<Record<string, string>> {
  const { rows: tables } = await db.query<{ name: string }>(
    `SELECT format('%I.%I', table_schema, table_name) AS name FROM information_schema.tables
      WHERE table_type = 'BASE TABLE' AND (table_schema = 'optchat' OR (table_schema = 'pgboss' AND table_name = 'job'))
      ORDER BY 1`,
  );
  const digest: Record<string, string> = {};
  for (const { name } of tables) {
    const { rows } = await db.query<{ md5: string }>(
      `SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) AS md5 FROM ${name} t`,
    );
    digest[name] = rows[0]?.md5 ?? "";
  }
  return digest;
}
