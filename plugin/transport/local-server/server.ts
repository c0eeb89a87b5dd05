/**
 * The optchat local server: one long-lived process per configuration that does the plugin's work for every OpenCode
 * process connected to it (plugin/transport/local-server/client.ts starts it and connects). Each connection gets what a plugin
 * thread holds (plugin/transport/plugin-side.ts: its own adapter, leases and embedded compactor); what the connections share is
 * the warm code and one pool per database configuration, whose PostgreSQL backends have planned the statements before.
 *
 * A connection that closes without its dispose (the OpenCode process was killed) has its adapters flushed and closed
 * here. The server stops when no process has been connected for its idle time, once its own code changed on disk
 * (it takes no new process then, so the next one starts a current server, and stops when its processes are done), or
 * on SIGTERM/SIGINT/SIGHUP, each after closing its adapters. Why: docs/opencode-notes.md "The local server".
 */
import { createHash } from "node:crypto";
import { watch } from "node:fs";
import { readdir, readFile, stat, unlink, utimes, writeFile } from "node:fs/promises";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import type { Config } from "../../../src/memory/index.js";
import { servePlugin } from "../plugin-side.js";
import type { ToOpencodeSide, ToPluginSide } from "../protocol.js";
import { ClosableRegistry } from "../shutdown.js";
import { LineReader } from "./json-lines.js";
import { ServerMemories } from "./memories.js";

/** How long after a connection closed the server checks its code's stamp (its process is exiting meanwhile). */
const STAMP_AFTER_CLOSE_MS = 2_000;
/**
 * The idle time of a server no process gave work yet (its memory opened, or a hand-off): the run that started it
 * failed before any turn (a database not migrated, a misspelled option), and nobody may come for it.
 */
export const UNUSED_IDLE_MS = 30_000;
/** At its idle time, a server whose worker still has jobs due looks again this much later (at most its idle time). */
const BUSY_RECHECK_MS = 5_000;
/** How often the server checks that its socket is still its own and its databases still exist. */
export const HEALTH_CHECK_MS = 5_000;
/** However its stop is stuck (a worker, a pool, a connection), the server is stopped after this long. */
export const STOP_DEADLINE_MS = 15_000;

export interface LocalServerOptions {
  readonly socketPath: string;
  readonly idleMs: number;
  /** The directories of the code this server runs (its TypeScript files' stamp says when it is stale). */
  readonly codeRoots: readonly string[];
  /** Where the server reports (its log). */
  readonly log: (line: string) => void;
  /** How often it checks its socket and databases (HEALTH_CHECK_MS; tests shorten it). */
  readonly healthCheckMs?: number;
  /** The idle time while no process gave it work (UNUSED_IDLE_MS; tests shorten it). */
  readonly unusedIdleMs?: number;
}

export interface RunningLocalServer {
  /** Resolves when the server has stopped, with why. */
  readonly stopped: Promise<string>;
  stop(reason: string): Promise<string>;
}

