import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { handOffToLocalServer } from "../../plugin/transport/local-server/client.js";
import {
  codeStamp,
  type RunningLocalServer,
  recordServerPid,
  startLocalServer,
  waitForPredecessor,
} from "../../plugin/transport/local-server/server.js";
import { resolveConfig } from "../../src/memory/config.js";

/**
 * The local server's own life (plugin/transport/local-server/server.ts) on real Unix sockets, without OpenCode or a database: its
 * `ready` line, one server per socket, a socket left by a dead server replaced, and the three ways it stops (idle, its
 * code changed on disk, asked to). The hooks it serves are the plugin thread's (tests/e2e/plugin-local-server.test.ts
 * runs them with real `opencode run` processes).
 */

const directories: string[] = [];
const servers: RunningLocalServer[] = [];

afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.stop("test over")));
  for (const directory of directories.splice(0)) rmSync(directory, { recursive: true, force: true });
});

function scratch(): { socket: string; code: string; log: string[] } {
  const directory = mkdtempSync(join(tmpdir(), "optchat-ls-"));
  directories.push(directory);
  const code = join(directory, "code");
  mkdirSync(code);
  writeFileSync(join(code, "a.ts"), "export const a = 1;\n");
  return { socket: join(directory, "s.sock"), code, log: [] };
}

async function start(
  where: ReturnType<typeof scratch>,
  idleMs = 60_000,
  healthCheckMs?: number,
  unusedIdleMs?: number,
): Promise<RunningLocalServer | undefined> {
  const server = await startLocalServer({
    socketPath: where.socket,
    idleMs,
    healthCheckMs,
    unusedIdleMs,
    codeRoots: [where.code],
    log: (line) => where.log.push(line),
  });
  if (server) servers.push(server);
  return server;
}

/** Connects and reads the first line the server sends, or undefined when the connection ends first. */
function firstLine(path: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = createConnection(path);
    let text = "";
    socket.on("data", (chunk) => {
      text += chunk.toString("utf8");
      const end = text.indexOf("\n");
      if (end >= 0) {
        socket.destroy();
        resolve(text.slice(0, end));
      }
    });
    socket.on("error", () => resolve(undefined));
    socket.on("close", () => resolve(undefined));
  });
}

/**
 * A server with one process connected (its `ready` read) whose code then changes on disk: resolves once it retired.
 * Returns the server and the process's socket.
 */
async function retiredWhileServing(where: ReturnType<typeof scratch>, change: string) {
  const server = (await start(where)) as RunningLocalServer;
  const connected = createConnection(where.socket);
  await new Promise((resolve) => connected.once("data", resolve));
  writeFileSync(join(where.code, "a.ts"), change);
  await eventuallyTrue(() => where.log.some((line) => line.includes("retiring: its code changed on disk")));
  return { server, connected };
}

async function eventuallyTrue(check: () => boolean): Promise<void> {
  await vi.waitFor(() => expect(check()).toBe(true), { timeout: 5_000 });
}

