/**
 * The optchat local server: one long-lived process per configuration that does the plugin's work for every OpenCode
 * process connected to it (plugin/local-server-client.ts starts it and connects). Each connection gets what a plugin
 * thread holds (plugin/plugin-host.ts: its own adapter, leases and embedded compactor); what the connections share is
 * the warm code and one pool per database configuration, whose PostgreSQL backends have planned the statements before.
 *
 * A connection that closes without its dispose (the OpenCode process was killed) has its adapters flushed and closed
 * here. The server stops when no process has been connected for its idle time, once its own code changed on disk
 * (it takes no new process then, so the next one starts a current server, and stops when its processes are done), or
 * on SIGTERM/SIGINT/SIGHUP, each after closing its adapters. Why: docs/opencode-notes.md "The local server".
 */
import { createHash } from "node:crypto";
import { watch } from "node:fs";
import { readdir, stat, unlink } from "node:fs/promises";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { type Config, type Memory, openMemory } from "../src/memory/index.js";
import type { KeptWorker } from "./embedded-worker.js";
import { LineReader } from "./json-lines.js";
import { KeptWorkers } from "./kept-workers.js";
import type { RememberedLimits } from "./model-limits.js";
import { hostPlugin } from "./plugin-host.js";
import { ClosableRegistry } from "./shutdown.js";
import type { ToMainThread, ToPluginThread } from "./thread-protocol.js";

/** How long after a connection closed the server checks its code's stamp (its process is exiting meanwhile). */
const STAMP_AFTER_CLOSE_MS = 2_000;

export interface LocalServerOptions {
  readonly socketPath: string;
  readonly idleMs: number;
  /** The directories of the code this server runs (its TypeScript files' stamp says when it is stale). */
  readonly codeRoots: readonly string[];
  /** Where the server reports (its log). */
  readonly log: (line: string) => void;
}

export interface RunningLocalServer {
  /** Resolves when the server has stopped, with why. */
  readonly stopped: Promise<string>;
  stop(reason: string): Promise<string>;
}

