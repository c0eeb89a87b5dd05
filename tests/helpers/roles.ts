import { randomBytes } from "node:crypto";
import pg from "pg";
import { inject } from "vitest";
import { withDatabase } from "../../scripts/bench/common.js";

/**
 * PostgreSQL roles for one test file. Roles are cluster-wide and the test files share one cluster, so every name
 * carries this process and a random tag. `drop` removes them all; call it after the file's databases are dropped
 * (a role cannot be dropped while a database still holds privileges granted to it).
 */
export interface TestRoles {
  /** The unique name of the role labelled `label` (created by `create` or by the code under test). */
  name(label: string): string;
  /** Creates a login role (or, with `login: false`, a group role) with extra options such as "CREATEDB". */
  create(label: string, options?: { login?: boolean; extra?: string }): Promise<string>;
  /** A connection URL for database `database` as role `label`. */
  url(label: string, database: string): string;
  drop(): Promise<void>;
}

async function admin<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: inject("adminUrl") });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

export function testRoles(): TestRoles {
  const tag = `optchat_t_${process.pid}_${randomBytes(3).toString("hex")}`;
  const name = (label: string) => `${tag}_${label}`;
  return {
    name,
    async create(label, { login = true, extra = "" } = {}) {
      await admin((c) => c.query(`CREATE ROLE ${name(label)} ${login ? "LOGIN" : "NOLOGIN"} ${extra}`));
      return name(label);
    },
    url(label, database) {
      const url = new URL(withDatabase(inject("adminUrl"), database));
      url.username = name(label);
      return url.toString();
    },
    async drop() {
      await admin(async (c) => {
        const { rows } = await c.query<{ rolname: string }>(
          "SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1::text)",
          [`${tag}_`],
        );
        for (const { rolname } of rows) await c.query(`DROP ROLE ${pg.escapeIdentifier(rolname)}`);
      });
    },
  };
}

/** Runs one statement as the test server's superuser. */
export async function asAdmin(sql: string): Promise<void> {
  await admin((c) => c.query(sql));
}
