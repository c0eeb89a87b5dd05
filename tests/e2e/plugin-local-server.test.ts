import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stopLocalServers } from "../../plugin/transport/local-server/client.js";
import { type OpencodeEnv, runOpencode } from "../../scripts/opencode-harness.js";
import { resolveConfig } from "../../src/memory/config.js";
import { openMemory } from "../../src/memory/service.js";
import { finishTurnNeedingSummary, type PluginWorld, retrying, startPluginWorld } from "../helpers.js";
import { requestsFor, toolResults } from "./requests.js";

/**
 * The optchat local server (plugin/transport/local-server/server.ts) with real OpenCode 1.18.33 `opencode run` processes: the first run
 * finds none, runs its own thread and starts one; the next runs are served by it; a run killed in the middle of its
 * turn is closed by the server and its session taken over at once by the next process; the server stops with its
 * SIGTERM (as the harness stops it with its environment) and removes its socket.
 */

const WAIT = 90_000;

let world: PluginWorld;
let db: pg.Pool;
let env: OpencodeEnv;
let serversDirectory: string;

beforeAll(async () => {
  world = await startPluginWorld();
  ({ db } = world);
  env = await world.env();
  serversDirectory = join(env.env.TMPDIR as string, `optchat-${process.getuid?.() ?? "user"}`);
}, 120_000);

afterAll(async () => {
  await world?.close();
});

async function turnsOf(hostSessionId: string): Promise<{ state: string; records: number }[]> {
  const result = await db.query<{ state: string; records: number }>(
    `SELECT t.state, (SELECT count(*)::int FROM optchat.records r
                       WHERE r.session_id = t.session_id AND r.turn_id = t.turn_id) AS records
       FROM optchat.turns t JOIN optchat.sessions s ON s.session_id = t.session_id
      WHERE s.host_session_id = $1::text ORDER BY t.admitted_at`,
    [hostSessionId],
  );
  return result.rows;
}

const socketsNow = () =>
  existsSync(serversDirectory) ? readdirSync(serversDirectory).filter((n) => n.endsWith(".sock")) : [];

/** memory_inspect's report as the model received it in the request after its call. */
function inspectReport(marker: string): { process: { runsIn: string; holder: string } } {
  const request = requestsFor(world.model.requests(), marker).at(-1);
  if (!request) throw new Error(`no request for ${marker}`);
  return JSON.parse([...toolResults(request).values()][0] as string);
}