/** Serves OpenCode processes on `socketPath`; undefined when another live server already listens there. */
export async function startLocalServer(options: LocalServerOptions): Promise<RunningLocalServer | undefined> {
  const stamp = await codeStamp(options.codeRoots);
  const memories = new SharedMemories(options.idleMs, options.log);
  const connections = new Set<Connection>();
  const closing = new Set<Promise<void>>();
  let idleTimer: ReturnType<typeof setTimeout> | undefined;
  let stopping: Promise<string> | undefined;
  let resolveStopped: (reason: string) => void = () => {};
  const stopped = new Promise<string>((resolve) => {
    resolveStopped = resolve;
  });

  const armIdle = () => {
    clearTimeout(idleTimer);
    if (connections.size === 0)
      idleTimer = setTimeout(() => void stop("no OpenCode process for its idle time"), options.idleMs);
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
    if (connections.size === 0) void stop(reason);
  };
  // Watching costs nothing per connection; a stat of every file did (10-18 ms per process, measured, before `ready`).
  const watchers = options.codeRoots.map((root) =>
    watch(root, { recursive: true }, (_event, name) => {
      if (name && String(name).endsWith(".ts") && !String(name).includes("node_modules"))
        retire("its code changed on disk");
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
      if (retired && connections.size === 0) void stop(retired);
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
      clearTimeout(idleTimer);
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

  if (!(await listen(server, options.socketPath))) {
    for (const watcher of watchers) watcher.close();
    return undefined;
  }
  // The socket file this server made: a retired server must not remove the one its successor made at the same path.
  const ownInode = (await stat(options.socketPath)).ino;
  unlinkOwnSocket = async (): Promise<void> => {
    const current = await stat(options.socketPath).catch(() => undefined);
    if (current?.ino === ownInode) await unlink(options.socketPath).catch(() => undefined);
  };
  options.log(`optchat local server: listening on ${options.socketPath} (pid ${process.pid})`);
  armIdle();
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
    memories: SharedMemories,
    private readonly log: (line: string) => void,
    onClose: (adaptersClosed: Promise<void>) => void,
  ) {
    const host = hostPlugin(
      (message: ToMainThread) => {
        // A process that ended its side (after its dispose, which it does not wait for) gets no answer.
        if (socket.writable) socket.write(`${JSON.stringify(message)}\n`);
      },
      this.registry,
      (init) => ({
        env: init.env ?? {},
        hostPid: init.pid,
        rememberedLimits: memories.limits,
        openMemory: (config) => memories.open(config),
        keepWorker: (config, worker) => memories.keepWorker(config, worker),
        workerKept: (config) => memories.workerKept(config),
        register: (target, budgetMs) => this.registry.register(target, budgetMs),
      }),
    );
    socket.pause();
    socket.on("data", (chunk: Buffer) => {
      for (const line of this.lines.push(chunk)) {
        try {
          host.receive(JSON.parse(line) as ToPluginThread);
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
        host.disconnected("its OpenCode process disconnected");
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

/**
 * One memory service per database configuration, shared by the connections: its pool stays open between processes.
 * A connection's adapter gets it without `close` (the pool is the server's to close).
 */
class SharedMemories {
  private readonly opened = new Map<string, Promise<Memory>>();
  /** The compactor workers kept from served processes, one per database configuration (plugin/kept-workers.ts). */
  readonly workers: KeptWorkers;
  /** The models' limits the connections learned, for the next ones (plugin/model-limits.ts). */
  readonly limits: RememberedLimits = new Map();

  /**
   * `idleMs`: the server's idle time. Its connections stay open as long as the server may wait for the next process:
   * with node-postgres's 10 s default the backends (which had planned the statements, measured ~7 ms each to warm)
   * were closed between runs a few seconds apart.
   */
  constructor(
    private readonly idleMs: number,
    log: (line: string) => void,
  ) {
    this.workers = new KeptWorkers(log);
  }

  open(config: Config): Promise<Memory> {
    const key = JSON.stringify(config);
    let memory = this.opened.get(key);
    if (!memory) {
      memory = openMemory(config, { applicationName: `optchat-local-server-${process.pid}`, poolIdleMs: this.idleMs });
      this.opened.set(key, memory);
      // A failed open (the database down) is tried again by the next connection.
      memory.catch(() => this.opened.delete(key));
    }
    return memory.then(withoutClose);
  }

  /** Keeps `worker` for `config`'s database, unless one is kept already (or it was never opened): then it is stopped. */
  keepWorker(config: Config, worker: KeptWorker): void {
    const key = JSON.stringify(config);
    const memory = this.opened.get(key);
    if (!memory || !this.workers.keep(key, worker, memory)) void worker.stop().catch(() => undefined);
  }

  workerKept(config: Config): boolean {
    return this.workers.has(JSON.stringify(config));
  }

  async close(): Promise<void> {
    // The kept workers first: they use the pools.
    await this.workers.stopAll();
    const all = [...this.opened.values()];
    this.opened.clear();
    await Promise.allSettled(all.map((memory) => memory.then((m) => m.close())));
  }
}

/** The service as a connection's adapter gets it: a frozen object of functions (src/memory/guard.ts), `close` a no-op. */
function withoutClose(memory: Memory): Memory {
  return Object.freeze({ ...memory, close: async () => undefined });
}

/** A stamp of the TypeScript files under the roots (paths, sizes, modification times). */
export async function codeStamp(roots: readonly string[]): Promise<string> {
  const hash = createHash("sha256");
  const visit = async (directory: string): Promise<void> => {
    const entries = await readdir(directory, { withFileTypes: true });
    entries.sort((a, b) => (a.name < b.name ? -1 : 1));
    for (const entry of entries) {
      const path = join(directory, entry.name);
      if (entry.isDirectory()) {
        if (entry.name !== "node_modules") await visit(path);
      } else if (entry.name.endsWith(".ts")) {
        const info = await stat(path);
        hash.update(`${path}\0${info.size}\0${info.mtimeMs}\n`);
      }
    }
  };
  for (const root of roots) await visit(root);
  return hash.digest("hex");
}
