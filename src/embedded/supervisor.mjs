// The embedded server's idle supervisor (src/embedded/server.ts starts it detached, in its own session). Every poll it
// counts the server's client connections (and a process about to connect: <dataDir>/last-use's mtime); once none has
// been connected for the idle time it stops the server with a
// fast shutdown (SIGINT to the postmaster: clients are disconnected, everything committed is kept) and exits. It exits
// too when the server is gone (stopped, killed). Plain JavaScript, so it starts without a TypeScript loader.
import { closeSync, openSync, readFileSync, renameSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";

const [dataDir, clusterDir, socketDir, idleArg] = process.argv.slice(2);
const idleMs = Number(idleArg) * 1000;
const pollMs = Math.min(10_000, Math.max(100, Math.floor(idleMs / 5)));
const pidFile = join(dataDir, "supervisor.pid");

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const say = (line) => process.stderr.write(`${new Date().toISOString()} optchat supervisor ${process.pid}: ${line}\n`);

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return error.code === "EPERM";
  }
}

function readPid(path) {
  try {
    const pid = Number(readFileSync(path, "utf8").split("\n")[0].trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Only one supervisor per data directory: the first to write the PID file; a dead one's file is taken over. */
function claim() {
  try {
    const fd = openSync(pidFile, "wx", 0o600);
    writeSync(fd, String(process.pid));
    closeSync(fd);
    return true;
  } catch (error) {
    if (error.code !== "EEXIST") throw error;
  }
  const holder = readPid(pidFile);
  if (holder !== undefined && holder !== process.pid && alive(holder)) return false;
  const scratch = `${pidFile}.${process.pid}`;
  writeFileSync(scratch, String(process.pid), { mode: 0o600 });
  renameSync(scratch, pidFile);
  return readPid(pidFile) === process.pid;
}

function lastUse() {
  try {
    return statSync(join(dataDir, "last-use")).mtimeMs;
  } catch {
    return 0;
  }
}

async function clientCount() {
  const client = new pg.Client({
    host: socketDir,
    user: "postgres",
    database: "postgres",
    application_name: "optchat-supervisor",
    connectionTimeoutMillis: 5000,
  });
  client.on("error", () => {});
  let connected = false;
  try {
    await client.connect();
    connected = true;
    const { rows } = await client.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
    );
    return rows[0].n;
  } finally {
    // Not awaited after a refused connect: under Bun that end() never settles.
    if (connected) await client.end().catch(() => {});
    else client.end().catch(() => {});
  }
}

async function main() {
  if (!claim()) return;
  say(`watching ${clusterDir}: fast shutdown after ${idleMs / 1000} s without a client`);
  let lastBusy = Date.now();
  for (;;) {
    await sleep(pollMs);
    const postmaster = readPid(join(clusterDir, "postmaster.pid"));
    if (postmaster === undefined || !alive(postmaster)) {
      say("the server is gone; exiting");
      return;
    }
    let clients = 1; // a server that does not answer (starting, stopping, full) counts as busy
    try {
      clients = await clientCount();
    } catch {}
    if (clients > 0) {
      lastBusy = Date.now();
      continue;
    }
    // A process that found the server up a moment ago and is about to connect counts as a client (server.ts markUse).
    lastBusy = Math.max(lastBusy, lastUse());
    if (Date.now() - lastBusy < idleMs) continue;
    say(`no client for ${Math.round((Date.now() - lastBusy) / 1000)} s: fast shutdown of ${postmaster}`);
    process.kill(postmaster, "SIGINT");
    while (alive(postmaster)) await sleep(50);
    say("stopped");
    return;
  }
}

try {
  await main();
} catch (error) {
  say(`failed: ${error?.stack ?? error}`);
  process.exitCode = 1;
} finally {
  if (readPid(pidFile) === process.pid) rmSync(pidFile, { force: true });
}
