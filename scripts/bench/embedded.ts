/**
 * `bench embedded` (also `npm run bench:embedded`, which needs no server at 127.0.0.1:5432): the embedded PostgreSQL
 * server of issue 43, on scratch data directories under /tmp, through the real CLI in real processes.
 *
 * Cases (OPTCHAT_BENCH_EMBEDDED_CASES, comma-separated; default start,idle,kill-loop):
 *   start      cold start (initdb, start, migrate) and warm start (after a stop) as `optchat db start` measures them;
 *              a second process's start-up while the server runs (`optchat db start` finding it up), next to the same
 *              CLI process that opens no database at all (`optchat db status`): wall time of whole processes, p50
 *   idle       resident memory of the idle server (postmaster and its processes) and of its supervisor; then the time
 *              until nothing of it is left once the idle time (OPTCHAT_BENCH_EMBEDDED_IDLE_SECONDS, default 5) passed
 *   kill-loop  writer processes (scripts/bench/embedded-writer.ts) write turns for OPTCHAT_BENCH_EMBEDDED_SECONDS
 *              (default 30) while the server is SIGKILLed every OPTCHAT_BENCH_EMBEDDED_KILL_SECONDS (default 5) and a
 *              writer every other period (restarted at once); afterwards every record a writer saw committed must be
 *              there (lostRecords 0)
 *   demo       `npm run demo` with no DATABASE_URL: cold (a fresh data directory: initdb) and warm (the same again)
 */
import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { embeddedUrl } from "../../src/embedded/paths.js";
import { postmasterPid, stopEmbeddedServer } from "../../src/embedded/server.js";
import { resolveConfig } from "../../src/memory/config.js";
import { type BenchContext, emit, envNumber, note, round } from "./common.js";

const BENCH = "embedded";
const ROOT = fileURLToPath(new URL("../..", import.meta.url));

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly ms: number;
}

function run(command: string, args: readonly string[], env: Record<string, string>): Promise<Run> {
  const started = performance.now();
  const child = spawn(command, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk) => {
    stdout += chunk;
  });
  child.stderr.on("data", (chunk) => {
    stderr += chunk;
  });
  return new Promise((resolve) =>
    child.on("close", (code) => resolve({ code, stdout, stderr, ms: performance.now() - started })),
  );
}

const cli = (args: readonly string[], env: Record<string, string>) =>
  run(process.execPath, [`${ROOT}bin/optchat.mjs`, ...args], env);

function envFor(dataDir: string, idleSeconds = 60): Record<string, string> {
  return {
    DATABASE_URL: "",
    OPTCHAT_LEGACY_DATABASE_URL: "",
    OPTCHAT_DATA_DIR: dataDir,
    OPTCHAT_SOCKET_DIR: "",
    OPTCHAT_EMBEDDED_IDLE_SECONDS: String(idleSeconds),
  };
}

function settingsOf(dataDir: string, idleSeconds = 60) {
  const embedded = resolveConfig({ env: envFor(dataDir, idleSeconds) }).embedded;
  if (!embedded) throw new Error("no embedded settings");
  return embedded;
}

/** The processes of a data directory's server (postmaster and its children) and of its supervisor, with RSS in KiB. */
function processesOf(dataDir: string): { pid: number; rssKiB: number; supervisor: boolean }[] {
  const found: { pid: number; rssKiB: number; supervisor: boolean }[] = [];
  const postmaster = postmasterPid(settingsOf(dataDir));
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      const status = readFileSync(`/proc/${entry}/status`, "utf8");
      const ppid = Number(/PPid:\s+(\d+)/.exec(status)?.[1]);
      const ours = cmdline.includes(`${dataDir}/postgres`) || cmdline.includes(dataDir) || ppid === postmaster;
      if (!ours) continue;
      found.push({
        pid: Number(entry),
        rssKiB: Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0),
        supervisor: cmdline.some((arg) => arg.endsWith("supervisor.mjs")),
      });
    } catch {}
  }
  return found;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;

function scratchDir(tag: string): string {
  const dir = `/tmp/optchat-bench-${process.pid}-${tag}`;
  rmSync(dir, { recursive: true, force: true });
  return dir;
}