// Two or three OpenCode runs in a row per test, each waited for up to WAIT: the default 60 s ended the killed-run test
// on CI's loaded cores once (stop 27's CI), while it takes 9.5 s alone, 14-20 s beside two busy loops, 26 s in a full
// run.
describe("the local server", { timeout: 240_000 }, () => {
  it("is started by the first `opencode run`, which runs its own thread; the next runs are served by it", async () => {
    const inspect = 'TOOLS=[{"name":"memory_inspect","args":{"format":"json"}}] END';
    const first = await runOpencode(env, `LS-1 ${inspect}`, { timeoutMs: WAIT });
    expect(first.code, first.stderr.slice(-2000)).toBe(0);
    expect(inspectReport("LS-1").process.runsIn).toBe("the plugin's own thread");
    await retrying(
      async () => {
        expect(socketsNow()).toHaveLength(1);
      },
      30_000,
      "the local server's socket",
    );

    const second = await runOpencode(env, `LS-2 ${inspect}`, { timeoutMs: WAIT });
    expect(second.code, second.stderr.slice(-2000)).toBe(0);
    const report = inspectReport("LS-2");
    // On Node.js, found on PATH (setting localServerRuntime, default auto), as every machine running optchat has it.
    expect(report.process.runsIn).toMatch(
      /^the optchat local server \(plugin\/transport\/local-server\/server\.ts, on Node\.js \d+\./,
    );
    // The lease holder is the OpenCode process served, not the server.
    expect(report.process.holder).toContain(`:${second.pid}@`);
    const third = await runOpencode(env, "LS-3 where do we deploy? REPLY=fly", { timeoutMs: WAIT });
    expect(third.code, third.stderr.slice(-2000)).toBe(0);

    // Every turn stored whole and completed, the served ones as the thread's: user, assistant (+ tool), closed.
    for (const result of [first, second, third]) {
      const turns = await turnsOf(result.sessionId as string);
      expect(turns.map((t) => t.state)).toEqual(["completed"]);
      expect(turns[0]?.records).toBeGreaterThanOrEqual(2);
    }
    expect((await turnsOf(second.sessionId as string))[0]?.records).toBe(4);
    const served = await db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE 'optchat-local-server-%' AND datname = current_database()",
    );
    expect(served.rows[0]?.n).toBeGreaterThan(0);
    expect(socketsNow()).toHaveLength(1);
  });

  it("closes a killed run's adapter, and the next process takes the session over at once", async () => {
    expect(socketsNow()).toHaveLength(1);
    const kill = new AbortController();
    const killed = runOpencode(env, "LS-KILL the broker is nats SLOW=30 REPLY=noted", {
      timeoutMs: WAIT,
      kill: kill.signal,
    });
    await retrying(
      async () => {
        if (requestsFor(world.model.requests(), "LS-KILL").length === 0) throw new Error("not sent yet");
      },
      WAIT,
      "the killed run's request",
    );
    const session = await retrying(
      async () => {
        const row = await db.query<{ host_session_id: string }>(
          `SELECT s.host_session_id FROM optchat.sessions s JOIN optchat.session_leases l USING (session_id)
            WHERE l.expires_at > now() ORDER BY l.expires_at DESC LIMIT 1`,
        );
        if (!row.rows[0]) throw new Error("no lease held yet");
        return row.rows[0].host_session_id;
      },
      WAIT,
      "the killed run's lease",
    );
    kill.abort();
    expect((await killed).code).toBeNull();

    // The lease (10 s here) names the killed OpenCode process, so the next prompt takes it over instead of waiting.
    const started = Date.now();
    const next = await runOpencode(env, "LS-NEXT where is the broker? REPLY=nats", { session, timeoutMs: WAIT });
    expect(next.code, next.stderr.slice(-2000)).toBe(0);
    expect(next.stderr).not.toContain("is being driven by another OpenCode process");
    const turns = await turnsOf(session);
    expect(turns.at(-1)?.state).toBe("completed");
    // The killed turn's prompt was stored (by the server's close of that connection, or by the next process's repair).
    expect(turns.length).toBe(2);
    expect(Date.now() - started).toBeLessThan(WAIT);
  });

  it("stops on SIGTERM, closing its connections' adapters first, and removes its socket", async () => {
    const pids = await stopLocalServers(serversDirectory);
    expect(pids).toHaveLength(1);
    expect(socketsNow()).toEqual([]);
    expect(() => process.kill(pids[0] as number, 0)).toThrow();
    const log = readdirSync(serversDirectory).find((n) => n.endsWith(".log")) as string;
    const text = readFileSync(join(serversDirectory, log), "utf8");
    expect(text).toContain("stopping: signal SIGTERM");
    expect(text).toContain("stopped: signal SIGTERM");
    expect(text).not.toMatch(/unhandled rejection|uncaught exception|a connection failed|could not be read/);
  });

  it("runs its own compactor worker: it publishes turns finished while no OpenCode process runs", async () => {
    // Its own configuration, so its own server.
    const workerEnv = await world.env({ extraEnv: { OPTCHAT_DEBUG: "1" } });
    const workerServers = join(workerEnv.env.TMPDIR as string, `optchat-${process.getuid?.() ?? "user"}`);
    const serverLog = () => {
      const log = readdirSync(workerServers).find((n) => n.endsWith(".log"));
      return log ? readFileSync(join(workerServers, log), "utf8") : "";
    };
    const first = await runOpencode(workerEnv, "LS-KEEP-1 REPLY=noted", { timeoutMs: WAIT });
    expect(first.code, first.stderr.slice(-2000)).toBe(0);
    await retrying(
      async () => expect(readdirSync(workerServers).filter((n) => n.endsWith(".sock"))).toHaveLength(1),
      30_000,
      "the server's socket",
    );
    // The first run ran its own thread and handed its database and model to the server, whose worker started once
    // the run had gone.
    await retrying(
      async () => expect(serverLog()).toContain("compactor worker started"),
      30_000,
      "the server's worker",
    );
    const second = await runOpencode(workerEnv, "LS-KEEP-2 REPLY=noted", { timeoutMs: WAIT });
    expect(second.code, second.stderr.slice(-2000)).toBe(0);

    // A turn finished by another writer while no OpenCode process runs: only the server's worker can publish it.
    const memory = await openMemory(resolveConfig({ overrides: { databaseUrl: world.database.url } }));
    try {
      const turn = await finishTurnNeedingSummary(memory, {
        hostSessionId: "ls-keep-between-runs",
        projectId: "ls-keep",
        theme: "between runs",
        day: 6,
      });
      await retrying(
        async () => {
          const { rows } = await db.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM optchat.publications WHERE session_id = $1::text AND turn_id = $2::text",
            [turn.sessionId, turn.turnId],
          );
          expect(rows[0]?.n).toBe(1);
        },
        60_000,
        "the turn's publication by the server's worker",
      );
    } finally {
      await memory.close();
    }

    // Served runs start no worker of their own: one start in the server's log, none in the runs.
    const third = await runOpencode(workerEnv, "LS-KEEP-3 REPLY=noted", { timeoutMs: WAIT });
    expect(third.code, third.stderr.slice(-2000)).toBe(0);
    expect(serverLog().match(/compactor worker started/g)).toHaveLength(1);
    expect(serverLog()).not.toMatch(/embedded worker starting/);
    expect(await stopLocalServers(workerServers)).toHaveLength(1);
    expect(serverLog()).toContain("stopped: signal SIGTERM");
    expect(serverLog()).not.toMatch(/unhandled rejection|uncaught exception|compactor (error|failure)/);
  });

  it("runs on OpenCode's own Bun with localServerRuntime bun, serving runs as on Node.js", async () => {
    const bunEnv = await world.env({ extraEnv: { OPTCHAT_LOCAL_SERVER_RUNTIME: "bun" } });
    const bunServers = join(bunEnv.env.TMPDIR as string, `optchat-${process.getuid?.() ?? "user"}`);
    const inspect = 'TOOLS=[{"name":"memory_inspect","args":{"format":"json"}}] END';
    const first = await runOpencode(bunEnv, `LS-BUN-1 ${inspect}`, { timeoutMs: WAIT });
    expect(first.code, first.stderr.slice(-2000)).toBe(0);
    await retrying(
      async () => {
        expect(readdirSync(bunServers).filter((n) => n.endsWith(".sock"))).toHaveLength(1);
      },
      30_000,
      "the Bun server's socket",
    );
    const second = await runOpencode(bunEnv, `LS-BUN-2 ${inspect}`, { timeoutMs: WAIT });
    expect(second.code, second.stderr.slice(-2000)).toBe(0);
    expect(inspectReport("LS-BUN-2").process.runsIn).toMatch(
      /^the optchat local server \(plugin\/transport\/local-server\/server\.ts, on Bun \d+\./,
    );
    expect(await turnsOf(second.sessionId as string)).toEqual([{ state: "completed", records: 4 }]);
    expect(await stopLocalServers(bunServers)).toHaveLength(1);
  });
});
