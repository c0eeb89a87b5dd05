/**
 * `bench publication`: how long a finished turn takes to become shared memory (its publication), with real processes:
 * 8 writer processes (scripts/bench/publication-writer.ts, each one session of one scope, turns through the public
 * service API) and 2 worker processes (`optchat worker`, the instant fake summarizer).
 *
 * Cases:
 *   steady      the writers write for OPTCHAT_BENCH_PUBLICATION_SECONDS, then every finished turn is waited for
 *   kill-loop   the same while one worker is killed (SIGKILL) every OPTCHAT_BENCH_PUBLICATION_KILL_SECONDS and a
 *               replacement started at once (a job the killed worker held runs again after its heartbeat lapses)
 *
 * Reported per case: publication lag (finishTurn's commit time → the publication's, both the database's clock)
 * p50/p99/max over every turn, split into the time until the publication was ready (turn finished, cover built,
 * the session's previous publication done) and the time from ready to published; turns not published by the end of the drain; publication jobs per turn, the jobs a
 * publication job made for its own turn (reschedules: data.waits), pg-boss retries; and the order check: adjacent
 * turns of one session (admission order) whose publications came out the other way round.
 *
 * Environment:
 *   OPTCHAT_BENCH_PUBLICATION_SECONDS        writing time per case (default 40)
 *   OPTCHAT_BENCH_PUBLICATION_WRITERS        writer processes (default 8)
 *   OPTCHAT_BENCH_PUBLICATION_WORKERS        worker processes (default 2)
 *   OPTCHAT_BENCH_PUBLICATION_THINK_MS       mean pause between a writer's turns (default 1000)
 *   OPTCHAT_BENCH_PUBLICATION_KILL_SECONDS   kill-loop period (default 4)
 *   OPTCHAT_BENCH_PUBLICATION_DRAIN_SECONDS  longest wait for the last publications after writing (default 400)
 *   OPTCHAT_BENCH_PUBLICATION_CASES          comma-separated subset of the cases (default steady,kill-loop)
 */
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { migrateAll } from "../../src/memory/migrate.js";
import { type BenchContext, emit, envNumber, note, round, summarizeLatencies, withScratchDatabase } from "./common.js";

const BENCH = "publication";
const ROOT = fileURLToPath(new URL("../..", import.meta.url));

interface Settings {
  readonly seconds: number;
  readonly writers: number;
  readonly workers: number;
  readonly thinkMs: number;
  readonly killSeconds: number;
  readonly drainSeconds: number;
  readonly cases: readonly string[];
}

function readSettings(): Settings {
  return {
    seconds: envNumber("OPTCHAT_BENCH_PUBLICATION_SECONDS", 40, { min: 1 }),
    writers: envNumber("OPTCHAT_BENCH_PUBLICATION_WRITERS", 8, { min: 1, integer: true }),
    workers: envNumber("OPTCHAT_BENCH_PUBLICATION_WORKERS", 2, { min: 1, integer: true }),
    thinkMs: envNumber("OPTCHAT_BENCH_PUBLICATION_THINK_MS", 1000),
    killSeconds: envNumber("OPTCHAT_BENCH_PUBLICATION_KILL_SECONDS", 4, { min: 0.5 }),
    drainSeconds: envNumber("OPTCHAT_BENCH_PUBLICATION_DRAIN_SECONDS", 400, { min: 1 }),
    cases: (process.env.OPTCHAT_BENCH_PUBLICATION_CASES ?? "steady,kill-loop").split(",").map((c) => c.trim()),
  };
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done);
  });

function startProcess(args: readonly string[], env: Record<string, string>): ChildProcess {
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout?.resume();
  let stderr = "";
  child.stderr?.on("data", (chunk) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  child.on("close", (code, signal) => {
    if (code !== 0 && signal === null) note(`process ${args.slice(-4).join(" ")} exited ${code}: ${stderr}`);
  });
  return child;
}

/** Starts `optchat worker` and resolves once it printed its ready event. */
async function startWorker(databaseUrl: string): Promise<ChildProcess> {
  const child = startProcess([`${ROOT}bin/optchat.mjs`, "worker", "--json"], {
    DATABASE_URL: databaseUrl,
    OPTCHAT_SUMMARIZER: "fake",
    OPTCHAT_WORKER_CONCURRENCY: "8",
  });
  await new Promise<void>((resolve, reject) => {
    let buffer = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      buffer += chunk.toString();
      if (/"type":"ready"/.test(buffer)) resolve();
      if (buffer.length > 100_000) buffer = buffer.slice(-1000);
    });
    child.on("close", (code) => reject(new Error(`worker exited (${code}) before it was ready`)));
  });
  return child;
}

