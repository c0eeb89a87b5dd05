import type pg from "pg";
import { afterAll, beforeAll, expect } from "vitest";
import { type ModelServer, startModelServer } from "../../scripts/model-server.js";
import {
  type CreateOpencode2EnvOptions,
  cleanupOpencode2Env,
  createOpencode2Env,
  OPTCHAT_V2_PLUGIN_DIR,
  type Opencode2Env,
  processesOf,
} from "../../scripts/opencode2-harness.js";
import { createTestDatabase } from "../helpers.js";
import { PgPool } from "./v2-pool.js";

/** What a V2 e2e file runs in: its own database, the scripted model, and OpenCode V2 installs loading plugin/v2. */
export interface V2World {
  database: Awaited<ReturnType<typeof createTestDatabase>>;
  db: pg.Pool;
  model: ModelServer;
  /** Every install after the first shares the first one's data directory: one V2 store, several people's clients. */
  envs: Opencode2Env[];
}

export interface V2WorldOptions {
  /** How many V2 installs (default 1). */
  readonly installs?: number;
  /** Settings beside DATABASE_URL (default: readiness waits up to 30 s, as a loaded machine needs). */
  readonly extraEnv?: Record<string, string>;
  /** More options for every install (the provider's API, the model's window). */
  readonly install?: Omit<CreateOpencode2EnvOptions, "modelUrl" | "plugins" | "extraEnv" | "shareDataWith">;
  readonly setupTimeoutMs?: number;
}

/**
 * Sets the world up before the file's tests and takes it down after them, checking that no process of any install is
 * left. The returned object is filled in by `beforeAll`.
 */
export function useV2World(options: V2WorldOptions = {}): V2World {
  const world = { envs: [] } as unknown as V2World;
  beforeAll(async () => {
    world.database = await createTestDatabase();
    world.db = PgPool(world.database.url);
    world.model = await startModelServer();
    const extraEnv = {
      DATABASE_URL: world.database.url,
      ...(options.extraEnv ?? { OPTCHAT_READINESS_WAIT_MS: "30000" }),
    };
    const common = { ...options.install, modelUrl: world.model.url, plugins: [OPTCHAT_V2_PLUGIN_DIR], extraEnv };
    for (let n = 0; n < (options.installs ?? 1); n++) {
      const first = world.envs[0];
      world.envs.push(await createOpencode2Env(first ? { ...common, shareDataWith: first } : common));
    }
  }, options.setupTimeoutMs ?? 60_000);

  afterAll(async () => {
    const installs = [...world.envs].reverse();
    for (const env of installs) await cleanupOpencode2Env(env);
    for (const env of installs) expect(processesOf(env)).toEqual([]);
    await world.model?.close();
    await world.db?.end();
    await world.database?.drop();
  });
  return world;
}
