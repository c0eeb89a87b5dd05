import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Config, resolveConfig } from "../../src/memory/config.js";
import { migrateAll } from "../../src/memory/migrate.js";
import { type Memory, openMemory } from "../../src/memory/service.js";
import { startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import { asAdmin, eventually, LARGE_WINDOW, testRoles, turnWriter } from "../helpers.js";

// Single-user mode on a managed PostgreSQL: the tables belong to a role that is not a superuser, so FORCE ROW LEVEL
// SECURITY applies the policies to it (migrations/016). Everything must work as before: ingest, publication, the
// injected view, zoom, search, the session's own view; and the search keeps its index plan (docs/team.md "Plans").
const roles = testRoles();
const database = roles.name("db");
let memory: Memory;
let config: Config;
let stopWorker: (() => Promise<void>) | undefined;
let a: Session;
let b: Session;

beforeAll(async () => {
  const owner = await roles.create("owner", { extra: "NOSUPERUSER NOBYPASSRLS" });
  await asAdmin(`CREATE DATABASE ${database} OWNER ${owner}`);
  const url = roles.url("owner", database);
  await migrateAll(url);
  config = resolveConfig({ overrides: { poolSize: 6, summarizer: "fake", databaseUrl: url } });
  memory = await openMemory(config);
  const worker = await startWorker(memory, config, () => {});
  stopWorker = () => worker.stop();
  a = await memory.openSession({ host: "test", hostSessionId: "A", projectId: "prj_owner" });
  b = await memory.openSession({ host: "test", hostSessionId: "B", projectId: "prj_owner" });
}, 120_000);

afterAll(async () => {
  await stopWorker?.();
  await memory?.close();
  await asAdmin(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
  await roles.drop();
});

async function publications(): Promise<number> {
  const { rows } = await memory.pool.query("SELECT count(*)::int AS n FROM optchat.publications");
  return rows[0].n;
}

describe("single-user mode as a non-superuser table owner under FORCE ROW LEVEL SECURITY", () => {
  it("is really subject to row-level security: not a superuser, tables forced", async () => {
    const { rows } = await memory.pool.query(
      `SELECT r.rolsuper, r.rolbypassrls, c.relowner = r.oid AS owns, c.relrowsecurity, c.relforcerowsecurity
         FROM pg_class c, pg_roles r WHERE c.oid = 'optchat.records'::regclass AND r.rolname = current_user`,
    );
    expect(rows[0]).toEqual({
      rolsuper: false,
      rolbypassrls: false,
      owns: true,
      relrowsecurity: true,
      relforcerowsecurity: true,
    });
  });

  it("ingests, publishes, injects, zooms and searches as before", async () => {
    const writeTurn = turnWriter({ memory }, Date.UTC(2026, 11, 1, 9));
    await writeTurn(a, "a1", [
      "Which queue should the importer use?",
      "Decision: the importer uses the broker's durable queue; no Redis.",
    ]);
    await eventually(async () => ((await publications()) === 1 ? true : undefined), 30_000, "a1's publication");
    await memory.admitTurn({ sessionId: b.sessionId, turnId: "b1", query: "queue" });
    const ctx = { sessionId: b.sessionId, turnId: "b1" };
    const context = await memory.assembleContext(ctx, LARGE_WINDOW);
    expect(context.blocks.find((block) => block.name === "shared_memory")?.text).toContain("durable queue");
    const zoomed = await memory.zoom(ctx, `${a.sessionId}:0:1+1`);
    expect(zoomed).toMatchObject({ kind: "message", text: expect.stringContaining("broker's durable queue") });
    const found = await memory.search(ctx, { query: "durable broker" });
    expect(found.hits.map((hit) => hit.ref)).toContain(`${a.sessionId}:0:1+1`);
    const view = await memory.view(a.sessionId);
    expect(view.lines.length).toBeGreaterThan(0);
  });

  it("keeps the full-text index condition in the owner's search plan (no security qual)", async () => {
    const { rows } = await memory.pool.query<{ "QUERY PLAN": string }>(
      `EXPLAIN SELECT r.seq FROM optchat.records r WHERE r.scope_id = 'project:prj_owner' AND r.search @@ 'durable'::tsquery`,
    );
    const plan = rows.map((row) => row["QUERY PLAN"]).join("\n");
    expect(plan).not.toMatch(/SubPlan|InitPlan/);
    // A sequential scan is the planner's choice for a tiny table; the point is that @@ is allowed as an index qual.
    await memory.pool.query("SET enable_seqscan = off");
    try {
      const indexed = await memory.pool.query<{ "QUERY PLAN": string }>(
        `EXPLAIN SELECT r.seq FROM optchat.records r WHERE r.scope_id = 'project:prj_owner' AND r.search @@ 'durable'::tsquery`,
      );
      expect(indexed.rows.map((row) => row["QUERY PLAN"]).join("\n")).toMatch(/Index Cond: .*search @@/);
    } finally {
      await memory.pool.query("RESET enable_seqscan");
    }
  });

  it("lets another role with table privileges read everything while no team is configured", async () => {
    const app = await roles.create("app");
    await memory.pool.query(
      `GRANT USAGE ON SCHEMA optchat TO ${app}; GRANT SELECT ON ALL TABLES IN SCHEMA optchat TO ${app}`,
    );
    const client = new pg.Client({ connectionString: roles.url("app", database) });
    await client.connect();
    try {
      const count =
        "SELECT (SELECT count(*) FROM optchat.records)::int AS records, (SELECT count(*) FROM optchat.blobs)::int AS blobs";
      const asApp = await client.query(count);
      const asOwner = await memory.pool.query(count);
      expect(asApp.rows[0]).toEqual(asOwner.rows[0]);
      expect(asApp.rows[0].records).toBeGreaterThan(0);
    } finally {
      await client.end();
    }
  });
});
