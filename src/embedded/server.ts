import { type ChildProcess, spawn } from "node:child_process";
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { type Binaries, findBinaries } from "./binaries.js";
import {
  asServerUser,
  ensureCluster,
  lastLine,
  prepareDataDir,
  reachableBinaries,
  type ServerUser,
  serverUser,
  systemFault,
} from "./cluster.js";
import { embeddedFault, faultOfFailure } from "./faults.js";
import { alive, withStartLock } from "./lock.js";
import { type EmbeddedSettings, embeddedUrl } from "./paths.js";

export { alive };

const SUPERVISOR = fileURLToPath(new URL("./supervisor.mjs", import.meta.url));
const START_TIMEOUT_MS = 60_000;
const LOG_ROTATE_BYTES = 10_000_000;

export interface EnsureOutcome {
  /** This call started the server (false: it was running already). */
  readonly started: boolean;
  /** This call made the cluster with initdb. */
  readonly initialised: boolean;
}

/** What a probe of the socket found. */
type Probe = { state: "up"; dataDirectory: string } | { state: "down" } | { state: "busy"; reason: string };

/**
 * Makes sure the embedded server of `settings` is running and returns once it accepts connections: connects when it is
 * up (a few milliseconds), otherwise, under a lock in the data directory (so processes starting in the same second end
 * up on one server), makes the cluster once and starts the server detached, in its own session, with a small
 * supervisor that stops it after the idle time (src/embedded/supervisor.mjs, docs/database.md).
 */
export async function ensureEmbeddedServer(settings: EmbeddedSettings): Promise<EnsureOutcome> {
  markUse(settings);
  const first = await settle(settings);
  if (first.state === "up") {
    checkOwnServer(settings, first.dataDirectory);
    ensureSupervisor(settings);
    return { started: false, initialised: false };
  }
  const bins = await findBinaries();
  const user = serverUser();
  prepareDataDir(settings, user);
  return await withStartLock(settings, async () => {
    const again = await settle(settings);
    if (again.state === "up") {
      checkOwnServer(settings, again.dataDirectory);
      ensureSupervisor(settings);
      return { started: false, initialised: false };
    }
    const usable = reachableBinaries(bins, settings, user);
    const initialised = await ensureCluster(settings, usable, user);
    prepareSocketDir(settings, user);
    await startServer(settings, usable, user);
    ensureSupervisor(settings);
    return { started: true, initialised };
  });
}

/**
 * Marks that a process is about to use the server (the mtime of <dataDir>/last-use): the supervisor counts it as a
 * client, so a server found up is not stopped for idleness before the caller's first connection lands.
 */
function markUse(settings: EmbeddedSettings): void {
  const path = join(settings.dataDir, "last-use");
  const now = new Date();
  try {
    utimesSync(path, now, now);
  } catch {
    try {
      writeFileSync(path, "", { mode: 0o600 });
    } catch {} // no data directory yet: nothing runs that could stop
  }
}

/** Probes until the server is up or down (not starting or stopping), for up to START_TIMEOUT_MS. */
async function settle(settings: EmbeddedSettings): Promise<Exclude<Probe, { state: "busy" }>> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    const probe = await probeServer(settings);
    if (probe.state !== "busy") return probe;
    if (Date.now() > deadline) {
      throw embeddedFault(
        "start-failed",
        `The embedded server on ${settings.socketDir} stayed busy for ${START_TIMEOUT_MS / 1000} s: ${probe.reason}`,
        `see ${join(settings.dataDir, "server.log")}; \`optchat db stop\` then \`optchat db start\``,
        { directory: settings.dataDir },
      );
    }
    await sleep(50);
  }
}

/** One connection attempt over the socket; `busy`: the server is starting up or shutting down (57P03, 57P01). */
export async function probeServer(settings: EmbeddedSettings): Promise<Probe> {
  if (!existsSync(join(settings.socketDir, ".s.PGSQL.5432"))) return { state: "down" };
  const client = new pg.Client({
    connectionString: embeddedUrl(settings.socketDir, "postgres"),
    application_name: "optchat-probe",
    connectionTimeoutMillis: 5000,
  });
  client.on("error", () => {});
  let connected = false;
  try {
    await client.connect();
    connected = true;
    const { rows } = await client.query<{ setting: string }>(
      "SELECT setting FROM pg_settings WHERE name = 'data_directory'",
    );
    return { state: "up", dataDirectory: rows[0]?.setting ?? "" };
  } catch (error) {
    const code = (error as { code?: string }).code ?? "";
    if (code === "ENOENT" || code === "ECONNREFUSED") return { state: "down" };
    if (code === "57P03" || code === "57P01" || code === "ECONNRESET") {
      return { state: "busy", reason: (error as Error).message };
    }
    if (code === "EACCES") {
      throw embeddedFault(
        "foreign-owner",
        `The socket ${settings.socketDir}/.s.PGSQL.5432 refuses you: ${(error as Error).message}`,
        `remove ${settings.socketDir} if no server of yours uses it, or set OPTCHAT_SOCKET_DIR to a directory of your own`,
        { directory: settings.socketDir },
        error,
      );
    }
    throw embeddedFault(
      "start-failed",
      `The embedded server on ${settings.socketDir} answered with an error: ${(error as Error).message}`,
      `see ${join(settings.dataDir, "server.log")}, or set DATABASE_URL to a server of your own`,
      { directory: settings.dataDir },
      error,
    );
  } finally {
    // Not awaited after a refused connect: in Bun (OpenCode's runtime) that end() never settles.
    if (connected) await client.end().catch(() => {});
    else client.end().catch(() => {});
  }
}