async function cleanup(dir: string): Promise<void> {
  await stopEmbeddedServer(settingsOf(dir)).catch(() => {});
  for (let i = 0; i < 100 && processesOf(dir).length > 0; i++) await sleep(100);
  rmSync(dir, { recursive: true, force: true });
}

function startedMs(result: Run): number {
  if (result.code !== 0) throw new Error(`optchat db start failed: ${result.stderr}`);
  return Number(JSON.parse(result.stdout).ms);
}

async function startCase(): Promise<void> {
  const dir = scratchDir("start");
  try {
    const env = envFor(dir);
    const cold = await cli(["db", "start", "--json"], env);
    const coldMs = startedMs(cold);
    const warmMs: number[] = [];
    for (let i = 0; i < 3; i++) {
      await stopEmbeddedServer(settingsOf(dir));
      warmMs.push(startedMs(await cli(["db", "start", "--json"], env)));
    }
    const second: number[] = [];
    const secondProcess: number[] = [];
    const baseline: number[] = [];
    for (let i = 0; i < 7; i++) {
      const run = await cli(["db", "start", "--json"], env);
      second.push(startedMs(run));
      secondProcess.push(run.ms);
      baseline.push((await cli(["db", "status", "--json"], env)).ms);
    }
    emit(BENCH, "start", {
      coldStartMs: Math.round(coldMs),
      coldProcessMs: Math.round(cold.ms),
      warmStartMsP50: Math.round(median(warmMs)),
      warmStartMsMax: Math.round(Math.max(...warmMs)),
      secondProcessServerMsP50: Math.round(median(second)),
      secondProcessWallMsP50: Math.round(median(secondProcess)),
      noDatabaseProcessWallMsP50: Math.round(median(baseline)),
      secondProcessOverNoDatabase: round(median(secondProcess) / median(baseline), 2),
      targets: { warmStartMs: 2000 },
    });
  } finally {
    await cleanup(dir);
  }
}

async function idleCase(): Promise<void> {
  const idleSeconds = envNumber("OPTCHAT_BENCH_EMBEDDED_IDLE_SECONDS", 5, { min: 2, integer: true });
  const dir = scratchDir("idle");
  try {
    const env = envFor(dir, idleSeconds);
    startedMs(await cli(["db", "start", "--json"], env));
    // Settled: the start's own connections are gone, autovacuum and the checkpointer idle.
    await sleep(Math.min(1500, (idleSeconds * 1000) / 3));
    const processes = processesOf(dir);
    const serverKiB = processes.filter((p) => !p.supervisor).reduce((sum, p) => sum + p.rssKiB, 0);
    const supervisorKiB = processes.filter((p) => p.supervisor).reduce((sum, p) => sum + p.rssKiB, 0);
    const waitStart = performance.now();
    while (processesOf(dir).length > 0 && performance.now() - waitStart < (idleSeconds + 30) * 1000) await sleep(100);
    const left = processesOf(dir).length;
    emit(BENCH, "idle", {
      idleSeconds,
      serverProcesses: processes.filter((p) => !p.supervisor).length,
      serverRssMiB: round(serverKiB / 1024, 1),
      supervisorRssMiB: round(supervisorKiB / 1024, 1),
      note: "RSS counts shared memory once per process that touched it (summed over processes: an upper bound)",
      goneAfterS: round((performance.now() - waitStart) / 1000, 1),
      processesLeft: left,
      log: readFileSync(`${dir}/server.log`, "utf8").includes("received fast shutdown request")
        ? "fast shutdown"
        : "no shutdown in the log",
    });
  } finally {
    await cleanup(dir);
  }
}

