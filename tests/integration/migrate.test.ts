import { readdirSync } from "node:fs";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { MIGRATIONS_DIRECTORY } from "../../src/store/migrate.js";
import { freshDatabaseName, runCli } from "../helpers.js";

const created: { drop(): Promise<void> }[] = [];
afterAll(async () => {
  for (const db of created) await db.drop();
});

const migrationFiles = readdirSync(MIGRATIONS_DIRECTORY).filter((f) => f.endsWith(".sql"));

describe("optchat migrate", () => {
  it("succeeds in two processes started at once, creating the database and applying each migration once", async () => {
    const db = freshDatabaseName();
    created.push(db);
    const [first, second] = await Promise.all([
      runCli(["migrate", "--json"], { DATABASE_URL: db.url }),
      runCli(["migrate", "--json"], { DATABASE_URL: db.url }),
    ]);
    expect(first.code, first.stderr).toBe(0);
    expect(second.code, second.stderr).toBe(0);
    const outcomes = [JSON.parse(first.stdout), JSON.parse(second.stdout)];
    expect(outcomes.map((o) => o.ok)).toEqual([true, true]);
    expect(outcomes.filter((o) => o.databaseCreated)).toHaveLength(1);
    // Between them they applied every migration exactly once (postgres-migrations' own table is migration 0).
    const applied = outcomes.flatMap((o) => o.applied as string[]).sort();
    expect(applied).toEqual(
      [
        "0_create-migrations-table",
        ...migrationFiles.map((f) => f.replace(/^0*(\d+)_/, "$1_").replace(/\.sql$/, "")),
      ].sort(),
    );

    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    const { rows } = await client.query("SELECT id, name FROM optchat.migrations ORDER BY id");
    await client.end();
    expect(rows.map((r) => r.id)).toEqual(Array.from({ length: migrationFiles.length + 1 }, (_, i) => i));

    const again = await runCli(["migrate", "--json"], { DATABASE_URL: db.url });
    expect(JSON.parse(again.stdout)).toMatchObject({ ok: true, databaseCreated: false, applied: [] });
  });

  it("reports status: server, schema version and counts per table", async () => {
    const db = freshDatabaseName();
    created.push(db);
    const before = await runCli(["status", "--json"], { DATABASE_URL: db.url });
    expect(before.code).toBe(1);
    expect(JSON.parse(before.stdout)).toMatchObject({ ok: false, error: { code: "DATABASE_UNAVAILABLE" } });

    await runCli(["migrate"], { DATABASE_URL: db.url });
    const status = await runCli(["status", "--json"], { DATABASE_URL: db.url });
    expect(status.code, status.stderr).toBe(0);
    const parsed = JSON.parse(status.stdout);
    expect(parsed).toMatchObject({
      ok: true,
      schemaVersion: migrationFiles.length,
      expectedSchemaVersion: migrationFiles.length,
    });
    expect(parsed.serverVersion).toMatch(/^\d+/);
    expect(parsed.tables).toMatchObject({
      records: 0,
      sessions: 0,
      blobs: 0,
      scopes: 0,
      generations: 0,
      nodes: 0,
      trees: 0,
    });
    expect(parsed).toMatchObject({ jobs: {}, failingNodes: 0, failingPublications: 0, pendingLeaves: 0 });

    const text = await runCli(["status"], { DATABASE_URL: db.url });
    expect(text.stdout).toMatch(/schema\s+version \d+ of \d+/);
    expect(text.stdout).toMatch(/records\s+0/);
    expect(text.stdout).toMatch(
      /compactor\s+0 message\(s\) not summarized yet; jobs: none; failing nodes: 0; failing publications: 0/,
    );
  });

  it("fails at start naming the variable and the accepted values of an invalid setting", async () => {
    const result = await runCli(["status"], { OPTCHAT_POOL_SIZE: "lots" });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      /CONFIG_INVALID: .*OPTCHAT_POOL_SIZE \(environment variable OPTCHAT_POOL_SIZE\): not a number; accepted: an integer from 1 to 100/,
    );
    const url = await runCli(["migrate", "--json"], { DATABASE_URL: "mysql://localhost/x" });
    expect(JSON.parse(url.stdout)).toMatchObject({
      ok: false,
      error: { code: "CONFIG_INVALID", details: { settings: ["DATABASE_URL"] } },
    });
  });

  it("says where and how to fix an unreachable server", async () => {
    const result = await runCli(["status"], { DATABASE_URL: "postgres://postgres@127.0.0.1:1/optchat" });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      /DATABASE_UNAVAILABLE: Cannot reach PostgreSQL at 127\.0\.0\.1:1\/optchat: .*DATABASE_URL/,
    );
  });
});
