import pg from "pg";
import { afterAll, describe, expect, inject, it } from "vitest";
import { type ModelServer, startModelServer } from "../../scripts/model-server.js";
import { startWorker } from "../../src/memory/worker.js";
import {
  eventually,
  finishTurnNeedingSummary,
  freshDatabaseName,
  runCli,
  useTestMemory,
  useWorkerProcesses,
  waitForIdleQueues,
} from "../helpers.js";

/**
 * `optchat status` leads with a verdict (issue 37 item 3): one test per verdict, each against real processes (the CLI,
 * `optchat worker`, a model server on the wire). Waits are made old by moving the rows' times back, not by sleeping.
 */

const db = useTestMemory();
const workers = useWorkerProcesses(db);
const created: { drop(): Promise<void> }[] = [];
let model: ModelServer | undefined;

afterAll(async () => {
  await model?.close();
  for (const d of created) await d.drop();
});

const status = async (env: Record<string, string> = {}) => runCli(["status"], { DATABASE_URL: db.url, ...env });
const statusJson = async () => JSON.parse((await runCli(["status", "--json"], { DATABASE_URL: db.url })).stdout);

/** Every job waiting now, and every worker's beat, moved `minutes` into the past. */
async function age(minutes: number): Promise<void> {
  await db.memory.pool.query(
    `UPDATE pgboss.job SET start_after = start_after - $1::int * interval '1 minute',
                           created_on = created_on - $1::int * interval '1 minute'
      WHERE name LIKE 'optchat-%' AND state IN ('created', 'retry')`,
    [minutes],
  );
  await db.memory.pool.query(
    "UPDATE optchat.compactor_workers SET last_beat_at = last_beat_at - $1::int * interval '1 minute'",
    [minutes],
  );
}

async function waitingJobs(): Promise<number> {
  const { rows } = await db.memory.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pgboss.job WHERE name LIKE 'optchat-%' AND state IN ('created', 'retry')",
  );
  return rows[0]?.n ?? 0;
}