function exited(child: ChildProcess): Promise<void> {
  return child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise((resolve) => child.on("close", () => resolve()));
}

interface CaseResult {
  readonly turns: number;
  readonly unpublished: number;
  readonly lagsMs: number[];
  readonly readyMs: number[];
  readonly afterReadyMs: number[];
  readonly publishJobs: number;
  readonly reschedules: number;
  readonly retries: number;
  readonly outOfOrder: number;
  readonly drainSeconds: number;
}

async function measure(pool: pg.Pool): Promise<Omit<CaseResult, "drainSeconds">> {
  // Where the lag goes: a publication is ready once its turn is finished, its cover is built and the session's
  // previous publication exists; `ready_ms` is that moment after finishTurn, `after_ready_ms` the rest (queue, commit).
  const lags = await pool.query<{ lag_ms: number | null; ready_ms: number | null; after_ready_ms: number | null }>(
    `WITH pubs AS (
       SELECT t.session_id, t.finished_at, p.published_at,
              greatest(t.finished_at,
                       (SELECT max(n.built_at) FROM unnest(p.cover_levels, p.cover_idxs) AS c(level, idx)
                          JOIN optchat.trees tr ON tr.kind = 'session' AND tr.session_id = p.session_id AND tr.generation = p.generation
                          JOIN optchat.nodes n ON n.tree_id = tr.tree_id AND n.level = c.level AND n.idx = c.idx),
                       (SELECT max(q.published_at) FROM optchat.publications q JOIN optchat.turns u
                            ON u.session_id = q.session_id AND u.generation = q.generation AND u.turn_id = q.turn_id
                         WHERE q.session_id = t.session_id AND u.admitted_at < t.admitted_at)) AS ready_at
         FROM optchat.turns t
         LEFT JOIN optchat.publications p ON p.session_id = t.session_id AND p.generation = t.generation AND p.turn_id = t.turn_id
        WHERE t.state <> 'active' AND t.publishes)
     SELECT extract(epoch FROM (published_at - finished_at)) * 1000 AS lag_ms,
            extract(epoch FROM (ready_at - finished_at)) * 1000 AS ready_ms,
            extract(epoch FROM (published_at - ready_at)) * 1000 AS after_ready_ms
       FROM pubs`,
  );
  const jobs = await pool.query<{ jobs: number; reschedules: number; retries: number }>(
    `SELECT count(*)::int AS jobs, count(*) FILTER (WHERE data ? 'waits')::int AS reschedules,
            coalesce(sum(retry_count), 0)::int AS retries
       FROM pgboss.job WHERE name = 'optchat-publish'`,
  );
  // Turns are numbered t0, t1, … per writer in admission order; a publication number that goes down between two
  // consecutive turns of one session is a session's turns published out of their order.
  const order = await pool.query<{ out_of_order: number }>(
    `SELECT count(*)::int AS out_of_order FROM (
       SELECT p.publication_seq < lag(p.publication_seq) OVER (PARTITION BY t.session_id ORDER BY t.admitted_at) AS inverted
         FROM optchat.turns t JOIN optchat.publications p
           ON p.session_id = t.session_id AND p.generation = t.generation AND p.turn_id = t.turn_id
     ) x WHERE inverted`,
  );
  const lagsMs = lags.rows.flatMap((row) => (row.lag_ms === null ? [] : [Number(row.lag_ms)]));
  const readyMs = lags.rows.flatMap((row) => (row.ready_ms === null ? [] : [Number(row.ready_ms)]));
  const afterReadyMs = lags.rows.flatMap((row) => (row.after_ready_ms === null ? [] : [Number(row.after_ready_ms)]));
  return {
    readyMs,
    afterReadyMs,
    turns: lags.rows.length,
    unpublished: lags.rows.length - lagsMs.length,
    lagsMs,
    publishJobs: jobs.rows[0]?.jobs ?? 0,
    reschedules: jobs.rows[0]?.reschedules ?? 0,
    retries: jobs.rows[0]?.retries ?? 0,
    outOfOrder: order.rows[0]?.out_of_order ?? 0,
  };
}

