/**
 * OpenCode's side of the optchat local server (plugin/transport/local-server/server.ts): finds the server for this process's
 * configuration, starts one when there is none, and gives OpenCode's side (plugin/transport/remote-hooks.ts) a channel
 * to it (plugin/transport/channel.ts) with the same messages a plugin thread gets. Runs in OpenCode's thread, so it
 * imports only Node's built-ins (and the settings' declarations, plain data).
 *
 * Why (issue 9 item 2, docs/opencode-notes.md "The local server"): a plugin thread is a fresh runtime in every OpenCode
 * process: each `opencode run` loaded ~100 modules, opened a pool whose PostgreSQL backends planned every statement
 * anew, and ran all of it in cold code on the two cores OpenCode was using. A long-lived process does that once.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, mkdirSync, openSync, readdirSync, statSync, unlinkSync } from "node:fs";
import { createConnection, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { givenSetting } from "../../base/settings.js";
import { type Channel, type ChannelReceiver, SIDE_NAMES } from "../channel.js";
import type { RunnerInit, ToOpencodeSide, ToPluginSide } from "../protocol.js";
import { LineReader } from "./json-lines.js";
import type { ServerCommand } from "./runtime.js";

/**
 * How long a connection waits for the server's `ready`, which the server sends at once. Generous: the connection is
 * made while OpenCode goes on with its start (plugin/transport/remote-hooks.ts), whose event loop reads the answer only when it
 * gets to it (measured up to 0.6 s after the plugin's load on 2 busy cores), and a `ready` read after the timer fired
 * would cost the process a thread of its own and start a second server. A missing server fails at once.
 */
const READY_WITHIN_MS = 3_000;
/** A start another process began this recently is not begun again (many OpenCode processes starting at once). */
const START_GUARD_MS = 5_000;

/** The environment the plugin's settings, the database driver and the summarizer read: part of a server's identity. */
export function settingsEnv(env: NodeJS.ProcessEnv): Record<string, string> {
  const picked: Record<string, string> = {};
  for (const name of Object.keys(env).sort()) {
    const value = env[name];
    if (value === undefined) continue;
    if (name.startsWith("OPTCHAT_") || name.startsWith("PG") || SETTINGS_VARIABLES.has(name)) picked[name] = value;
  }
  return picked;
}

const SETTINGS_VARIABLES = new Set(["DATABASE_URL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"]);

/**
 * Whether this OpenCode process uses the local server (setting `localServer`, OPTCHAT_LOCAL_SERVER): `auto` for
 * `opencode run` only, where the per-process start is paid on every invocation; a long-lived process (the TUI,
 * `serve`) pays it once, and keeping its work in its own process keeps its memory independent of any other process.
 * An invalid value is left to the configuration check, which refuses every prompt naming it.
 */
export function localServerWanted(
  setting: unknown,
  argv: readonly string[],
  platform: NodeJS.Platform = process.platform,
): boolean {
  // A Unix socket in TMPDIR: not on Windows (README "Not supported").
  if (platform === "win32") return false;
  if (setting === "on") return true;
  if (setting !== undefined && setting !== "" && setting !== "auto") return false;
  // OpenCode's argv is [runtime, its script, ...]: the first word that is not a flag is its command.
  return argv.slice(2).find((word) => !word.startsWith("-")) === "run";
}

/** The private directory of this user's local servers (under TMPDIR). */
export function serversDirectory(): string {
  return join(tmpdir(), `optchat-${process.getuid?.() ?? "user"}`);
}

/**
 * Where the server for a configuration listens, and its log. Throws when the directory is not this user's alone (made
 * by someone else, or open to others: a socket there could be another user's server): the process then runs its own
 * thread.
 */
