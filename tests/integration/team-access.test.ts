import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolveConfig } from "../../src/memory/config.js";
import { type Memory, openMemory } from "../../src/memory/service.js";
import { changeTeam, teamMembers } from "../../src/memory/team.js";
import { startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import { createTestDatabase, eventually, LARGE_WINDOW, runCli, testRoles, turnWriter } from "../helpers.js";

// Several people on one database (docs/team.md): each connects as their own non-superuser login, member of the team's
// group role; the operator (the test server's superuser, owner of the tables) runs the team commands and the worker.
const roles = testRoles();
const members = new Map<string, Memory>();
let drop: () => Promise<void>;
let url: string;
let operator: Memory;
let stopWorker: () => Promise<void>;
let shared: Session; // alice's, shared, in the team's project
let secret: Session; // alice's, private, same project
let other: Session; // alice's, shared, in a project bob is not granted
let bobs: Session;
const SHARED_WORD = "kestrelqueue";
const PRIVATE_WORD = "marmosetsalary";
const OTHER_WORD = "ocelotlaunch";

function dbName(): string {
  return new URL(url).pathname.slice(1);
}

function as(label: string): Memory {
  const memory = members.get(label);
  if (!memory) throw new Error(`no memory for ${label}`);
  return memory;
}

async function openAs(label: string): Promise<Memory> {
  const databaseUrl = roles.url(label, dbName());
  const memory = await openMemory(resolveConfig({ overrides: { poolSize: 4, summarizer: "fake", databaseUrl } }));
  members.set(label, memory);
  return memory;
}

/** One statement as role `label` on a connection of its own (raw SQL, as a person could send it). */
async function sqlAs<T extends pg.QueryResultRow>(label: string, sql: string, params: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: roles.url(label, dbName()) });
  await client.connect();
  try {
    return (await client.query<T>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

async function publicationCount(): Promise<number> {
  const { rows } = await operator.pool.query("SELECT count(*)::int AS n FROM optchat.publications");
  return rows[0].n;
}

beforeAll(async () => {
  const db = await createTestDatabase();
  drop = db.drop;
  url = db.url;
  const config = resolveConfig({ overrides: { poolSize: 6, summarizer: "fake", databaseUrl: url } });
  operator = await openMemory(config);
  const worker = await startWorker(operator, config, () => {});
  stopWorker = () => worker.stop();
  await changeTeam(operator.pool, { action: "init", group: roles.name("team") });
  for (const label of ["alice", "bob", "carol"]) {
    await changeTeam(operator.pool, { action: "add", role: roles.name(label), displayName: label });
    await changeTeam(operator.pool, { action: "grant", role: roles.name(label), scopeId: "project:prj_team" });
  }
  await changeTeam(operator.pool, { action: "grant", role: roles.name("alice"), scopeId: "project:prj_other" });
  const alice = await openAs("alice");
  await openAs("bob");
  await openAs("carol");
  shared = await alice.openSession({ host: "test", hostSessionId: "A", projectId: "prj_team" });
  secret = await alice.openSession({ host: "test", hostSessionId: "P", projectId: "prj_team", visibility: "private" });
  other = await alice.openSession({ host: "test", hostSessionId: "O", projectId: "prj_other" });
  bobs = await as("bob").openSession({ host: "test", hostSessionId: "B", projectId: "prj_team" });
  const writeTurn = turnWriter({ memory: alice }, Date.UTC(2026, 11, 2, 9));
  await writeTurn(shared, "a1", [`Which queue for the importer?`, `Decision: the ${SHARED_WORD} durable queue.`]);
  await writeTurn(secret, "p1", [`Note to self about ${PRIVATE_WORD}`, `Private: ${PRIVATE_WORD} is 120k.`]);
  await writeTurn(other, "o1", [`Plan the ${OTHER_WORD}`, `The ${OTHER_WORD} is on Friday.`]);
  await eventually(async () => ((await publicationCount()) === 2 ? true : undefined), 30_000, "two publications");
}, 120_000);

afterAll(async () => {
  await stopWorker?.();
  for (const memory of members.values()) await memory.close();
  await operator?.close();
  await drop?.();
  await roles.drop();
});

describe("team memory: what each person's role may read", () => {
  it("lists the team with each member's grants", async () => {
    const team = await teamMembers(operator.pool);
    expect(team.group).toBe(roles.name("team"));
    expect(team.members.map((m) => [m.displayName, m.scopes, m.inGroup])).toEqual([
      ["alice", ["project:prj_other", "project:prj_team"], true],
      ["bob", ["project:prj_team"], true],
      ["carol", ["project:prj_team"], true],
    ]);
  });

  it("never publishes a private session's turns", async () => {
    const { rows } = await operator.pool.query(
      "SELECT session_id, publication_state FROM optchat.turns WHERE session_id = $1::text",
      [secret.sessionId],
    );
    expect(rows).toEqual([{ session_id: secret.sessionId, publication_state: "none" }]);
    expect(secret).toMatchObject({ visibility: "private", ownerRole: roles.name("alice") });
  });

  it("shows bob alice's shared decision in his injected context, and nothing of her private or other sessions", async () => {
    const ctx = { sessionId: bobs.sessionId, turnId: "b1" };
    await as("bob").admitTurn({ ...ctx, query: "queue" });
    const context = await as("bob").assembleContext(ctx, LARGE_WINDOW);
    const text = context.blocks.map((block) => block.text).join("\n");
    expect(text).toContain(SHARED_WORD);
    expect(text).not.toContain(PRIVATE_WORD);
    expect(text).not.toContain(OTHER_WORD);
  });

  it("lets bob zoom and search alice's shared turn, and answers a guessed private ref exactly like a missing one", async () => {
    const ctx = { sessionId: bobs.sessionId, turnId: "b1" };
    const bob = as("bob");
    expect(await bob.zoom(ctx, `${shared.sessionId}:0:1+1`)).toMatchObject({
      kind: "message",
      text: expect.stringContaining(SHARED_WORD),
    });
    expect((await bob.search(ctx, { query: SHARED_WORD })).hits.length).toBeGreaterThan(0);
    expect((await bob.search(ctx, { query: PRIVATE_WORD })).hits).toEqual([]);
    expect((await bob.search(ctx, { query: OTHER_WORD })).hits).toEqual([]);
    const guessed = await errorOf(bob.zoom(ctx, `${secret.sessionId}:0:1+1`));
    const missing = await errorOf(bob.zoom(ctx, "mem_zzzzzzzzzzzzzzzzzzzzzzzzzz:0:1+1"));
    expect(guessed.code).toBe("REF_NOT_FOUND");
    expect({ ...guessed, message: guessed.message.replace(secret.sessionId, "ID") }).toEqual({
      ...missing,
      message: missing.message.replace("mem_zzzzzzzzzzzzzzzzzzzzzzzzzz", "ID"),
    });
  });

  it("refuses bob every row of alice's private session and of the ungranted project through raw SQL", async () => {
    const hidden = [secret.sessionId, other.sessionId];
    const counts = await sqlAs<Record<string, number>>(
      "bob",
      `SELECT (SELECT count(*) FROM optchat.sessions WHERE session_id = ANY($1::text[]))::int AS sessions,
              (SELECT count(*) FROM optchat.records WHERE session_id = ANY($1::text[]))::int AS records,
              (SELECT count(*) FROM optchat.turns WHERE session_id = ANY($1::text[]))::int AS turns,
              (SELECT count(*) FROM optchat.trees WHERE session_id = ANY($1::text[]) OR scope_id = 'project:prj_other')::int AS trees,
              (SELECT count(*) FROM optchat.nodes n JOIN optchat.trees t USING (tree_id) WHERE t.session_id = ANY($1::text[]))::int AS nodes,
              (SELECT count(*) FROM optchat.publications WHERE session_id = ANY($1::text[]))::int AS publications,
              (SELECT count(*) FROM optchat.search_term_counts WHERE scope_id = 'project:prj_other')::int AS terms,
              (SELECT count(*) FROM optchat.blobs b WHERE convert_from(b.content, 'UTF8') LIKE '%' || $2::text || '%'
                  OR convert_from(b.content, 'UTF8') LIKE '%' || $3::text || '%')::int AS blobs,
              (SELECT count(*) FROM optchat.nodes WHERE text LIKE '%' || $2::text || '%' OR text LIKE '%' || $3::text || '%')::int AS texts`,
      [hidden, PRIVATE_WORD, OTHER_WORD],
    );
    expect(counts[0]).toEqual({
      sessions: 0,
      records: 0,
      turns: 0,
      trees: 0,
      nodes: 0,
      publications: 0,
      terms: 0,
      blobs: 0,
      texts: 0,
    });
    // The same statement as the operator finds them all (the test can fail).
    const { rows } = await operator.pool.query(
      "SELECT count(*)::int AS n FROM optchat.records WHERE session_id = ANY($1::text[])",
      [hidden],
    );
    expect(rows[0].n).toBe(4);
    const visible = await sqlAs<{ session_id: string }>("bob", "SELECT session_id FROM optchat.sessions ORDER BY 1");
    expect(visible.map((row) => row.session_id).sort()).toEqual([shared.sessionId, bobs.sessionId].sort());
  });

  it("lets alice read her own private session, and her two machines (connections) share it", async () => {
    const rows = await sqlAs<{ n: number }>(
      "alice",
      "SELECT count(*)::int AS n FROM optchat.records WHERE session_id = $1::text",
      [secret.sessionId],
    );
    expect(rows[0]?.n).toBe(2);
  });

  it("refuses writes a member may not make: deleting memory, changing the team", async () => {
    await expect(sqlAs("bob", "DELETE FROM optchat.records")).rejects.toMatchObject({ code: "42501" });
    await expect(
      sqlAs("bob", "INSERT INTO optchat.team_grants (role_name, scope_id) VALUES (current_user, 'project:prj_other')"),
    ).rejects.toMatchObject({ code: "42501" });
    await expect(
      sqlAs("bob", "UPDATE optchat.sessions SET visibility = 'shared' WHERE session_id = $1::text", [secret.sessionId]),
    ).resolves.toEqual([]);
  });

  it("refuses to start a compactor worker as a member, naming the operator", async () => {
    const config = resolveConfig({ overrides: { summarizer: "fake", databaseUrl: roles.url("bob", dbName()) } });
    await expect(startWorker(as("bob"), config, () => {})).rejects.toMatchObject({
      code: "CONFIG_INVALID",
      message: expect.stringContaining(`cannot run as "${roles.name("bob")}"`),
    });
  });

  it("takes a revoked grant away on the next statement", async () => {
    await changeTeam(operator.pool, { action: "revoke", role: roles.name("carol"), scopeId: "project:prj_team" });
    const rows = await sqlAs<{ n: number }>("carol", "SELECT count(*)::int AS n FROM optchat.records");
    expect(rows[0]?.n).toBe(0);
  });

  it("leaves a removed member nothing", async () => {
    await changeTeam(operator.pool, { action: "grant", role: roles.name("carol"), scopeId: "project:prj_team" });
    const before = await sqlAs<{ n: number }>("carol", "SELECT count(*)::int AS n FROM optchat.records");
    expect(before[0]?.n).toBeGreaterThan(0);
    await changeTeam(operator.pool, { action: "remove", role: roles.name("carol") });
    await expect(sqlAs("carol", "SELECT count(*) FROM optchat.records")).rejects.toMatchObject({ code: "42501" });
  });
});

/** Tables without row-level security, because they hold no memory text (docs/team.md "The rule, once"). */
const UNPROTECTED = [
  "compactor_workers",
  "generations",
  "migrations",
  "revision_clock",
  "scopes",
  "session_leases",
  "team",
  "team_grants",
  "team_members",
];

describe("row-level security on the schema", () => {
  it("forces it on every table but the few without memory text, each with the operator's policy and the team's rule", async () => {
    const { rows } = await operator.pool.query<{ name: string; forced: boolean; policies: string[] }>(
      `SELECT c.relname AS name, c.relrowsecurity AND c.relforcerowsecurity AS forced,
              coalesce(array_agg(p.polname::text ORDER BY p.polname) FILTER (WHERE p.polname IS NOT NULL), '{}') AS policies
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'optchat'
         LEFT JOIN pg_policy p ON p.polrelid = c.oid
        WHERE c.relkind = 'r' GROUP BY c.relname, c.relrowsecurity, c.relforcerowsecurity ORDER BY 1`,
    );
    // A new table must be classified here: protected (migrations like 016) or listed as holding no memory text.
    expect(rows.filter((row) => !row.forced).map((row) => row.name)).toEqual(UNPROTECTED);
    for (const row of rows.filter((r) => r.forced))
      expect([row.name, row.policies]).toEqual([
        row.name,
        row.name === "blobs" ? ["operator_all", "team_read", "team_write"] : ["operator_all", "team_rule"],
      ]);
    expect(rows.filter((row) => row.forced).length).toBe(21);
  });
});

describe("optchat team (CLI)", () => {
  it("prints the SQL it runs, changes nothing with --dry-run, and lists the team", async () => {
    const env = { DATABASE_URL: url };
    const dave = roles.name("dave");
    const planned = await runCli(["team", "add", dave, "--name", "Dave", "--dry-run"], env);
    expect(planned.code).toBe(0);
    expect(planned.stdout).toContain(`CREATE ROLE "${dave}" LOGIN;`);
    expect(planned.stdout).toContain(`GRANT "${roles.name("team")}" TO "${dave}";`);
    const granted = await runCli(["team", "grant", roles.name("bob"), "prj_cli", "--json"], env);
    expect(JSON.parse(granted.stdout)).toMatchObject({
      ok: true,
      applied: true,
      statements: [expect.stringContaining("INSERT INTO optchat.team_grants")],
    });
    const listed = await runCli(["team", "list", "--json"], env);
    const team = JSON.parse(listed.stdout) as { members: { role: string; scopes: string[] }[] };
    expect(team.members.map((m) => m.role)).not.toContain(dave);
    expect(team.members.find((m) => m.role === roles.name("bob"))?.scopes).toEqual([
      "project:prj_cli",
      "project:prj_team",
    ]);
  });
});

async function errorOf(promise: Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    await promise;
  } catch (error) {
    const { code, message } = error as { code: string; message: string };
    return { code, message };
  }
  throw new Error("expected a refusal");
}
