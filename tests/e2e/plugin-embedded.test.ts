import { readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../../scripts/model-server.js";
import {
  cleanupOpencodeEnv,
  createOpencodeEnv,
  type OpencodeEnv,
  type OpencodeServer,
  startOpencodeServer,
} from "../../scripts/opencode-harness.js";
import { embeddedUrl } from "../../src/embedded/paths.js";
import { stopEmbeddedServer } from "../../src/embedded/server.js";
import { resolveConfig } from "../../src/memory/config.js";
import { retrying } from "../helpers.js";

/**
 * The plugin with no database URL configured, as a user with Node alone runs it: the first OpenCode process starts the
 * embedded server itself (detached, one for both processes), every turn lands there, and once OpenCode is gone the
 * server stops by itself after its idle time; the next OpenCode starts it again and finds every record.
 */

const WAIT = 90_000;
const IDLE_SECONDS = 4;
const PLUGIN_PATH = join(import.meta.dirname, "..", "..", "plugin", "index.ts");

let model: ModelServer;
let dataDir: string;
let socketDir: string;
const envs: OpencodeEnv[] = [];
const servers: OpencodeServer[] = [];

beforeAll(async () => {
  model = await startModelServer();
  dataDir = `/tmp/optchat-e2e-${process.pid}`;
  const config = resolveConfig({ env: { OPTCHAT_DATA_DIR: dataDir } });
  socketDir = config.embedded?.socketDir as string;
});

afterAll(async () => {
  await Promise.allSettled(servers.map((server) => server.stop()));
  for (const env of envs.reverse()) await cleanupOpencodeEnv(env).catch(() => {});
  await model?.close();
  const config = resolveConfig({ env: { OPTCHAT_DATA_DIR: dataDir } });
  if (config.embedded) await stopEmbeddedServer(config.embedded);
  rmSync(dataDir, { recursive: true, force: true });
});

/** PIDs of the processes serving this data directory: postmasters (and their backends) and the idle supervisor. */
function serverProcesses(): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").join(" ");
      if (cmdline.includes(`${dataDir}/postgres`) || cmdline.includes(`${dataDir} `)) found.push(Number(entry));
    } catch {}
  }
  return found;
}

function postmasters(): number[] {
  return serverProcesses().filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("unix_socket_directories");
    } catch {
      return false;
    }
  });
}

async function turns(): Promise<number> {
  const client = new pg.Client({ connectionString: embeddedUrl(socketDir) });
  await client.connect();
  try {
    return (await client.query<{ n: number }>("SELECT count(*)::int AS n FROM optchat.turns")).rows[0]?.n ?? 0;
  } finally {
    await client.end();
  }
}

describe("the plugin with no database URL: the embedded server", { timeout: 240_000 }, () => {
  it("two OpenCode processes started together share one server they started; it stops when idle; the next start finds every record", async () => {
    const extraEnv = {
      DATABASE_URL: "",
      OPTCHAT_LEGACY_DATABASE_URL: "",
      OPTCHAT_DATA_DIR: dataDir,
      OPTCHAT_SOCKET_DIR: socketDir,
      OPTCHAT_EMBEDDED_IDLE_SECONDS: String(IDLE_SECONDS),
      OPTCHAT_READINESS_WAIT_MS: "30000",
    };
    const first = await createOpencodeEnv({ modelUrl: model.url, pluginPath: PLUGIN_PATH, extraEnv });
    envs.push(first);
    // Two OpenCode installations (each its own SQLite: two starting at once on one SQLite file get "database is
    // locked" from OpenCode itself), one optchat data directory.
    const second = await createOpencodeEnv({ modelUrl: model.url, pluginPath: PLUGIN_PATH, extraEnv });
    envs.push(second);
    const [a, b] = await Promise.all([startOpencodeServer(first), startOpencodeServer(second)]);
    servers.push(a, b);
    const [sa, sb] = await Promise.all([a.createSession("A"), b.createSession("B")]);
    await Promise.all([a.prompt(sa, "EMB-A first REPLY=ok A"), b.prompt(sb, "EMB-B first REPLY=ok B")]);
    await Promise.all([a.waitIdle(sa, WAIT), b.waitIdle(sb, WAIT)]);
    await retrying(
      async () => {
        if ((await turns()) < 2) throw new Error("turns not stored yet");
      },
      WAIT,
      "both turns in the embedded server",
    );
    expect(postmasters()).toHaveLength(1);

    await Promise.all([a.stop(), b.stop()]);
    servers.length = 0;
    // Idle time, one supervisor poll, the fast shutdown: well under 30 s.
    await retrying(
      async () => {
        const left = serverProcesses();
        if (left.length > 0) throw new Error(`still running: ${left.join(", ")}`);
      },
      30_000,
      "the embedded server and its supervisor to stop by themselves",
    );
    expect(readFileSync(join(dataDir, "server.log"), "utf8")).toMatch(/received fast shutdown request/);

    const again = await startOpencodeServer(first);
    servers.push(again);
    const session = await again.createSession("A again");
    await again.prompt(session, "EMB-C after the restart REPLY=ok C");
    await again.waitIdle(session, WAIT);
    await retrying(
      async () => {
        if ((await turns()) < 3) throw new Error("third turn not stored yet");
      },
      WAIT,
      "the third turn beside the first two",
    );
    expect(postmasters()).toHaveLength(1);
  });
});