/** A server answering on our socket must be the one of our data directory (OPTCHAT_SOCKET_DIR shared by two). */
function checkOwnServer(settings: EmbeddedSettings, dataDirectory: string): void {
  if (dataDirectory === settings.clusterDir) return;
  throw embeddedFault(
    "socket-collision",
    `The socket directory ${settings.socketDir} is taken by the PostgreSQL server of ${dataDirectory}, not by the one of ${settings.clusterDir}`,
    "give each data directory its own OPTCHAT_SOCKET_DIR (empty: one derived from OPTCHAT_DATA_DIR), or point OPTCHAT_DATA_DIR at that server's data",
    { directory: settings.socketDir, other: dataDirectory },
  );
}

/** The socket directory: mode 0700, owned by the server's user, the only way in (no TCP port). */
function prepareSocketDir(settings: EmbeddedSettings, user: ServerUser): void {
  const dir = settings.socketDir;
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (error) {
    throw systemFault(error, `Cannot create the embedded server's socket directory ${dir} (OPTCHAT_SOCKET_DIR)`);
  }
  const stat = lstatSync(dir);
  const me = process.getuid?.() ?? 0;
  if (!stat.isDirectory() || (stat.uid !== me && stat.uid !== user.uid)) {
    throw embeddedFault(
      "foreign-owner",
      `The socket directory ${dir} ${stat.isDirectory() ? `belongs to user id ${stat.uid}` : "is not a directory"}`,
      `remove it (someone else may have made it to catch your connections), or set OPTCHAT_SOCKET_DIR to a directory of your own`,
      { directory: dir, owner: stat.uid },
    );
  }
  if (user.switched && stat.uid !== user.uid) chownSync(dir, user.uid, user.gid);
  if ((stat.mode & 0o777) !== 0o700) chmodSync(dir, 0o700);
}

async function startServer(settings: EmbeddedSettings, bins: Binaries, user: ServerUser): Promise<void> {
  clearStalePid(settings);
  const logPath = join(settings.dataDir, "server.log");
  const deadline = Date.now() + START_TIMEOUT_MS;
  // A postmaster killed a moment ago leaves backends that still hold its shared memory for a few hundred ms.
  for (let attempt = 1; ; attempt++) {
    const child = spawnPostgres(settings, bins, user, logPath);
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    const outcome = await Promise.race([waitUp(settings, deadline), exited.then((code) => ({ exited: code }))]);
    if (outcome === "up") return;
    const log = tail(logPath);
    if (
      typeof outcome === "object" &&
      /pre-existing shared memory block|lock file .* already exists/.test(log) &&
      Date.now() < deadline &&
      attempt < 100
    ) {
      await sleep(200);
      clearStalePid(settings);
      continue;
    }
    if (outcome === "timeout") child.kill("SIGQUIT");
    throw startFailure(settings, log, outcome === "timeout" ? "did not accept connections in time" : "exited");
  }
}

function spawnPostgres(settings: EmbeddedSettings, bins: Binaries, user: ServerUser, logPath: string): ChildProcess {
  const log = openLog(logPath, user);
  try {
    const run = asServerUser(user, bins.postgres, [
      "-D",
      settings.clusterDir,
      "-p",
      "5432",
      "-c",
      "listen_addresses=",
      "-c",
      `unix_socket_directories=${settings.socketDir}`,
      "-c",
      "unix_socket_permissions=0700",
      "-c",
      "logging_collector=off",
    ]);
    const child = spawn(run.command, run.args, {
      ...run.options,
      detached: true, // its own session: a closed terminal or a killed parent does not take it down
      stdio: ["ignore", log, log],
      env: { ...process.env, LC_MESSAGES: "C", LC_ALL: "C" },
    });
    child.on("error", () => {});
    child.unref();
    return child;
  } finally {
    closeSync(log);
  }
}

async function waitUp(settings: EmbeddedSettings, deadline: number): Promise<"up" | "timeout"> {
  while (Date.now() < deadline) {
    const probe = await probeServer(settings).catch(() => ({ state: "busy" }) as const);
    if (probe.state === "up") {
      checkOwnServer(settings, probe.dataDirectory);
      return "up";
    }
    await sleep(25);
  }
  return "timeout";
}

