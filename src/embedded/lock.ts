import { closeSync, openSync, readFileSync, rmSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";
import { systemFault } from "./cluster.js";
import { embeddedFault } from "./faults.js";
import type { EmbeddedSettings } from "./paths.js";

const HOLD_LIMIT_MS = 120_000;

/**
 * A lock file in the data directory (O_EXCL, holding the holder's PID): processes that find the server down start it
 * one at a time. A lock whose holder is dead is taken over. Two starts racing past it anyway are harmless: PostgreSQL's
 * own postmaster.pid lets only one server run on a cluster, and the loser finds the winner's socket.
 */
export async function withStartLock<T>(settings: EmbeddedSettings, work: () => Promise<T>): Promise<T> {
  const path = join(settings.dataDir, "server.lock");
  const deadline = Date.now() + HOLD_LIMIT_MS;
  for (;;) {
    try {
      const fd = openSync(path, "wx", 0o600);
      writeSync(fd, String(process.pid));
      closeSync(fd);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") {
        throw systemFault(error, `Cannot write the lock file ${path}`);
      }
    }
    const holder = Number(readFileSync(path, "utf8").trim() || "0");
    if (!(holder > 0 && alive(holder))) {
      rmSync(path, { force: true });
      continue;
    }
    if (Date.now() > deadline) {
      throw embeddedFault(
        "start-failed",
        `Process ${holder} has held ${path} for over ${HOLD_LIMIT_MS / 1000} s while starting the embedded server`,
        `see ${join(settings.dataDir, "server.log")}; stop process ${holder}, or remove the lock file`,
        { directory: settings.dataDir },
      );
    }
    await sleep(50);
  }
  try {
    return await work();
  } finally {
    try {
      if (readFileSync(path, "utf8").trim() === String(process.pid)) unlinkSync(path);
    } catch {}
  }
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