describe("optchat status: not set up", () => {
  it("says the database is unreachable, and how to fix it", async () => {
    const result = await runCli(["status"], { DATABASE_URL: "postgres://postgres@127.0.0.1:1/optchat" });
    expect(result.code).toBe(1);
    const lines = result.stdout.split("\n");
    expect(lines[0]).toMatch(/^verdict {4}not set up: database unreachable at 127\.0\.0\.1:1\/optchat: .*ECONNREFUSED/);
    expect(lines[1]).toBe("  fix      start PostgreSQL or point DATABASE_URL at a reachable server");
  });

  it("says the database does not exist, then that its schema is not migrated, naming the command", async () => {
    const missing = freshDatabaseName();
    created.push(missing);
    const none = await runCli(["status", "--json"], { DATABASE_URL: missing.url });
    expect(none.code).toBe(1);
    expect(JSON.parse(none.stdout)).toMatchObject({
      ok: false,
      verdict: {
        state: "not set up",
        reasons: [{ cause: "no-database", fix: "run `optchat migrate` (it creates the database and its schema)" }],
      },
      error: { code: "DATABASE_UNAVAILABLE" },
    });

    const admin = new pg.Client({ connectionString: inject("adminUrl") });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${missing.name}`);
    await admin.end();
    const empty = await runCli(["status"], { DATABASE_URL: missing.url });
    expect(empty.code).toBe(1);
    expect(empty.stdout.split("\n").slice(0, 2)).toEqual([
      "verdict    not set up: schema not migrated (no optchat tables)",
      "  fix      run `optchat migrate`",
    ]);
    expect(empty.stderr).toContain("SCHEMA_OUT_OF_DATE");
  });
});

describe("optchat status on a database that is set up", () => {
  it("says working while an `optchat worker` process is alive, with its heartbeat and the last turn's lag", async () => {
    const worker = await workers.start();
    const pid = worker.child.pid;
    await finishTurnNeedingSummary(db.memory, {
      hostSessionId: "ses_working",
      projectId: "p",
      theme: "broker",
      day: 1,
    });
    await waitForIdleQueues(db.memory.pool);
    // The jobs done are written with the next beat (every 5 s).
    const result = await eventually(
      async () => {
        const r = await status();
        return /\): alive, beat \d+ s ago; started \S+; [1-9]\d* job\(s\) done/.test(r.stdout) ? r : undefined;
      },
      30_000,
      "a beat with the jobs done",
    );
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout.split("\n");
    expect(lines[0]).toBe("verdict    working: 1 worker alive, nothing waits");
    expect(result.stdout).toMatch(/\nworkers {4}1 alive\n/);
    expect(result.stdout).toMatch(
      new RegExp(
        `\\n {2}- optchat worker pid ${pid} on \\S+ \\(fake-extractive/1\\): alive, beat \\d+ s ago; started \\S+; [1-9]\\d* job\\(s\\) done`,
      ),
    );
    expect(result.stdout).toMatch(/\nwaiting {4}no job waits for a worker\n/);
    expect(result.stdout).toMatch(
      /\npublished {2}the last turn \(\S+ t1, finished \S+\) was published [\d.]+ s after it ended\n/,
    );
    expect(result.stdout).toMatch(/\nspend {6}today \(\d{4}-\d\d-\d\d UTC\): \d+ compactor call\(s\)/);
    const json = await statusJson();
    expect(json.verdict.state).toBe("working");
    expect(json.compactor.workers).toEqual([
      expect.objectContaining({ runsIn: "optchat worker", pid, alive: true, paused: false, stoppedAt: null }),
    ]);

    // A clean stop marks the row stopped: the worker is no longer counted alive.
    worker.child.kill("SIGTERM");
    expect((await worker.exited).code).toBe(0);
    const after = await status();
    expect(after.code).toBe(0);
    expect(after.stdout.split("\n")[0]).toBe(
      "verdict    working: no worker running (one starts with OpenCode when there is work), nothing waits",
    );
    expect(after.stdout).toMatch(
      new RegExp(`- optchat worker pid ${pid} on \\S+ \\(fake-extractive/1\\): stopped \\d+ s ago`),
    );
  });

  it("says stalled when jobs have waited with no worker alive: for how long, since when, and what to start", async () => {
    expect(workers.all.filter((w) => w.child.exitCode === null)).toEqual([]);
    const turn = await finishTurnNeedingSummary(db.memory, {
      hostSessionId: "ses_stalled",
      projectId: "p",
      theme: "queue",
      day: 2,
    });
    expect(await waitingJobs()).toBeGreaterThan(0);
    // Just queued: pending, not stalled.
    expect((await status()).stdout.split("\n")[0]).toMatch(
      /^verdict {4}working: no worker running .*, (1 job waits|\d+ jobs wait)/,
    );

    await age(10);
    const result = await status();
    expect(result.code).toBe(3);
    const lines = result.stdout.split("\n");
    expect(lines[0]).toMatch(
      /^verdict {4}stalled: no compactor worker alive for 6\d\d s; (1 job waits|\d+ jobs wait), the oldest since \d{4}-\d\d-\d\dT\S+Z \(6\d\d s\)$/,
    );
    expect(lines[1]).toBe(
      "  fix      start `optchat worker`, or prompt in OpenCode with this plugin (its embedded worker starts when jobs wait)",
    );
    expect(result.stdout).not.toMatch(/OPTCHAT_EMBEDDED_WORKER/);
    expect(result.stdout).toMatch(/\nwaiting {4}\d+ job\(s\) wait for a worker, the oldest since \S+ \(6\d\d s\)\n/);
    expect(result.stdout).toMatch(
      /\npublished {2}the last turn \(\S+ t1, finished \S+\) is not published yet: [\d.]+ s since it ended\n/,
    );

    // inspect says it too, readable, the session's verdict first.
    const inspect = await runCli(["inspect", turn.sessionId], { DATABASE_URL: db.url });
    expect(inspect.code, inspect.stderr).toBe(0);
    const inspected = inspect.stdout.split("\n");
    expect(inspected[0]).toMatch(
      /^verdict {4}stalled: no compactor worker alive for 6\d\d s; .*; start `optchat worker`/,
    );
    expect(inspected[1]).toMatch(/^compactor {2}stalled: no compactor worker alive/);
    expect(inspect.stdout).toMatch(new RegExp(`\\nsession {4}${turn.sessionId} \\(test session ses_stalled\\)`));
    const inspectJson = JSON.parse(
      (await runCli(["inspect", turn.sessionId, "--json"], { DATABASE_URL: db.url })).stdout,
    );
    expect(inspectJson.health.verdict).toBe(inspectJson.verdict);
    expect(inspectJson.compactor.verdict.reasons[0].cause).toBe("no-worker");

    // A worker starts: the jobs run and the verdict is working again.
    await workers.start();
    await waitForIdleQueues(db.memory.pool);
    const recovered = await status();
    expect(recovered.code).toBe(0);
    expect(recovered.stdout.split("\n")[0]).toBe("verdict    working: 1 worker alive, nothing waits");
    for (const w of workers.all) w.child.kill("SIGTERM");
    await Promise.all(workers.all.map((w) => w.exited));
  });

  it("says stalled when the only workers alive are paused", async () => {
    const worker = await startWorker(db.memory, db.config, () => {}, { runsIn: "local server" });
    try {
      await worker.pause();
      await finishTurnNeedingSummary(db.memory, {
        hostSessionId: "ses_paused",
        projectId: "p",
        theme: "cache",
        day: 3,
      });
      await age(5);
      // The paused worker beats on: its beat was moved back, the next one is due within 5 s.
      const result = await eventually(
        async () => {
          const r = await status();
          return r.code === 3 && r.stdout.split("\n")[0]?.includes("paused") ? r : undefined;
        },
        30_000,
        "a paused verdict",
      );
      expect(result.code).toBe(3);
      expect(result.stdout.split("\n")[0]).toMatch(
        /^verdict {4}stalled: 1 worker alive but paused \(the local server pauses its worker while OpenCode processes run\); (1 job waits|\d+ jobs wait)/,
      );
      expect(result.stdout).toMatch(
        /- local server pid \d+ on \S+ \(fake-extractive\/1\): alive, paused, beat \d+ s ago/,
      );
      await worker.resume();
      await waitForIdleQueues(db.memory.pool);
      expect((await status()).code).toBe(0);
    } finally {
      await worker.stop();
    }
  });

  it("says stalled when the compactor model keeps failing, with the model's last error", async () => {
    model = await startModelServer();
    model.failNext(100_000, { status: 401 });
    const worker = await workers.start({
      OPTCHAT_SUMMARIZER: "openai-compatible",
      OPTCHAT_SUMMARIZER_URL: model.url,
      OPTCHAT_SUMMARIZER_MODEL: "optchat-compactor",
      OPTCHAT_FAILURE_RETRY_SECONDS: "1",
    });
    // A message longer than a line: its leaf needs the model (small ones are published as they are, issue 39).
    const session = await db.memory.openSession({ host: "test", hostSessionId: "ses_model", projectId: "p" });
    const ctx = { sessionId: session.sessionId, turnId: "t1" };
    await db.memory.admitTurn(ctx);
    await db.memory.ingest({
      sessionId: session.sessionId,
      turnId: "t1",
      kind: "user",
      finalization: { hostSessionId: "ses_model", messageId: "m0" },
      occurredAt: new Date(Date.UTC(2026, 10, 4, 7)).toISOString(),
      content: "deploy the service to the staging cluster first. ".repeat(60),
    });
    await db.memory.finishTurn(ctx, "completed");
    // The verdict as soon as the failure is recorded; the worker's own last error with its next beat.
    const result = await eventually(
      async () => {
        const r = await status();
        return r.code === 3 && /last error: .*401/.test(r.stdout) ? r : undefined;
      },
      60_000,
      "a stalled verdict and the worker's last error",
    );
    const lines = result.stdout.split("\n");
    expect(lines[0]).toMatch(
      /^verdict {4}stalled: the compactor model fails: \d+ summar(y|ies) and \d+ publications? keep failing, last \d+ s ago: .*401/,
    );
    expect(lines[1]).toMatch(
      /^ {2}fix {6}fix the compactor model \(OPTCHAT_SUMMARIZER, .*`optchat doctor` makes one test call$/,
    );
    expect(result.stdout).toMatch(
      new RegExp(
        `- optchat worker pid ${worker.child.pid} on \\S+ \\(openai-compatible:optchat-compactor@[^)]+\\): alive, .*; last error: .*401`,
      ),
    );
    expect(model.requests().filter((r) => r.kind === "compactor").length).toBeGreaterThan(0);
    worker.child.kill("SIGTERM");
    await worker.exited;
  });
});