export function serverPaths(identity: string): { socket: string; log: string; startGuard: string } {
  const directory = serversDirectory();
  mkdirSync(directory, { recursive: true, mode: 0o700 });
  const info = statSync(directory);
  if ((process.getuid && info.uid !== process.getuid()) || (info.mode & 0o077) !== 0)
    throw new Error(
      `${directory} is not private to this user (owner ${info.uid}, mode ${(info.mode & 0o777).toString(8)})`,
    );
  const key = createHash("sha256").update(identity).digest("hex").slice(0, 20);
  const base = join(directory, key);
  return { socket: `${base}.sock`, log: `${base}.log`, startGuard: `${base}.starting` };
}

export interface LocalServerConnection {
  /** Its `init` carries what the server resolves this process's settings from, and the process's pid. */
  readonly channel: Channel;
  readonly socketPath: string;
}

/**
 * A channel to the local server for this configuration (`served`), or none when this process does not use one, or when
 * none answers: then one is started in the background for the next process, and this one runs its own thread, which
 * hands its queue to the server at its close (`handOffSocket`, see `handOffToLocalServer`).
 */
export async function localServerChannel(
  options: Record<string, unknown> | undefined,
  env: NodeJS.ProcessEnv,
  entry: URL,
): Promise<{ readonly served?: LocalServerConnection; readonly handOffSocket?: string }> {
  if (!localServerWanted(givenSetting("localServer", options, env), process.argv)) return {};
  const pickedEnv = settingsEnv(env);
  const pluginDirectory = dirname(fileURLToPath(entry));
  // Processes with the same code, options and settings share a server; any difference gets a server of its own.
  const paths = serverPaths(JSON.stringify({ pluginDirectory, options: options ?? {}, env: pickedEnv }));
  const socket = await connect(paths.socket);
  const init: RunnerInit = { runner: "local server", env: pickedEnv, pid: process.pid };
  if (socket) return { served: { channel: new SocketChannel(socket, init), socketPath: paths.socket } };
  startServer(entry, paths, options, env);
  return { handOffSocket: paths.socket };
}

/** How long a hold keeps trying to reach a server that is starting. */
const HOLD_WITHIN_MS = 30_000;
/** Between two tries. */
const HOLD_RETRY_MS = 250;

/** A connection to the local server held by a run of its own thread (see `holdLocalServer`). */
export interface LocalServerHold {
  /** Sends one line once connected; rejects when no server answered in time. */
  send(message: object): Promise<void>;
  /** Ends the connection (now, or once it is made). */
  release(): void;
}

/**
 * A run that had to run its own thread (its local server was only starting) holds a connection to that server from its
 * start until its close: the server counts it as a connected process (its worker stays paused while the run runs,
 * and it does not idle out under it), and the run gives it its database and compactor model (`hand-off`,
 * plugin/transport/local-server/workers.ts) once it knows them, so the server's worker drains the queue after it instead of nobody.
 * Tries every HOLD_RETRY_MS for HOLD_WITHIN_MS while the server starts. The connection never keeps the process alive;
 * a process that dies closes it.
 */
export function holdLocalServer(socketPath: string, withinMs = HOLD_WITHIN_MS): LocalServerHold {
  let released = false;
  const connecting = (async (): Promise<Socket> => {
    const until = Date.now() + withinMs;
    for (;;) {
      const connected = await connect(socketPath);
      if (connected) {
        connected.socket.on("error", () => undefined);
        connected.socket.unref();
        return connected.socket;
      }
      if (released || Date.now() >= until) throw new Error(`no optchat local server answers at ${socketPath}`);
      await new Promise((resolve) => setTimeout(resolve, HOLD_RETRY_MS).unref?.());
    }
  })();
  connecting.then(
    (socket) => released && socket.end(),
    () => undefined,
  );
  return {
    send: async (message) => {
      const socket = await connecting;
      socket.write(`${JSON.stringify(message)}\n`);
    },
    release: () => {
      released = true;
      void connecting.then(
        (socket) => socket.end(),
        () => undefined,
      );
    },
  };
}

/** `holdLocalServer` and one message at once (tests; a process that already knows what it hands over). */
export async function handOffToLocalServer(socketPath: string, message: object): Promise<LocalServerHold> {
  const hold = holdLocalServer(socketPath, 0);
  await hold.send(message);
  return hold;
}

