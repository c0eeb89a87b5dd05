/**
 * `bench run-only` (issue 37): a soak of `opencode run`s only, the README's quick start: no `optchat worker`, no
 * long-lived OpenCode. RUNS runs (default 200), two at a time, each in one of 3 projects (git repositories with their
 * own root commit, so their own scopes) under one of 2 configurations (their local servers differ: idle 8 s and 12 s);
 * between runs, at random, a configuration's local server is sent SIGTERM (5%) or SIGKILL (3%), or nothing runs for
 * 14 s (5%, so servers idle out). Every turn must be published: the local server's own worker publishes it between
 * runs (plugin/transport/local-server/workers.ts).
 *
 * Reported: the publication lag of every turn (its publication's time minus the turn's end, or minus the next run's
 * start in its configuration when its server was killed in between: no process was running then), p50/p99 against
 * the publication bench's target (p99 <= 2 s); turns left unpublished and jobs left unfinished at the end; local
 * server processes seen and the most running at once per configuration (target 1); optchat processes left 10 s after
 * the last idle time (target 0); runs that failed.
 * Environment: OPTCHAT_BENCH_RUN_ONLY_RUNS (default 200), OPTCHAT_BENCH_RUN_ONLY_SEED (default 37).
 */
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { migrateAll } from "../../src/memory/migrate.js";
import { startModelServer } from "../model-server.js";
import {
  cleanupOpencodeEnv,
  createOpencodeEnv,
  localServerPids,
  type OpencodeEnv,
  runOpencode,
} from "../opencode-harness.js";
import {
  type BenchContext,
  emit,
  envNumber,
  note,
  round,
  seededRandom,
  summarizeLatencies,
  withScratchDatabase,
} from "./common.js";

const ROOT = new URL("../..", import.meta.url).pathname;
const IDLE_SECONDS = [8, 12] as const;
const PROJECTS = 3;

interface Variant {
  readonly env: OpencodeEnv;
  readonly config: number;
}

interface RunRecord {
  readonly config: number;
  readonly startedAt: number;
  readonly sessionId: string | undefined;
  readonly ok: boolean;
}

export async function runRunOnlyBench(context: BenchContext): Promise<void> {
  await withScratchDatabase(context.serverUrl, "run_only", ({ url }) => soak(context, url));
}

async function soak(context: BenchContext, url: string): Promise<void> {
  const runs = envNumber("OPTCHAT_BENCH_RUN_ONLY_RUNS", 200, { min: 1, integer: true });
  const random = seededRandom(envNumber("OPTCHAT_BENCH_RUN_ONLY_SEED", 37, { integer: true }));
  await migrateAll(url);
  const model = await startModelServer();
  const db = new pg.Pool({ connectionString: url, max: 2 });
  const variants: Variant[] = [];
  const roots: OpencodeEnv[] = [];
  try {
    // One TMPDIR per configuration: its processes find one local server there, whatever their project.
    const base = await createOpencodeEnv({ modelUrl: model.url });
    roots.push(base);
    const tmp = IDLE_SECONDS.map((_, config) => join(base.root, `tmp-${config}`));
    for (const directory of tmp) mkdirSync(directory, { recursive: true });
    for (let project = 0; project < PROJECTS; project++) {
      for (let config = 0; config < IDLE_SECONDS.length; config++) {
        const env = await createOpencodeEnv({
          modelUrl: model.url,
          pluginPath: join(ROOT, "plugin", "index.ts"),
          pluginOptions: { databaseUrl: url },
          extraEnv: {
            TMPDIR: tmp[config] as string,
            OPTCHAT_LOCAL_SERVER_IDLE_SECONDS: String(IDLE_SECONDS[config]),
          },
          ...(config > 0 ? { shareDataWith: variants[project * IDLE_SECONDS.length]?.env } : {}),
        });
        if (config === 0) gitProject(env.projectDir, project);
        variants.push({ env, config });
        roots.push(env);
      }
    }
    const servers = (config: number) => localServerPids(join(tmp[config] as string, `optchat-${process.getuid?.()}`));
    const most = IDLE_SECONDS.map(() => 0);
    const seen = IDLE_SECONDS.map(() => new Set<number>());
    const sampler = setInterval(() => {
      for (let config = 0; config < IDLE_SECONDS.length; config++) {
        const pids = servers(config);
        for (const pid of pids) seen[config]?.add(pid);
        most[config] = Math.max(most[config] ?? 0, pids.length);
      }
    }, 250);

    const records: RunRecord[] = [];
    const kills: { config: number; at: number }[] = [];
    let next = 0;
    const lane = async () => {
      while (next < runs && !context.signal.aborted) {
        const n = next++;
        const chaos = random();
        const config = Math.floor(random() * IDLE_SECONDS.length);
        if (chaos < 0.05) {
          for (const pid of servers(config)) process.kill(pid, "SIGTERM");
          kills.push({ config, at: Date.now() });
        } else if (chaos < 0.08) {
          for (const pid of servers(config)) process.kill(pid, "SIGKILL");
          kills.push({ config, at: Date.now() });
        } else if (chaos < 0.13) {
          await new Promise((resolve) => setTimeout(resolve, 14_000));
        }
        const variant = variants[Math.floor(random() * PROJECTS) * IDLE_SECONDS.length + config] as Variant;
        const startedAt = Date.now();
        const result = await runOpencode(variant.env, `SOAK-${n} we decided the cache is c${n} REPLY=noted`, {
          timeoutMs: 120_000,
        }).catch((error: unknown) => ({ code: -1, sessionId: undefined, stderr: String(error) }));
        if (result.code !== 0) note(`run ${n} failed (${result.code}): ${result.stderr.slice(-300)}`);
        records.push({ config, startedAt, sessionId: result.sessionId, ok: result.code === 0 });
        if (n % 20 === 0) note(`run-only: ${n} of ${runs} runs`);
      }
    };
    await Promise.all([lane(), lane()]);

    // Every turn published, with no process running any more.
    const sessions = records.filter((r) => r.sessionId).map((r) => r.sessionId as string);
    const deadline = Date.now() + 60_000;
    let unpublished = await countUnpublished(db, sessions);
    while (unpublished > 0 && Date.now() < deadline && !context.signal.aborted) {
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      unpublished = await countUnpublished(db, sessions);
    }
    const lags = await publicationLags(db, records, kills);
    const { rows: jobs } = await db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pgboss.job WHERE name LIKE 'optchat%' AND state < 'completed'",
    );
    // After the longest idle time (and the servers' drain), no optchat process of this soak is left.
    await new Promise((resolve) => setTimeout(resolve, (Math.max(...IDLE_SECONDS) + 10) * 1000));
    clearInterval(sampler);
    const left = IDLE_SECONDS.map((_, config) => servers(config).length).reduce((a, b) => a + b, 0);
    const latency = summarizeLatencies(lags);
    emit("run-only", "soak", {
      runs: records.length,
      runsFailed: records.filter((r) => !r.ok).length,
      turns: sessions.length,
      unpublished,
      unfinishedJobs: jobs[0]?.n ?? 0,
      kills: kills.length,
      publicationLagS: {
        p50: round((latency.p50Ms ?? 0) / 1000),
        p99: round((latency.p99Ms ?? 0) / 1000),
        max: round((latency.maxMs ?? 0) / 1000),
      },
      targetP99S: 2,
      meetsLagTarget: (latency.p99Ms ?? Number.POSITIVE_INFINITY) <= 2_000,
      localServersSeen: seen.map((pids) => pids.size),
      mostLocalServersAtOnce: most,
      processesLeftAfterIdle: left,
    });
  } finally {
    await db.end();
    for (const env of roots.reverse()) await cleanupOpencodeEnv(env).catch(() => undefined);
    await model.close();
  }
}