describe("the local server", () => {
  it("tells a connecting process it is ready, with its pid; a second server on the same socket does not start", async () => {
    const where = scratch();
    expect(await start(where)).toBeDefined();
    expect(JSON.parse((await firstLine(where.socket)) as string)).toEqual({ type: "ready", pid: process.pid });
    expect(await start(where)).toBeUndefined();
    expect(JSON.parse((await firstLine(where.socket)) as string).type).toBe("ready");
  });

  it("replaces a socket file no server answers on", async () => {
    const where = scratch();
    writeFileSync(where.socket, "left behind");
    expect(await start(where)).toBeDefined();
    expect(JSON.parse((await firstLine(where.socket)) as string).type).toBe("ready");
  });

  it("stops soon when no process gave it work (the run that started it failed first), removing its socket", async () => {
    const where = scratch();
    // Its idle time is long, but no process gave it work (the run that started it failed before any turn).
    const server = (await start(where, 60_000, undefined, 50)) as RunningLocalServer;
    // No process gave it work (the run that started it failed before any turn): it says so.
    expect(await server.stopped).toBe("no OpenCode process gave it work");
    expect(await firstLine(where.socket)).toBeUndefined();
  });

  it("after a hand-off, stops at its idle time once the process that gave it has let go", async () => {
    const where = scratch();
    const server = (await start(where, 50)) as RunningLocalServer;
    const config = resolveConfig({ overrides: { databaseUrl: "postgres://nobody@127.0.0.1:1/none" } });
    const held = await handOffToLocalServer(where.socket, {
      type: "hand-off",
      config,
      settings: { summarizer: "fake", model: "" },
      concurrency: 1,
    });
    // Held: a connected process, so no idle time runs.
    await new Promise((resolve) => setTimeout(resolve, 200));
    let stopped: string | undefined;
    void server.stopped.then((reason) => {
      stopped = reason;
    });
    expect(stopped).toBeUndefined();
    held.release();
    expect(await server.stopped).toBe("no OpenCode process for its idle time");
    // Its worker could not start (no database there): that went to its log, not to a process.
    expect(where.log.join("\n")).not.toMatch(/hand-off was refused/);
  });

  it("refuses a malformed hand-off in its log and keeps serving", async () => {
    const where = scratch();
    await start(where);
    const held = await handOffToLocalServer(where.socket, { type: "hand-off", config: {}, settings: 3 });
    held.release();
    await eventuallyTrue(() => where.log.some((line) => line.includes("a hand-off was refused")));
    expect(JSON.parse((await firstLine(where.socket)) as string).type).toBe("ready");
  });

  it("retires and stops when its socket is removed (its directory cleaned away)", async () => {
    const where = scratch();
    const server = (await start(where, 60_000, 50)) as RunningLocalServer;
    rmSync(where.socket);
    expect(await server.stopped).toBe("its socket was removed");
  });

  it("takes no one once its code changed on disk, and stops so that the next process starts a current server", async () => {
    // Idle: it stops at once (a connected process would be served to its end first).
    const where = scratch();
    const server = (await start(where)) as RunningLocalServer;
    writeFileSync(join(where.code, "a.ts"), "export const a = 2; // changed\n");
    expect(await server.stopped).toBe("its code changed on disk");
    expect(await firstLine(where.socket)).toBeUndefined();
    // A server of the current code starts on the same socket.
    expect(await start(where)).toBeDefined();
    expect(JSON.parse((await firstLine(where.socket)) as string).type).toBe("ready");
  });

  it("serves a connected process to its end after its code changed, taking no new one, then stops", async () => {
    const where = scratch();
    const { server, connected } = await retiredWhileServing(where, "export const a = 3; // changed again\n");
    expect(await firstLine(where.socket)).toBeUndefined();
    let stopped = false;
    void server.stopped.then(() => {
      stopped = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(stopped).toBe(false);
    connected.end();
    expect(await server.stopped).toBe("its code changed on disk");
  });

  it("leaves the socket of the server that took its place when it stops after retiring", async () => {
    const where = scratch();
    const { server: old, connected } = await retiredWhileServing(where, "export const a = 4; // changed\n");
    // The next process starts a current server on the same path while the old one still serves its process.
    const successor = await start(where);
    expect(successor).toBeDefined();
    connected.end();
    expect(await old.stopped).toBe("its code changed on disk");
    expect(JSON.parse((await firstLine(where.socket)) as string).type).toBe("ready");
  });

  it("stamps its code by the TypeScript files' paths, sizes and times, outside node_modules", async () => {
    const where = scratch();
    const before = await codeStamp([where.code]);
    expect(await codeStamp([where.code])).toBe(before);
    writeFileSync(join(where.code, "notes.md"), "not code");
    expect(await codeStamp([where.code])).toBe(before);
    mkdirSync(join(where.code, "node_modules"));
    writeFileSync(join(where.code, "node_modules", "x.ts"), "export {};");
    expect(await codeStamp([where.code])).toBe(before);
    writeFileSync(join(where.code, "b.ts"), "export const b = 1;\n");
    expect(await codeStamp([where.code])).not.toBe(before);
  });

  it("waits for the previous server of its socket to exit before it starts (never two at once)", async () => {
    const where = scratch();
    await recordServerPid(where.socket);
    // Its own pid: nothing to wait for.
    const started = Date.now();
    await waitForPredecessor(where.socket, () => {});
    expect(Date.now() - started).toBeLessThan(500);
    // A previous server still stopping (a process whose arguments name the local server), exiting 1.5 s later.
    const beforeSpawn = Date.now();
    const previous = spawn(process.execPath, ["-e", "setTimeout(() => {}, 1500)", "local-server"], { stdio: "ignore" });
    await new Promise((resolve) => previous.once("spawn", resolve));
    writeFileSync(where.socket.replace(/\.sock$/, ".pid"), `${previous.pid}\n`);
    const exited = new Promise<void>((resolve) => previous.once("exit", () => resolve()));
    const lines: string[] = [];
    await waitForPredecessor(where.socket, (line) => lines.push(line));
    // It returned only once the previous server had gone (it lived 1.5 s from its start, after beforeSpawn); Node's
    // 'exit' event may come a few ms later than the process's end, so that is not the yardstick.
    expect(Date.now() - beforeSpawn).toBeGreaterThanOrEqual(1500);
    let cmdline = "";
    try {
      cmdline = readFileSync(`/proc/${previous.pid}/cmdline`, "utf8"); // a zombie's is empty; a reaped one is gone
    } catch {}
    expect(cmdline).not.toContain("local-server");
    await exited;
    expect(lines.join("\n")).toContain(`waiting for the previous server (pid ${previous.pid})`);
    // A pid that is not a local server is not waited for.
    writeFileSync(where.socket.replace(/\.sock$/, ".pid"), "1\n");
    const again = Date.now();
    await waitForPredecessor(where.socket, () => {});
    expect(Date.now() - again).toBeLessThan(500);
    expect(readFileSync(where.socket.replace(/\.sock$/, ".pid"), "utf8")).toBe("1\n");
  });
});