/** Serves OpenCode processes on `socketPath`; undefined when another live server already listens there. */
export async function startLocalServer(options: LocalServerOptions): Promise<RunningLocalServer | undefined> {
  const stamp = await codeStamp(options.codeRoots);
  const memories = new ServerMemories(options.idleMs, options.log);
  const connections = new Set<Connection>();
  const closing = new Set<Promise<void>>();
  let idleTimer: ReturnType<typeof setTimeout> | undefined;
  let stopping: Promise<string> | undefined;
  let resolveStopped: (reason: string) => void = () => {};
  const stopped = new Promise<string>((resolve) => {
    resolveStopped = resolve;
  });

  const unusedIdleMs = Math.min(options.idleMs, options.unusedIdleMs ?? UNUSED_IDLE_MS);
  const armIdle = () => {
    clearTimeout(idleTimer);
    if (connections.size === 0)
      idleTimer = setTimeout(
        () =>
          void drainThenStop(
            memories.used ? "no OpenCode process for its idle time" : "no OpenCode process gave it work",
          ),
        memories.used ? options.idleMs : unusedIdleMs,
      );
  };
  /**
   * Stops once its worker has no job due (looked at every BUSY_RECHECK_MS, for at most its idle time), unless a process
   * connects meanwhile: a server that idles out or retires first publishes the turns it was given.
   */
  const drainThenStop = async (reason: string): Promise<void> => {
    for (let waited = 0; waited < options.idleMs; waited += BUSY_RECHECK_MS) {
      if (stopping || connections.size > 0) return;
      if (!(await memories.workers.busy())) break;
      await new Promise((resolve) => setTimeout(resolve, BUSY_RECHECK_MS));
    }
    if (connections.size === 0) void stop(reason);
  };
  /**
   * Stops taking processes (the socket goes, so the next process starts a current server) and stops once the
   * connected ones are done: a server whose code changed on disk would serve the old code.
   */
  let retired: string | undefined;
  /** Removes the socket file if it is still this server's (set once it listens). */
  let unlinkOwnSocket = async (): Promise<void> => {};
  const retire = (reason: string): void => {
    if (retired || stopping) return;
    retired = reason;
    options.log(`optchat local server: retiring: ${reason}`);
    server.close();
    void unlinkOwnSocket();
    if (connections.size === 0) void drainThenStop(reason);
  };
  // Watching costs nothing per connection; a stat of every file did (10-18 ms per process, measured, before `ready`).
  const watchers = options.codeRoots.map((root) =>
    watch(root, { recursive: true }, (_event, name) => {
      if (name && isCode(String(name)) && !String(name).includes("node_modules")) retire("its code changed on disk");
    }),
  );
  const server = createServer((socket) => {
    clearTimeout(idleTimer);
    const connection = new Connection(socket, memories, options.log, (adaptersClosed) => {
      connections.delete(connection);
      memories.workers.connections(connections.size);
      closing.add(adaptersClosed);
      void adaptersClosed.finally(() => closing.delete(adaptersClosed));
      if (stopping) return;
      if (retired && connections.size === 0) void drainThenStop(retired);
      else armIdle();
      // A change the watch missed (a file system without events) is still found, off every process's path: a moment
      // later, since the connection closes at the dispose, while OpenCode still exits on the same cores (the stat of
      // every file cost 7-8 ms of CPU under Bun, docs/opencode-notes.md "Fifth pass").
      setTimeout(() => {
        if (stopping || retired) return;
        void codeStamp(options.codeRoots).then(
          (now) => now !== stamp && retire("its code changed on disk"),
          () => undefined,
        );
      }, STAMP_AFTER_CLOSE_MS).unref();
    });
    connections.add(connection);
    memories.workers.connections(connections.size);
    if (stopping || retired) socket.destroy();
    else connection.ready();
  });

  const stop = (reason: string): Promise<string> => {
    stopping ??= (async () => {
      options.log(`optchat local server: stopping: ${reason}`);
      // However the orderly stop is stuck, the server stops: `stopped` resolves and its entry exits the process.
      setTimeout(() => {
        options.log(`optchat local server: the stop took over ${STOP_DEADLINE_MS} ms; stopping anyway`);
        resolveStopped(`${reason} (forced after ${STOP_DEADLINE_MS} ms)`);
      }, STOP_DEADLINE_MS).unref();
      clearTimeout(idleTimer);
      clearInterval(healthTimer);
      for (const watcher of watchers) watcher.close();
      server.close();
      await unlinkOwnSocket();
      const ended = [...connections].map((connection) => connection.end());
      await Promise.allSettled(ended);
      await Promise.allSettled([...closing]);
      await memories.close();
      resolveStopped(reason);
      return reason;
    })();
    return stopping;
  };

  let healthTimer: ReturnType<typeof setInterval> | undefined;
  let ownInode: number | undefined;
  /**
   * A server whose socket is gone (removed with its directory: a temporary directory cleaned, a test's) can take no
   * process, and a new one is started beside it: it retires. A server whose databases were all dropped has nothing to
   * serve: it stops once no process is connected.
   */
  const checkHealth = async (): Promise<void> => {
    if (stopping || retired) return;
    const current = await stat(options.socketPath).catch(() => undefined);
    if (current?.ino !== ownInode) return retire("its socket was removed");
    if (connections.size === 0 && (await memories.forgetDroppedDatabases())) void stop("its databases no longer exist");
  };

  // A socket it cannot listen on (its directory removed meanwhile, say): nothing of it may keep the process alive.
  const listening = await listen(server, options.socketPath).catch((error: unknown) => {
    for (const watcher of watchers) watcher.close();
    clearTimeout(idleTimer);
    throw error;
  });
  if (!listening) {
    for (const watcher of watchers) watcher.close();
    return undefined;
  }
  // The socket file this server made: a retired server must not remove the one its successor made at the same path.
  ownInode = (await stat(options.socketPath)).ino;
  unlinkOwnSocket = async (): Promise<void> => {
    const current = await stat(options.socketPath).catch(() => undefined);
    if (current?.ino === ownInode) await unlink(options.socketPath).catch(() => undefined);
  };
  options.log(`optchat local server: listening on ${options.socketPath} (pid ${process.pid})`);
  armIdle();
  healthTimer = setInterval(() => void checkHealth(), options.healthCheckMs ?? HEALTH_CHECK_MS);
  healthTimer.unref();
  return { stopped, stop };
}

