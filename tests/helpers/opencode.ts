import pg from "pg";
import { afterAll, beforeAll } from "vitest";
import { type ModelServer, startModelServer } from "../../scripts/model-server.js";
import {
  type CreateOpencodeEnvOptions,
  cleanupOpencodeEnv,
  createOpencodeEnv,
  type OpencodeEnv,
  type OpencodeServer,
  startOpencodeServer,
} from "../../scripts/opencode-harness.js";
import { createTestDatabase } from "./database.js";
import { ROOT } from "./processes.js";

/** The plugin module OpenCode loads in the e2e tests: this checkout's. */
export const PLUGIN_PATH = `${ROOT}plugin/index.ts`;

/**
 * What an e2e test file runs OpenCode against: a fresh database, a pool on it, the scripted model, and the OpenCode
 * environments and servers it starts (all cleaned up by `close`, newest first).
 */
export interface PluginWorld {
  readonly database: { name: string; url: string; drop(): Promise<void> };
  readonly db: pg.Pool;
  readonly model: ModelServer;
  /** An OpenCode environment loading the plugin on this world's database (options and env merged over defaults). */
  env(options?: Partial<Omit<CreateOpencodeEnvOptions, "modelUrl" | "pluginPath">>): Promise<OpencodeEnv>;
  server(env: OpencodeEnv): Promise<OpencodeServer>;
  close(): Promise<void>;
}

export async function startPluginWorld(): Promise<PluginWorld> {
  const database = await createTestDatabase();
  const db = new pg.Pool({ connectionString: database.url, max: 2 });
  // A dropped idle connection is reported by the next query, not as an uncaught exception in the test process.
  db.on("error", () => {});
  const model = await startModelServer();
  const envs: OpencodeEnv[] = [];
  const servers: OpencodeServer[] = [];
  return {
    database,
    db,
    model,
    async env(options = {}) {
      const env = await createOpencodeEnv({
        ...options,
        modelUrl: model.url,
        pluginPath: PLUGIN_PATH,
        pluginOptions: { databaseUrl: database.url, ...options.pluginOptions },
        extraEnv: { OPTCHAT_READINESS_WAIT_MS: "30000", OPTCHAT_LEASE_SECONDS: "10", ...options.extraEnv },
      });
      envs.push(env);
      return env;
    },
    async server(env) {
      const server = await startOpencodeServer(env);
      servers.push(server);
      return server;
    },
    async close() {
      await Promise.allSettled(servers.map((server) => server.stop()));
      // Environments sharing another's data dir live under its root: the newest (the sharer) goes first.
      for (const env of envs.reverse()) await cleanupOpencodeEnv(env).catch(() => {});
      await model.close();
      await db.end();
      await database.drop();
    },
  };
}

/** What `usePluginServer` gives an e2e file: its plugin world and one OpenCode server on a default environment. */
export interface PluginServer {
  readonly world: PluginWorld;
  readonly db: pg.Pool;
  readonly model: ModelServer;
  readonly server: OpencodeServer;
  /** The environment's project directory (where the agent's tools run). */
  readonly projectDir: string;
  /** Sends `text` to the session and waits until the session is idle again. */
  ask(session: string, text: string): Promise<void>;
}

/** Registers beforeAll/afterAll hooks giving the file a plugin world with one OpenCode server (see `PluginServer`). */
export function usePluginServer(waitMs: number): PluginServer {
  const handle = {
    async ask(session: string, text: string) {
      await handle.server.prompt(session, text);
      await handle.server.waitIdle(session, waitMs);
    },
  } as { -readonly [K in keyof PluginServer]: PluginServer[K] };
  beforeAll(async () => {
    handle.world = await startPluginWorld();
    ({ db: handle.db, model: handle.model } = handle.world);
    const env = await handle.world.env();
    handle.projectDir = env.projectDir;
    handle.server = await handle.world.server(env);
  }, 120_000);
  afterAll(async () => {
    await handle.world?.close();
  });
  return handle;
}