async function runCase(
  context: BenchContext,
  settings: Settings,
  caseName: string,
  databaseUrl: string,
): Promise<CaseResult> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  pool.on("error", () => {});
  const workers: ChildProcess[] = [];
  const writers: ChildProcess[] = [];
  try {
    for (let w = 0; w < settings.workers; w++) workers.push(await startWorker(databaseUrl));
    for (let w = 0; w < settings.writers; w++) {
      writers.push(
        startProcess(
          [
            "--import",
            "tsx",
            `${ROOT}scripts/bench/publication-writer.ts`,
            databaseUrl,
            String(w),
            String(settings.seconds),
            String(settings.thinkMs),
          ],
          {},
        ),
      );
    }
    const writing = Promise.all(writers.map(exited));
    let kills = 0;
    const killer = new AbortController();
    const killLoop =
      caseName === "kill-loop"
        ? (async () => {
            for (let victim = 0; !killer.signal.aborted; victim = (victim + 1) % workers.length) {
              await sleep(settings.killSeconds * 1000, killer.signal);
              if (killer.signal.aborted) break;
              workers[victim]?.kill("SIGKILL");
              kills += 1;
              workers[victim] = await startWorker(databaseUrl);
            }
          })()
        : Promise.resolve();
    await writing;
    note(`${caseName}: writers done; waiting for the last publications`);
    const drainStart = performance.now();
    const deadline = Date.now() + settings.drainSeconds * 1000;
    while (Date.now() < deadline && !context.signal.aborted) {
      const { rows } = await pool.query<{ pending: number }>(
        `SELECT count(*)::int AS pending FROM optchat.turns t
          WHERE t.state <> 'active' AND t.publishes
            AND NOT EXISTS (SELECT 1 FROM optchat.publications p
                             WHERE p.session_id = t.session_id AND p.generation = t.generation AND p.turn_id = t.turn_id)`,
      );
      if ((rows[0]?.pending ?? 1) === 0) break;
      await sleep(500, context.signal);
    }
    const drainSeconds = (performance.now() - drainStart) / 1000;
    killer.abort();
    await killLoop;
    if (kills > 0) note(`${caseName}: ${kills} workers killed`);
    return { ...(await measure(pool)), drainSeconds };
  } finally {
    for (const child of [...writers, ...workers]) if (child.exitCode === null) child.kill("SIGKILL");
    await Promise.all([...writers, ...workers].map(exited));
    await pool.end();
  }
}

export async function runPublicationBench(context: BenchContext): Promise<void> {
  const settings = readSettings();
  for (const caseName of settings.cases) {
    if (context.signal.aborted) return;
    if (caseName !== "steady" && caseName !== "kill-loop") throw new Error(`unknown publication case ${caseName}`);
    await withScratchDatabase(context.serverUrl, `pub_${caseName.replace("-", "_")}`, async ({ url: databaseUrl }) => {
      await migrateAll(databaseUrl);
      note(`${caseName}: ${settings.writers} writers, ${settings.workers} workers, ${settings.seconds} s of turns`);
      const result = await runCase(context, settings, caseName, databaseUrl);
      const lag = summarizeLatencies(result.lagsMs);
      emit(BENCH, caseName, {
        writers: settings.writers,
        workers: settings.workers,
        seconds: settings.seconds,
        thinkMs: settings.thinkMs,
        ...(caseName === "kill-loop" ? { killEverySeconds: settings.killSeconds } : {}),
        turns: result.turns,
        unpublished: result.unpublished,
        lagP50Ms: lag.p50Ms,
        lagP99Ms: lag.p99Ms,
        lagMaxMs: lag.maxMs,
        readyAfterFinishP50Ms: summarizeLatencies(result.readyMs).p50Ms,
        readyAfterFinishP99Ms: summarizeLatencies(result.readyMs).p99Ms,
        publishedAfterReadyP50Ms: summarizeLatencies(result.afterReadyMs).p50Ms,
        publishedAfterReadyP99Ms: summarizeLatencies(result.afterReadyMs).p99Ms,
        publishJobsPerTurn: result.turns > 0 ? round(result.publishJobs / result.turns, 2) : null,
        reschedules: result.reschedules,
        reschedulesPerMinute: round((result.reschedules * 60) / (settings.seconds + result.drainSeconds), 1),
        jobRetries: result.retries,
        outOfOrderTurns: result.outOfOrder,
        drainSeconds: round(result.drainSeconds, 1),
        targets: { lagP50Ms: 500, lagP99Ms: caseName === "kill-loop" ? 15_000 : 2000 },
        machine: { cpus: context.machine.cpus, loadAverage1m: context.machine.loadAverage1m },
      });
    });
  }
}