/**
 * Listens on the socket; a socket left by a server that is gone is replaced, a live one is left alone (false). Two
 * servers starting at once may both end up running, one of them unreachable: it stops at its idle time.
 */
async function listen(server: Server, path: string): Promise<boolean> {
  const attempt = () =>
    new Promise<NodeJS.ErrnoException | undefined>((resolve) => {
      server.once("error", resolve);
      server.listen(path, () => {
        server.off("error", resolve);
        resolve(undefined);
      });
    });
  const error = await attempt();
  if (!error) return true;
  if (error.code !== "EADDRINUSE") throw error;
  if (await answers(path)) return false;
  await unlink(path).catch(() => undefined);
  const again = await attempt();
  if (again) throw again;
  return true;
}

function answers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket: Socket = createConnection(path);
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** One OpenCode process: its messages, one JSON value per line each way, served by a plugin host of its own. */
class Connection {
  /** Resolves when the socket closed and its adapters were closed. */
  private readonly closed: Promise<void>;
  private readonly registry = new ClosableRegistry();
  private readonly lines = new LineReader();

  constructor(
    readonly socket: Socket,
    memories: ServerMemories,
    private readonly log: (line: string) => void,
    onClose: (adaptersClosed: Promise<void>) => void,
  ) {
    /** The database a process that ran its own thread handed over on this connection (`hand-off`). */
    let handedOff: Config | undefined;
    const side = servePlugin(
      (message: ToOpencodeSide) => {
        // A process that ended its side (after its dispose, which it does not wait for) gets no answer.
        if (socket.writable) socket.write(`${JSON.stringify(message)}\n`);
      },
      this.registry,
      (init) => ({
        kind: "local server",
        env: init.env ?? {},
        hostPid: init.pid,
        rememberedLimits: memories.limits,
        openMemory: (config) => memories.open(config),
        // The server's own worker for the process's database, given the process's compactor model.
        compactor: ({ config, model }) =>
          memories.compactor(config.core, model.settings, config.plugin.embeddedWorkerConcurrency),
        register: (target, budgetMs) => this.registry.register(target, budgetMs),
      }),
    );
    socket.pause();
    socket.on("data", (chunk: Buffer) => {
      for (const line of this.lines.push(chunk)) {
        try {
          const message = JSON.parse(line) as ToPluginSide | { type: "hand-off" };
          if (message.type === "hand-off") handedOff = memories.handOff(message) ?? handedOff;
          else side.receive(message);
        } catch (error) {
          this.log(`optchat local server: a message could not be read: ${String(error)}`);
        }
      }
    });
    socket.on("error", (error: NodeJS.ErrnoException) => {
      // A process that exits with answers it never read resets its end (Node.js reports that, Bun did not): an
      // ordinary disconnect, handled by the close that follows like any other.
      if (error.code === "ECONNRESET" || error.code === "EPIPE") return;
      this.log(`optchat local server: a connection failed: ${String(error)}`);
    });
    this.closed = new Promise((resolve) => {
      socket.once("close", () => {
        side.disconnected("its OpenCode process disconnected");
        // The run that handed its queue over is done: its turn's publication is due now.
        if (handedOff) memories.workers.demand(handedOff);
        // After a dispose this finds nothing left; after a kill it flushes what the process had sent.
        const adaptersClosed = this.registry.closeAll();
        onClose(adaptersClosed);
        void adaptersClosed.then(resolve);
      });
    });
  }