function startFailure(settings: EmbeddedSettings, log: string, what: string) {
  const fault = faultOfFailure(undefined, log);
  const line =
    lastLine(
      log
        .split("\n")
        .filter((l) => /FATAL|PANIC|ERROR/.test(l))
        .join("\n"),
    ) || lastLine(log);
  const logPath = join(settings.dataDir, "server.log");
  if (fault === "disk-full") {
    return embeddedFault(
      "disk-full",
      `The embedded server of ${settings.dataDir} ${what}: the disk is full (${line})`,
      "free some space on that disk (nothing committed is lost), or move the data with OPTCHAT_DATA_DIR",
      { directory: settings.dataDir, log: logPath },
    );
  }
  if (/could not (create|bind).*socket|Address already in use/i.test(log)) {
    return embeddedFault(
      "socket-collision",
      `The embedded server of ${settings.dataDir} could not open its socket in ${settings.socketDir}: ${line}`,
      "stop the other server using that socket directory, or set OPTCHAT_SOCKET_DIR to another directory",
      { directory: settings.socketDir, log: logPath },
    );
  }
  return embeddedFault(
    fault ?? "start-failed",
    `The embedded server of ${settings.dataDir} ${what}: ${line || "no log"}`,
    `see ${logPath}; or set DATABASE_URL to a server of your own`,
    { directory: settings.dataDir, log: logPath },
  );
}

/** postmaster.pid left by a killed server whose PID now belongs to another program: PostgreSQL would refuse to start. */
function clearStalePid(settings: EmbeddedSettings): void {
  const pidFile = join(settings.clusterDir, "postmaster.pid");
  const pid = postmasterPid(settings);
  if (pid === undefined || isPostgres(pid)) return;
  rmSync(pidFile, { force: true });
}

/** The postmaster's PID from its postmaster.pid, or undefined. */
export function postmasterPid(settings: EmbeddedSettings): number | undefined {
  try {
    const pid = Number(readFileSync(join(settings.clusterDir, "postmaster.pid"), "utf8").split("\n")[0]);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function isPostgres(pid: number): boolean {
  if (!alive(pid)) return false;
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "postgres";
  } catch {
    return true; // no /proc (macOS): PostgreSQL's own check decides
  }
}

/**
 * Starts the idle supervisor unless one runs: a small detached Node process that stops the server (fast shutdown)
 * once no client has been connected for the idle time, then exits. A supervisor killed meanwhile is replaced by the
 * next optchat process that uses the server.
 */
function ensureSupervisor(settings: EmbeddedSettings): void {
  const pid = supervisorPid(settings);
  if (pid !== undefined && alive(pid)) return;
  const logPath = join(settings.dataDir, "server.log");
  let log: number | "ignore" = "ignore";
  try {
    log = openSync(logPath, "a");
  } catch {}
  try {
    const child = spawn(
      process.execPath,
      [SUPERVISOR, settings.dataDir, settings.clusterDir, settings.socketDir, String(settings.idleSeconds)],
      {
        detached: true,
        stdio: ["ignore", log, log],
        // Inside OpenCode the runtime is its Bun executable, which runs a script as bun with BUN_BE_BUN.
        env: { PATH: process.env.PATH ?? "", ...(process.versions.bun ? { BUN_BE_BUN: "1" } : {}) },
      },
    );
    child.on("error", () => {});
    child.unref();
  } finally {
    if (typeof log === "number") closeSync(log);
  }
}

export function supervisorPid(settings: EmbeddedSettings): number | undefined {
  try {
    const pid = Number(readFileSync(join(settings.dataDir, "supervisor.pid"), "utf8").trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function openLog(path: string, user: ServerUser): number {
  try {
    if (existsSync(path) && statSync(path).size > LOG_ROTATE_BYTES) renameSync(path, `${path}.1`);
    const fd = openSync(path, "a", 0o600);
    if (user.switched) chownSync(path, user.uid, user.gid);
    return fd;
  } catch (error) {
    throw systemFault(error, `Cannot write the embedded server's log ${path}`);
  }
}

function tail(path: string): string {
  try {
    return readFileSync(path, "utf8").slice(-4000);
  } catch {
    return "";
  }
}

/** Stops the server with a fast shutdown (SIGINT: clients disconnected, everything committed kept) and waits. */
export async function stopEmbeddedServer(settings: EmbeddedSettings, timeoutMs = 60_000): Promise<boolean> {
  const pid = postmasterPid(settings);
  if (pid === undefined || !isPostgres(pid)) return false;
  process.kill(pid, "SIGINT");
  const deadline = Date.now() + timeoutMs;
  while (alive(pid) && Date.now() < deadline) await sleep(25);
  return true;
}

/** Bytes under a directory (its files, not following links). */
export function directorySize(dir: string): number {
  let total = 0;
  let entries: import("node:fs").Dirent[];
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const entry of entries) {
    const at = join(dir, entry.name);
    if (entry.isDirectory()) total += directorySize(at);
    else if (entry.isFile()) {
      try {
        total += statSync(at).size;
      } catch {}
    }
  }
  return total;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
