/**
 * The machine's reference figure: pgbench's built-in TPC-B-like script against a scratch database on the same server.
 * Benchmarks report their own throughput next to it (records/s ÷ pgbench tps), so a number measured on a laptop and
 * one measured on a server can be compared.
 */
import { spawn } from "node:child_process";
import { accessSync, constants, readdirSync } from "node:fs";
import { delimiter, join } from "node:path";
import { note, round, withScratchDatabase } from "./common.js";

/**
 * pgbench: OPTCHAT_BENCH_PGBENCH when set (and only it), else PATH, /usr/bin or the Debian/Ubuntu PostgreSQL
 * directories; undefined when absent.
 */
export function findPgbench(): string | undefined {
  const explicit = process.env.OPTCHAT_BENCH_PGBENCH;
  if (explicit) return isExecutable(explicit) ? explicit : undefined;
  const candidates: string[] = [];
  for (const dir of (process.env.PATH ?? "").split(delimiter)) if (dir) candidates.push(join(dir, "pgbench"));
  candidates.push("/usr/bin/pgbench");
  try {
    const versions = readdirSync("/usr/lib/postgresql").sort().reverse();
    for (const version of versions) candidates.push(join("/usr/lib/postgresql", version, "bin", "pgbench"));
  } catch {}
  return candidates.find(isExecutable);
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

interface Finished {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

function run(bin: string, args: readonly string[], signal: AbortSignal): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], signal });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => {
      stdout += chunk;
    });
    child.stderr.on("data", (chunk) => {
      stderr += chunk;
    });
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

export interface PgbenchResult {
  readonly clients: number;
  readonly threads: number;
  readonly seconds: number;
  readonly tps: number;
  readonly latencyAvgMs: number | null;
  readonly transactions: number | null;
  readonly failed: number | null;
}

/** Parses the summary pgbench prints at the end of a run (PostgreSQL 12-17 formats). */
export function parsePgbenchOutput(output: string): {
  tps: number;
  latencyAvgMs: number | null;
  transactions: number | null;
  failed: number | null;
} {
  const tps = /^tps = ([\d.]+)/m.exec(output);
  if (!tps) throw new Error(`pgbench printed no "tps = ..." line:\n${output.trim()}`);
  const latency = /^latency average = ([\d.]+) ms/m.exec(output);
  const transactions = /^number of transactions actually processed: (\d+)/m.exec(output);
  const failed = /^number of failed transactions: (\d+)/m.exec(output);
  return {
    tps: Number(tps[1]),
    latencyAvgMs: latency ? Number(latency[1]) : null,
    transactions: transactions ? Number(transactions[1]) : null,
    failed: failed ? Number(failed[1]) : null,
  };
}

export interface PgbenchPlan {
  readonly scale: number;
  /** One pgbench run per entry, in order, against the same initialized database. */
  readonly runs: readonly { readonly clients: number; readonly threads: number; readonly seconds: number }[];
}

export interface PgbenchOutcome {
  readonly bin: string;
  readonly version: string;
  readonly initSeconds: number;
  readonly results: readonly PgbenchResult[];
}

/**
 * `pgbench -i -s <scale>` into a fresh scratch database, then each planned `pgbench -c -j -T` run; the database is
 * dropped afterwards whatever happens.
 */
export async function runPgbench(
  serverUrl: string,
  bin: string,
  plan: PgbenchPlan,
  signal: AbortSignal,
): Promise<PgbenchOutcome> {
  const version = (await run(bin, ["--version"], signal)).stdout.trim();
  return await withScratchDatabase(serverUrl, "pgbench", async ({ name, url }) => {
    note(`pgbench: initializing ${name} at scale ${plan.scale}`);
    const initStart = performance.now();
    // The dbname argument is a libpq connection string, so the URL carries host, port, user and password.
    const init = await run(bin, ["-i", "-q", "-s", String(plan.scale), url], signal);
    if (init.code !== 0) throw new Error(`pgbench -i failed (exit ${init.code}): ${init.stderr.trim()}`);
    const initSeconds = round((performance.now() - initStart) / 1000, 2);
    const results: PgbenchResult[] = [];
    for (const { clients, threads, seconds } of plan.runs) {
      if (signal.aborted) break;
      note(`pgbench: TPC-B, ${clients} client(s), ${threads} thread(s), ${seconds} s`);
      const args = ["-c", String(clients), "-j", String(threads), "-T", String(seconds), url];
      const finished = await run(bin, args, signal);
      if (finished.code !== 0)
        throw new Error(
          `pgbench ${args.slice(0, -1).join(" ")} failed (exit ${finished.code}): ${finished.stderr.trim()}`,
        );
      results.push({ clients, threads, seconds, ...parsePgbenchOutput(finished.stdout) });
    }
    return { bin, version, initSeconds, results };
  });
}
