import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { clusterMajor } from "../embedded/cluster.js";
import { directorySize, ensureEmbeddedServer } from "../embedded/server.js";
import { sqlStateOf } from "../store/db.js";
import { holdsOptchatSchema, readSchemaState, SCHEMA_VERSION } from "../store/migrate.js";
import { type Config, redactUrl } from "./config.js";
import { migrateAll } from "./migrate.js";

export interface PrepareOptions {
  /** Where an earlier optchat kept its memory by default (default: OPTCHAT_LEGACY_DATABASE_URL). */
  readonly legacyUrl?: string;
  /** Where the one-time notice about a legacy memory goes (default: stderr). */
  readonly notice?: (message: string) => void;
}

const legacyDecisions = new Map<string, Promise<string | undefined>>();
const migrated = new Map<string, Promise<void>>();

/**
 * The configuration with its database ready: a configured DATABASE_URL as it is; otherwise the embedded server,
 * started if it is not running (src/embedded/server.ts) and migrated (optchat owns that database), or, while no
 * embedded cluster exists yet and the old default database holds optchat's memory, that database (said once, with how
 * to keep it or move it). Cheap when the server runs: one connection over the socket.
 */
export async function prepareDatabase(config: Config, options: PrepareOptions = {}): Promise<Config> {
  const embedded = config.embedded;
  if (!embedded) return config;
  const legacy = await legacyMemory(config, options);
  if (legacy) return Object.freeze({ ...config, databaseUrl: legacy, embedded: null });
  return await startEmbedded(config);
}

/** The embedded server of `config`, started and migrated (no legacy check: `optchat db start`, `db move-in`). */
export async function startEmbedded(config: Config): Promise<Config> {
  const embedded = config.embedded;
  if (!embedded) return config;
  await ensureEmbeddedServer(embedded);
  let schema = migrated.get(config.databaseUrl);
  if (!schema) {
    schema = migrateIfBehind(config.databaseUrl);
    migrated.set(config.databaseUrl, schema);
    schema.catch(() => migrated.delete(config.databaseUrl));
  }
  await schema;
  return config;
}

/** The legacy database's URL when it should be used: no embedded cluster yet, and it holds optchat's schema. */
function legacyMemory(config: Config, options: PrepareOptions): Promise<string | undefined> {
  const embedded = config.embedded;
  if (!embedded || clusterMajor(embedded.clusterDir) !== undefined) return Promise.resolve(undefined);
  const url = options.legacyUrl ?? config.legacyDatabaseUrl;
  if (url === "") return Promise.resolve(undefined);
  const key = `${embedded.dataDir}\n${url}`;
  let decision = legacyDecisions.get(key);
  if (!decision) {
    decision = (async () => {
      if (!(await holdsMemory(url))) return undefined;
      const marker = join(embedded.dataDir, "legacy-notice");
      if (!existsSync(marker)) {
        const say = options.notice ?? ((message: string) => process.stderr.write(`${message}\n`));
        say(legacyNotice(url, embedded.dataDir));
        try {
          mkdirSync(embedded.dataDir, { recursive: true, mode: 0o700 });
          writeFileSync(marker, `${new Date().toISOString()} ${redactUrl(url)}\n`);
        } catch {}
      }
      return url;
    })();
    legacyDecisions.set(key, decision);
  }
  return decision;
}

export function legacyNotice(url: string, dataDir: string): string {
  const shown = redactUrl(url);
  return [
    `optchat: your memory is in ${shown}, the default of earlier versions; optchat keeps using it.`,
    `  Keep it there for good: set DATABASE_URL=${shown} (or the plugin option databaseUrl).`,
    `  Or move it into the embedded server (data in ${dataDir}): optchat db move-in --from ${shown}`,
    '  (this notice is shown once; docs/database.md "Moving")',
  ].join("\n");
}

/** True when `url` answers and holds optchat's schema; a server that is absent or refuses says no. */
async function holdsMemory(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1500 });
  client.on("error", () => {});
  try {
    await client.connect();
  } catch {
    client.end().catch(() => {}); // not awaited: in Bun, end() after a refused connect never settles
    return false;
  }
  try {
    return await holdsOptchatSchema(client);
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

async function migrateIfBehind(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on("error", () => {});
  let behind = true;
  let connected = false;
  try {
    await client.connect();
    connected = true;
  } catch (error) {
    client.end().catch(() => {}); // not awaited: in Bun, end() after a refused connect never settles
    if (sqlStateOf(error) !== "3D000") throw error; // 3D000: no optchat database yet, made by the migration
  }
  if (connected) {
    try {
      const state = await readSchemaState(client);
      behind = state.version < SCHEMA_VERSION || !state.jobQueue;
    } finally {
      await client.end().catch(() => {});
    }
  }
  if (behind) await migrateAll(url);
}

/** Which server a configuration uses, where its data lives and how large it is: `optchat status` and `db status`. */
export interface DatabaseDescription {
  readonly kind: "embedded" | "url";
  readonly url: string;
  readonly dataDir?: string;
  readonly socketDir?: string;
  readonly sizeBytes?: number;
  readonly idleSeconds?: number;
}

export function describeDatabase(config: Config): DatabaseDescription {
  const embedded = config.embedded;
  if (!embedded) return { kind: "url", url: redactUrl(config.databaseUrl) };
  return {
    kind: "embedded",
    url: redactUrl(config.databaseUrl),
    dataDir: embedded.dataDir,
    socketDir: embedded.socketDir,
    sizeBytes: directorySize(embedded.dataDir),
    idleSeconds: embedded.idleSeconds,
  };
}

/** One line for people: `optchat status`, `optchat doctor`. */
export function databaseLine(config: Config): string {
  const d = describeDatabase(config);
  if (d.kind === "url") return `database   ${d.url} (DATABASE_URL or option databaseUrl)`;
  return `database   embedded PostgreSQL, data in ${d.dataDir} (${megabytes(d.sizeBytes ?? 0)}), socket in ${d.socketDir}; stops after ${d.idleSeconds} s idle`;
}

export function megabytes(bytes: number): string {
  return `${(bytes / 1_000_000).toFixed(1)} MB`;
}