/** Makes `directory` a git repository with a root commit of its own: OpenCode's project id, so a scope of its own. */
function gitProject(directory: string, project: number): void {
  const git = (...args: string[]) =>
    execFileSync("git", ["-c", "user.name=bench", "-c", "user.email=bench@example.invalid", ...args], {
      cwd: directory,
      stdio: "ignore",
    });
  git("init", "-q");
  git("commit", "-q", "--allow-empty", "-m", `soak project ${project}`);
}

async function countUnpublished(db: pg.Pool, sessions: readonly string[]): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM optchat.turns t JOIN optchat.sessions s USING (session_id)
      WHERE s.host_session_id = ANY($1::text[]) AND t.finished_at IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM optchat.publications p
                         WHERE p.session_id = t.session_id AND p.turn_id = t.turn_id AND p.generation = t.generation)`,
    [sessions],
  );
  return rows[0]?.n ?? 0;
}

/**
 * Milliseconds from each turn's end (or, when its configuration's server was killed after it ended and before it was
 * published, from the next run's start there) to its publication.
 */
async function publicationLags(
  db: pg.Pool,
  records: readonly RunRecord[],
  kills: readonly { config: number; at: number }[],
): Promise<number[]> {
  const bySession = new Map(records.filter((r) => r.sessionId).map((r) => [r.sessionId as string, r]));
  const { rows } = await db.query<{ host: string; finished: Date; published: Date }>(
    `SELECT s.host_session_id AS host, t.finished_at AS finished, p.published_at AS published
       FROM optchat.turns t JOIN optchat.sessions s USING (session_id)
       JOIN optchat.publications p ON p.session_id = t.session_id AND p.turn_id = t.turn_id AND p.generation = t.generation
      WHERE s.host_session_id = ANY($1::text[])`,
    [[...bySession.keys()]],
  );
  return rows.map((row) => {
    const record = bySession.get(row.host) as RunRecord;
    const finished = row.finished.getTime();
    const published = row.published.getTime();
    const killed = kills.some((k) => k.config === record.config && k.at > finished && k.at < published);
    const nextStart = records
      .filter((r) => r.config === record.config && r.startedAt > finished)
      .reduce((first, r) => Math.min(first, r.startedAt), Number.POSITIVE_INFINITY);
    const from = killed && Number.isFinite(nextStart) ? Math.max(finished, nextStart) : finished;
    return Math.max(0, published - from);
  });
}