/** A connection whose `ready` came: its reader, the lines that came after `ready` in the same chunk, and `ready`. */
interface Connected {
  readonly socket: Socket;
  readonly reader: LineReader;
  readonly pending: readonly string[];
  readonly ready: string;
}

/** Connects and waits for the server's `ready` line; undefined when there is no server or it does not answer. */
function connect(path: string, withinMs = READY_WITHIN_MS): Promise<Connected | undefined> {
  return new Promise((resolve) => {
    const socket = createConnection(path);
    const reader = new LineReader();
    const done = (value: Connected | undefined) => {
      clearTimeout(timer);
      socket.removeAllListeners("data");
      socket.removeAllListeners("error");
      socket.removeAllListeners("close");
      if (!value) socket.destroy();
      resolve(value);
    };
    const timer = setTimeout(() => done(undefined), withinMs);
    socket.on("error", () => done(undefined));
    socket.on("close", () => done(undefined));
    socket.on("data", (chunk: Buffer) => {
      const [first, ...pending] = reader.push(chunk);
      if (first === undefined) return;
      let ready = false;
      try {
        ready = (JSON.parse(first) as { type?: string }).type === "ready";
      } catch {
        ready = false;
      }
      socket.pause();
      done(ready ? { socket, reader, pending, ready: first } : undefined);
    });
  });
}

/**
 * Starts the server as a detached process (its own session and process group), with its output in its log: on Node.js
 * when it can (plugin/transport/local-server/runtime.ts), else on this runtime (OpenCode's own binary runs scripts as Bun with BUN_BE_BUN=1).
 * Skipped when another process started one moments ago. Never waited for: this process runs its own thread.
 */
function startServer(
  entry: URL,
  paths: { socket: string; log: string; startGuard: string },
  options: Record<string, unknown> | undefined,
  env: NodeJS.ProcessEnv,
): void {
  try {
    if (Date.now() - statSync(paths.startGuard).mtimeMs < START_GUARD_MS) return;
    unlinkSync(paths.startGuard);
  } catch {
    // No start under way.
  }
  try {
    closeSync(openSync(paths.startGuard, "wx"));
  } catch (error) {
    // Another process won the guard: it starts the server.
    if ((error as NodeJS.ErrnoException).code !== "EEXIST")
      process.stderr.write(`optchat: the local server could not start: ${String(error)}\n`);
    return;
  }
  // Imported here: only a run that starts a server needs it, and a served run imports nothing it does not use.
  void import("./runtime.js")
    .then(({ runtimeSetting, serverCommand }) => serverCommand(runtimeSetting(options, env), env, entry))
    .then(
      (command) => spawnServer(command, paths, idleSeconds(options, env)),
      (error: unknown) => process.stderr.write(`optchat: the local server could not start: ${String(error)}\n`),
    );
}

function spawnServer(server: ServerCommand, paths: { socket: string; log: string }, idle: number): void {
  let log: number | undefined;
  try {
    // Each start appends; a log past 1 MB starts afresh, so that it never grows without bound.
    log = openSync(paths.log, fileSize(paths.log) > 1_000_000 ? "w" : "a");
    const child = spawn(server.command, [...server.args, paths.socket, String(idle)], {
      detached: true,
      stdio: ["ignore", "ignore", log],
      env: server.env,
      cwd: dirname(paths.socket),
    });
    child.on("error", (error) => process.stderr.write(`optchat: the local server could not start: ${error}\n`));
    child.unref();
  } catch (error) {
    process.stderr.write(`optchat: the local server could not start: ${String(error)}\n`);
  } finally {
    if (log !== undefined) closeSync(log);
  }
}