async function killLoopCase(context: BenchContext): Promise<void> {
  const seconds = envNumber("OPTCHAT_BENCH_EMBEDDED_SECONDS", 30, { min: 5 });
  const killSeconds = envNumber("OPTCHAT_BENCH_EMBEDDED_KILL_SECONDS", 5, { min: 1 });
  const writersCount = envNumber("OPTCHAT_BENCH_EMBEDDED_WRITERS", 3, { min: 1, integer: true });
  const dir = scratchDir("kill");
  const env = { ...envFor(dir), OPTCHAT_DATABASE_RETRY_MS: "30000", OPTCHAT_SUMMARIZER: "fake" };
  const committed = new Set<string>();
  let failedCalls = 0;
  let writerNumber = 0;
  const writers: ChildProcess[] = [];
  const exits: Promise<void>[] = [];
  const startWriter = (remaining: number) => {
    const name = `w${writerNumber++}`;
    const child = spawn(
      process.execPath,
      ["--import", "tsx", `${ROOT}scripts/bench/embedded-writer.ts`, name, String(Math.max(1, remaining))],
      { cwd: ROOT, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "inherit"] },
    );
    let buffer = "";
    child.stdout?.on("data", (chunk) => {
      buffer += chunk;
      const lines = buffer.split("\n");
      buffer = lines.pop() ?? "";
      for (const line of lines) {
        if (!line.trim()) continue;
        const event = JSON.parse(line) as { committed?: string; failed?: string };
        if (event.committed) committed.add(event.committed);
        if (event.failed) failedCalls += 1;
      }
    });
    exits.push(new Promise((resolve) => child.on("close", () => resolve())));
    return child;
  };
  try {
    startedMs(await cli(["db", "start", "--json"], env));
    const started = Date.now();
    for (let w = 0; w < writersCount; w++) writers.push(startWriter(seconds));
    let serverKills = 0;
    let writerKills = 0;
    for (let period = 1; Date.now() - started < seconds * 1000 && !context.signal.aborted; period++) {
      await sleep(killSeconds * 1000);
      const pid = postmasterPid(settingsOf(dir));
      if (pid !== undefined) {
        try {
          process.kill(pid, "SIGKILL");
          serverKills += 1;
        } catch {}
      }
      if (period % 2 === 0) {
        const victim = period % writers.length;
        writers[victim]?.kill("SIGKILL");
        writerKills += 1;
        writers[victim] = startWriter(seconds - (Date.now() - started) / 1000);
      }
    }
    await Promise.all(exits);
    // Every record a writer saw committed, after the last kill: the next client starts the server and it recovers.
    startedMs(await cli(["db", "start", "--json"], env));
    const client = new pg.Client({ connectionString: embeddedUrl(settingsOf(dir).socketDir) });
    await client.connect();
    const { rows } = await client.query<{ event_key: string }>("SELECT event_key FROM optchat.records");
    await client.end();
    const stored = new Set(rows.map((row) => decodeURIComponent(row.event_key.split("/")[1] ?? "")));
    const lost = [...committed].filter((id) => !stored.has(id));
    emit(BENCH, "kill-loop", {
      seconds,
      writers: writersCount,
      killEverySeconds: killSeconds,
      serverKills,
      writerKills,
      committedRecords: committed.size,
      storedRecords: rows.length,
      lostRecords: lost.length,
      failedCalls,
      targets: { lostRecords: 0 },
    });
    if (lost.length > 0) note(`kill-loop: lost ${lost.slice(0, 10).join(", ")}`);
  } finally {
    for (const writer of writers) if (writer.exitCode === null) writer.kill("SIGKILL");
    await cleanup(dir);
  }
}

async function demoCase(): Promise<void> {
  const dir = scratchDir("demo");
  const env = { ...envFor(dir, 5), DATABASE_URL: "" };
  try {
    const results: Record<string, unknown> = {};
    for (const label of ["cold", "warm"]) {
      const result = await run("npm", ["run", "demo"], env);
      if (result.code !== 0) throw new Error(`npm run demo (${label}) failed: ${result.stderr.slice(-2000)}`);
      results[`${label}S`] = round(result.ms / 1000, 1);
      results[`${label}ReadyMs`] = Number(/ready in (\d+) ms/.exec(result.stdout)?.[1] ?? Number.NaN);
    }
    emit(BENCH, "demo", results);
  } finally {
    await cleanup(`${dir}-demo`);
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function runEmbeddedBench(context: BenchContext): Promise<void> {
  const cases = (process.env.OPTCHAT_BENCH_EMBEDDED_CASES ?? "start,idle,kill-loop").split(",").map((c) => c.trim());
  for (const name of cases) {
    if (context.signal.aborted) return;
    note(`embedded: ${name}`);
    if (name === "start") await startCase();
    else if (name === "idle") await idleCase();
    else if (name === "kill-loop") await killLoopCase(context);
    else if (name === "demo") await demoCase();
    else throw new Error(`unknown embedded case ${name}; known: start, idle, kill-loop, demo`);
  }
}
