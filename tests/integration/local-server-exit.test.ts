import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { handOffToLocalServer } from "../../plugin/transport/local-server/client.js";
import { STOP_DEADLINE_MS } from "../../plugin/transport/local-server/server.js";
import { type Config, resolveConfig } from "../../src/memory/config.js";
import { openMemory } from "../../src/memory/service.js";
import { createTestDatabase, finishTurnNeedingSummary, ROOT, retrying } from "../helpers.js";

/**
 * Issue 37 item 2: the optchat local server, a real process (plugin/transport/local-server/node.mjs), exits by itself however it
 * is left: a stop stuck on a database that never answers is forced after STOP_DEADLINE_MS; the databases it served
 * dropped; its socket directory removed. Its work comes from a hand-off, as from a run of its own thread.
 */

const started: ChildProcess[] = [];
const directories: string[] = [];

afterAll(() => {
  for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  for (const directory of directories) rmSync(directory, { recursive: true, force: true });
});

/** A local server on a socket of its own, with a long idle time (so only the cause under test stops it). */
async function startServer(): Promise<{
  child: ChildProcess;
  socket: string;
  directory: string;
  exited: Promise<number>;
}> {
  const directory = mkdtempSync(join(tmpdir(), "optchat-exit-"));
  directories.push(directory);
  const socket = join(directory, "s.sock");
  const log = join(directory, "server.log");
  const child = spawn(
    process.execPath,
    [join(ROOT, "plugin", "transport", "local-server", "node.mjs"), socket, "600"],
    {
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, OPTCHAT_SUMMARIZER: "fake" },
    },
  );
  started.push(child);
  let text = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    text += chunk.toString("utf8");
    logs.set(log, text);
  });
  const exited = new Promise<number>((resolve) => child.once("exit", () => resolve(Date.now())));
  await retrying(async () => expect(text).toContain("listening on"), 30_000, "the local server to listen");
  return { child, socket, directory, exited };
}

/** What a run of its own thread does: gives the server its database and the fake model, then ends. */
async function handOffAndLeave(socket: string, config: Config): Promise<void> {
  const held = await handOffToLocalServer(socket, {
    type: "hand-off",
    config,
    settings: { summarizer: "fake", model: "" },
    concurrency: 1,
  });
  held.release();
}

/** What each server wrote so far (its stderr), by its log path. */
const logs = new Map<string, string>();

function logOf(directory: string): string {
  return logs.get(join(directory, "server.log")) ?? "";
}

describe("the local server process exits by itself", { timeout: 120_000 }, () => {
  it("when its stop is stuck (a job waiting on a lock held elsewhere): forced after its deadline", async () => {
    const database = await createTestDatabase();
    const config = resolveConfig({
      overrides: { databaseUrl: database.url, summarizer: "fake", statementTimeoutMs: 120_000 },
    });
    const memory = await openMemory(config);
    const locker = new pg.Client({ connectionString: database.url });
    await locker.connect();
    try {
      // The worker's jobs will wait on these tables' locks, holding their pool connections.
      await locker.query("BEGIN");
      await locker.query(
        "LOCK TABLE optchat.nodes, optchat.publications, optchat.compactor_calls IN ACCESS EXCLUSIVE MODE",
      );
      await finishTurnNeedingSummary(memory, {
        hostSessionId: "stuck",
        projectId: "prj_stuck",
        theme: "stuck",
        day: 1,
      });
      const { child, socket, directory, exited } = await startServer();
      await handOffAndLeave(socket, config);
      await retrying(
        async () => {
          const { rows } = await memory.pool.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
          );
          expect(rows[0]?.n).toBeGreaterThan(0);
        },
        30_000,
        "a job of the server's worker waiting on the lock",
      );
      const signalled = Date.now();
      child.kill("SIGTERM");
      const exitedAt = await exited;
      expect(exitedAt - signalled).toBeGreaterThanOrEqual(STOP_DEADLINE_MS - 1_000);
      expect(exitedAt - signalled).toBeLessThan(STOP_DEADLINE_MS + 10_000);
      expect(logOf(directory)).toContain("stopping anyway");
    } finally {
      await locker.end();
      await memory.close();
      await database.drop();
    }
  });

  it("when the databases it served are dropped", async () => {
    const database = await createTestDatabase();
    const { socket, directory, exited } = await startServer();
    const config = resolveConfig({ overrides: { databaseUrl: database.url, summarizer: "fake" } });
    await handOffAndLeave(socket, config);
    await retrying(
      async () => expect(logOf(directory)).toContain("compactor worker started"),
      30_000,
      "the server's worker",
    );
    const dropped = Date.now();
    await database.drop();
    const exitedAt = await exited;
    expect(exitedAt - dropped).toBeLessThan(30_000);
    expect(logOf(directory)).toContain("stopping: its databases no longer exist");
  });

  it("when its socket directory is removed", async () => {
    const { directory, exited } = await startServer();
    const removed = Date.now();
    rmSync(directory, { recursive: true, force: true });
    const exitedAt = await exited;
    expect(exitedAt - removed).toBeLessThan(30_000);
    expect(logOf(directory)).toContain("retiring: its socket was removed");
  });

  it("when it cannot listen on its socket (its directory gone): it exits at once", async () => {
    const directory = mkdtempSync(join(tmpdir(), "optchat-exit-"));
    directories.push(directory);
    const child = spawn(
      process.execPath,
      [join(ROOT, "plugin", "transport", "local-server", "node.mjs"), join(directory, "gone", "s.sock"), "600"],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    started.push(child);
    let text = "";
    child.stderr?.on("data", (chunk: Buffer) => {
      text += chunk.toString("utf8");
    });
    const code = await new Promise<number | null>((resolve) => child.once("exit", (exitCode) => resolve(exitCode)));
    expect(code).toBe(1);
    expect(text).toContain("could not start");
  });
});