function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** Setting localServerIdleSeconds as plugin/base/config.ts reads it (an option wins, an empty variable is unset). */
function idleSeconds(options: Record<string, unknown> | undefined, env: NodeJS.ProcessEnv): number {
  const given = Number(options?.localServerIdleSeconds ?? (env.OPTCHAT_LOCAL_SERVER_IDLE_SECONDS || 300));
  return Number.isInteger(given) && given >= 1 && given <= 86_400 ? given : 300;
}

/** The server's socket as a channel: one JSON message per line each way. */
class SocketChannel implements Channel {
  readonly sideName = SIDE_NAMES["local server"];
  readonly outlivesProcess = true;
  private receiver: ChannelReceiver | undefined;
  private readonly early: ToOpencodeSide[] = [];
  /** A failure before anyone listened, told at `listen`. */
  private earlyFailure: string | undefined;
  private readonly socket: Socket;

  constructor(
    { socket, reader, pending }: Connected,
    readonly init: RunnerInit,
  ) {
    this.socket = socket;
    socket.on("data", (chunk: Buffer) => this.read(reader.push(chunk)));
    socket.on("error", (error) => this.failed(`it failed: the local server's connection failed: ${error}`));
    socket.on("close", () => this.failed("it ended"));
    socket.resume();
    this.read(pending);
  }

  post(message: ToPluginSide): void {
    this.socket.write(`${JSON.stringify(message)}\n`);
  }

  listen(receiver: ChannelReceiver): void {
    this.receiver = receiver;
    for (const data of this.early.splice(0)) receiver.message(data);
    if (this.earlyFailure) receiver.failed(this.earlyFailure);
  }

  /**
   * Ends the connection after what was written (the last events before a dispose must reach the server, which then
   * flushes). A socket already closed is left alone, and one that has not closed a second later is destroyed: Bun 1.3
   * spun at full CPU in `end()` on a socket its peer had just closed (plugin/transport/local-server/server.ts
   * `Connection.end`).
   */
  close(): void {
    if (this.socket.destroyed || !this.socket.writable) return;
    this.socket.end();
    setTimeout(() => this.socket.destroy(), 1_000).unref();
  }

  ref(): void {
    this.socket.ref();
  }

  unref(): void {
    this.socket.unref();
  }

  private read(lines: readonly string[]): void {
    for (const line of lines) {
      let data: ToOpencodeSide;
      try {
        data = JSON.parse(line) as ToOpencodeSide;
      } catch (error) {
        this.failed(`it failed: the local server sent a line that is not JSON: ${String(error)}`);
        continue;
      }
      if (this.receiver) this.receiver.message(data);
      else this.early.push(data);
    }
  }

  private failed(reason: string): void {
    if (this.receiver) this.receiver.failed(reason);
    else this.earlyFailure ??= reason;
  }
}

/**
 * Stops the local servers whose sockets are in `directory` (a temporary directory's `optchat-<uid>`: the test harness
 * gives each OpenCode environment its own TMPDIR) and waits up to `ms` for each to exit; their adapters are closed
 * first, as on any SIGTERM; one still running after `ms` is killed. Returns the pids that were asked to stop.
 */
export async function stopLocalServers(directory: string, ms = 10_000): Promise<number[]> {
  let names: string[];
  try {
    names = readdirSync(directory).filter((name) => name.endsWith(".sock"));
  } catch {
    return [];
  }
  const pids: number[] = [];
  for (const name of names) {
    const found = await connect(join(directory, name));
    if (!found) continue;
    const pid = (JSON.parse(found.ready) as { pid?: number }).pid;
    found.socket.destroy();
    if (typeof pid !== "number") continue;
    try {
      process.kill(pid, "SIGTERM");
      pids.push(pid);
    } catch {
      // Already gone.
    }
  }
  const deadline = Date.now() + ms;
  for (const pid of pids) {
    while (Date.now() < deadline && alive(pid)) await new Promise((resolve) => setTimeout(resolve, 50));
    // One that did not stop in time is killed: a test run must not leave a server behind.
    if (alive(pid)) process.kill(pid, "SIGKILL");
  }
  return pids;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