  /**
   * Ends the connection (the server stops): resolves once its adapters are closed. Destroyed, not ended: Bun 1.3's
   * `end()` on a socket whose peer had just closed it spun at full CPU and never closed (seen with the harness's
   * `stopLocalServers`, which connects, reads `ready` and closes right before its SIGTERM).
   */
  end(): Promise<void> {
    this.socket.destroy();
    return this.closed;
  }

  /** Tells the process it is served, then reads its messages. */
  ready(): void {
    this.socket.write(`${JSON.stringify({ type: "ready", pid: process.pid })}\n`);
    this.socket.resume();
  }
}

/** A module of the plugin: TypeScript in a checkout, JavaScript compiled to dist/ in the npm package. */
function isCode(name: string): boolean {
  return name.endsWith(".ts") || name.endsWith(".js");
}

/** A stamp of the code files under the roots (paths, sizes, modification times). */
export async function codeStamp(roots: readonly string[]): Promise<string> {
  const hash = createHash("sha256");
  const visit = async (directory: string): Promise<void> => {
    const entries = await readdir(directory, { withFileTypes: true });
    entries.sort((a, b) => (a.name < b.name ? -1 : 1));
    for (const entry of entries) {
      const path = join(directory, entry.name);
      if (entry.isDirectory()) {
        if (entry.name !== "node_modules") await visit(path);
      } else if (isCode(entry.name)) {
        const info = await stat(path);
        hash.update(`${path}\0${info.size}\0${info.mtimeMs}\n`);
      }
    }
  };
  for (const root of roots) await visit(root);
  return hash.digest("hex");
}

/** Where a server writes its pid, beside its socket. */
function pidFileOf(socketPath: string): string {
  return socketPath.replace(/\.sock$/, "") + ".pid";
}

/**
 * Waits (at most STOP_DEADLINE_MS and 5 s more) until the server that last served this socket has exited: a server
 * stopping (its socket already gone, so a run started this one) still closes its adapters and pools, and two servers of
 * one configuration must never run at once (issue 37). A pid that is not a local server any more is not waited for.
 */
export async function waitForPredecessor(socketPath: string, log: (line: string) => void): Promise<void> {
  const pid = Number((await readFile(pidFileOf(socketPath), "utf8").catch(() => "")).trim());
  if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) return;
  const alive = async () => {
    const args = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    return args.includes("local-server");
  };
  if (!(await alive())) return;
  log(`optchat local server: waiting for the previous server (pid ${pid}) to exit`);
  const until = Date.now() + STOP_DEADLINE_MS + 5_000;
  const guard = socketPath.replace(/\.sock$/, ".starting");
  while (Date.now() < until && (await alive())) {
    // The start is still under way: no other run starts a server meanwhile (plugin/transport/local-server/client.ts).
    const now = new Date();
    await utimes(guard, now, now).catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Records this process as the server of `socketPath` (read by `waitForPredecessor`). */
export async function recordServerPid(socketPath: string): Promise<void> {
  await writeFile(pidFileOf(socketPath), `${process.pid}\n`, { mode: 0o600 }).catch(() => undefined);
}
