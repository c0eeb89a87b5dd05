import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stopLocalServers } from "../../plugin/transport/local-server/client.js";
import { localServerPids, type OpencodeEnv, runOpencode } from "../../scripts/opencode-harness.js";
import { migrateAll } from "../../src/memory/migrate.js";
import { type PluginWorld, retrying, startPluginWorld } from "../helpers.js";
import { type PrivateCluster, privateClusterUnsupported, startPrivateCluster } from "../private-cluster.js";
import { requestsFor, stableMemoryParts, volatileMemoryText } from "./requests.js";

/**
 * Issue 37: a workflow of `opencode run`s only (no `optchat worker`, no long-lived OpenCode), as the README's quick start
 * has it. Each run's first request must carry the previous run's decision: the local server's own compactor worker
 * (plugin/transport/local-server/workers.ts) publishes every turn between runs, across a SIGTERM of the server, its idle-out, and a
 * restart of the database (a private cluster, so the machine's server is never touched). Real OpenCode 1.18.33.
 */

const WAIT = 90_000;
const unsupported = privateClusterUnsupported();
let world: PluginWorld;
let cluster: PrivateCluster;
let db: pg.Pool;
let env: OpencodeEnv;
let serversDirectory: string;

beforeAll(async () => {
  if (unsupported) return;
  world = await startPluginWorld();
  cluster = await startPrivateCluster();
  const url = cluster.url("optchat_run_only");
  await migrateAll(url);
  db = new pg.Pool({ connectionString: url, max: 2 });
  db.on("error", () => {});
  env = await world.env({
    pluginOptions: { databaseUrl: url },
    extraEnv: { OPTCHAT_LOCAL_SERVER_IDLE_SECONDS: "6", OPTCHAT_DATABASE_RETRY_MS: "20000" },
  });
  serversDirectory = join(env.env.TMPDIR as string, `optchat-${process.getuid?.() ?? "user"}`);
}, 180_000);

afterAll(async () => {
  if (serversDirectory) await stopLocalServers(serversDirectory).catch(() => []);
  await db?.end();
  await world?.close();
  await cluster?.destroy();
});

/** Pids of this environment's local servers now running. */
function serverPids(): number[] {
  return localServerPids(serversDirectory);
}

function serverLog(): string {
  if (!existsSync(serversDirectory)) return "";
  return readdirSync(serversDirectory)
    .filter((name) => name.endsWith(".log"))
    .map((name) => readFileSync(join(serversDirectory, name), "utf8"))
    .join("\n");
}

/** optchat's memory in the first request of the run whose prompt has `marker`. */
function firstRequestMemory(marker: string): string {
  const request = requestsFor(world.model.requests(), marker)[0];
  if (!request) throw new Error(`no request for ${marker}`);
  return `${(stableMemoryParts(request) ?? []).join("")}\n${volatileMemoryText(request) ?? ""}`;
}

/** `retrying`, with the servers' log in the error: what the server did instead is the evidence. */
async function retryingWithLog(check: () => Promise<void>, timeoutMs: number, what: string): Promise<void> {
  try {
    await retrying(check, timeoutMs, what);
  } catch (error) {
    throw new Error(`${(error as Error).message}\nlocal server log:\n${serverLog().slice(-4000)}`);
  }
}

/** Waits until the turn of the run whose session is `hostSessionId` is published, with no OpenCode process running. */
async function published(hostSessionId: string): Promise<void> {
  await retryingWithLog(
    async () => {
      const { rows } = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM optchat.publications p JOIN optchat.sessions s USING (session_id)
          WHERE s.host_session_id = $1::text`,
        [hostSessionId],
      );
      expect(rows[0]?.n).toBe(1);
    },
    30_000,
    `the publication of ${hostSessionId}'s turn`,
  );
}

describe.skipIf(unsupported)("a workflow of `opencode run`s only", { timeout: 600_000 }, () => {
  it("publishes every turn between runs, across a server restart, its idle-out and a database restart", async () => {
    const most = { servers: 0 };
    const sampler = setInterval(() => {
      most.servers = Math.max(most.servers, serverPids().length);
    }, 200);
    let previous: string | undefined;
    const run = async (step: number, before?: () => Promise<void>) => {
      await before?.();
      const marker = `RUN-ONLY-${step}`;
      const result = await runOpencode(env, `${marker} we decided the broker is broker-${step} REPLY=noted`, {
        timeoutMs: WAIT,
      });
      expect(result.code, result.stderr.slice(-2000)).toBe(0);
      // Background work never talks in the person's terminal.
      expect(result.stderr).not.toMatch(/compactor worker|Cannot use a pool|pg-boss/);
      if (previous) expect(firstRequestMemory(marker), `run ${step}'s first request`).toContain(previous);
      previous = `broker-${step}`;
      await published(result.sessionId as string);
    };
    try {
      await run(1); // starts the server, runs its own thread, hands its queue to the server
      await run(2); // served
      await run(3, async () => {
        expect(await stopLocalServers(serversDirectory)).toHaveLength(1);
      });
      await run(4, async () => {
        // Its idle time (6 s here) with no process: it stops by itself.
        await retrying(async () => expect(serverPids()).toEqual([]), 30_000, "the server's idle-out");
      });
      await run(5, async () => {
        await cluster.stop("fast");
        await cluster.start();
      });
      await run(6);
    } finally {
      clearInterval(sampler);
    }
    expect(most.servers).toBe(1);
    expect(serverLog()).not.toMatch(/unhandled rejection|uncaught exception|Cannot use a pool/);
  });
});
