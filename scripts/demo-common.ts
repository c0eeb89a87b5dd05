// What both demos (scripts/demo.ts for OpenCode 1.18.33, scripts/demo-v2.ts for OpenCode V2) share: where the memory
// lives, a few SQL reads, a poller and the request text helpers.
import pg from "pg";
import { EMBEDDED_DATABASE, type EmbeddedSettings, embeddedUrl } from "../src/embedded/paths.js";
import { ensureEmbeddedServer } from "../src/embedded/server.js";
import { resolveConfig } from "../src/memory/config.js";
import { startEmbedded } from "../src/memory/database.js";
import { migrateAll } from "../src/memory/migrate.js";
import type { CapturedRequest } from "./model-server.js";

export const ROOT = new URL("..", import.meta.url).pathname;
export const say = (line = ""): void => {
  process.stdout.write(`${line}\n`);
};
export const WAIT_MS = 120_000;

/**
 * Where the demo keeps its memory. With DATABASE_URL: a scratch database on that server, dropped at the end. Without:
 * the embedded server of a data directory of the demo's own (<data dir>-demo, kept, so a second run starts warm), which
 * the OpenCode processes' plugins start by themselves exactly as a user's would (no URL configured); its optchat
 * database is emptied at every start.
 */
export interface DemoTarget {
  readonly adminUrl: string;
  readonly demoUrl: string;
  readonly where: string;
  readonly pluginOptions: Record<string, string>;
  readonly env: Record<string, string>;
  prepare(): Promise<void>;
  cleanup(): Promise<void>;
}

export function demoTarget(): DemoTarget {
  const base = process.env.DATABASE_URL;
  if (base) {
    const databaseName = `optchat_demo_${process.pid}`;
    const adminUrl = new URL(base);
    adminUrl.pathname = "/postgres";
    const demoUrl = new URL(base);
    demoUrl.pathname = `/${databaseName}`;
    return {
      adminUrl: adminUrl.toString(),
      demoUrl: demoUrl.toString(),
      where: `scratch database ${databaseName} on ${adminUrl.host}`,
      pluginOptions: { databaseUrl: demoUrl.toString() },
      env: {},
      prepare: async () => {
        await admin("SELECT 1", adminUrl.toString()).catch((error: Error) => {
          throw new Error(
            `No PostgreSQL at ${adminUrl.host}: ${error.message}. Unset DATABASE_URL to run the demo on the embedded server, or set it to a server where you may create databases.`,
          );
        });
        await migrateAll(demoUrl.toString());
      },
      cleanup: async () => {
        await admin(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`, adminUrl.toString()).catch(() => {});
      },
    };
  }
  const user = resolveConfig({ env: process.env });
  const dataDir = `${user.embedded?.dataDir ?? ""}-demo`;
  const env = { ...process.env, OPTCHAT_DATA_DIR: dataDir, OPTCHAT_SOCKET_DIR: "" };
  const config = resolveConfig({ env });
  const embedded = config.embedded as EmbeddedSettings;
  return {
    adminUrl: embeddedUrl(embedded.socketDir, "postgres"),
    demoUrl: config.databaseUrl,
    where: `the embedded PostgreSQL server of ${dataDir} (no DATABASE_URL set)`,
    pluginOptions: {},
    // Both pinned: OpenCode runs with a HOME and XDG directories of its own (scripts/opencode-harness.ts).
    // No legacy default: the demo must never run on (or write into) a memory kept at the old default URL.
    env: { OPTCHAT_DATA_DIR: dataDir, OPTCHAT_SOCKET_DIR: embedded.socketDir, OPTCHAT_LEGACY_DATABASE_URL: "" },
    prepare: async () => {
      await ensureEmbeddedServer(embedded);
      await admin(
        `DROP DATABASE IF EXISTS ${EMBEDDED_DATABASE} WITH (FORCE)`,
        embeddedUrl(embedded.socketDir, "postgres"),
      );
      await startEmbedded(config);
    },
    cleanup: async () => {},
  };
}

export async function admin<T extends pg.QueryResultRow>(sql: string, url: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

export async function until<T>(what: string, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${WAIT_MS / 1000} s waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** The person's words: the last text part of the last user message (optchat's volatile memory part comes first). */
export function lastUser(request: CapturedRequest): string {
  const messages = (request.body as { messages?: { role: string; content?: unknown }[] }).messages ?? [];
  const content = messages.filter((m) => m.role === "user").at(-1)?.content;
  return Array.isArray(content) ? text(content.slice(-1)) : text(content);
}

export function text(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => (p as { text?: string }).text ?? "").join("");
  return "";
}

export function block(source: string, name: string): string {
  const start = source.indexOf(`<${name}`);
  const end = source.indexOf(`</${name}>`, start);
  return start >= 0 && end > start ? source.slice(start, end + name.length + 3) : "";
}

/**
 * B's first request: its shared memory block, which must hold A's decision, with no tool call yet; printed as the
 * demo shows it. Returns the block. `joiner` joins the user messages' texts (V1 leads B's message with memory).
 */
export function showFirstRequest(first: CapturedRequest, joiner: string): string {
  const messages = (first.body as { messages: { role: string; content?: unknown; tool_calls?: unknown[] }[] }).messages;
  const memory = messages
    .filter((m) => m.role === "user")
    .map((m) => text(m.content))
    .join(joiner);
  const shared = block(memory, "shared_memory");
  if (!shared.includes("LISTEN/NOTIFY")) throw new Error(`B's first request lacks A's decision:\n${memory}`);
  if (messages.some((m) => m.role === "tool" || (m.tool_calls?.length ?? 0) > 0)) {
    throw new Error("B's first request already contains tool calls");
  }
  say(`   B's first model request (#${first.index}) carried, before any tool call:`);
  for (const line of shared.split("\n")) say(`   | ${line}`);
  return shared;
}
