import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, describe, expect, inject, it } from "vitest";
import { importJsonl } from "../../src/memory/import.js";
import { startWorker } from "../../src/memory/worker.js";
import { collect, freshDatabaseName, ROOT, runCli, useTestMemory } from "../helpers.js";

/**
 * docs/backup.md (moved from the README): the whole memory dumped with pg_dump and restored with pg_restore into an empty
 * database is the same memory (the same export, audits passing, nothing left to migrate).
 */

const source = useTestMemory();
const restored = freshDatabaseName();
const scratch = mkdtempSync(join(tmpdir(), "optchat-backup-"));
afterAll(async () => {
  await restored.drop();
  rmSync(scratch, { recursive: true, force: true });
});

async function run(command: string, args: string[]) {
  const result = await collect(spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] }));
  expect(result.code, `${command}: ${result.stderr}`).toBe(0);
  return result;
}

/**
 * Why this machine's pg_dump cannot back up the test server, or undefined. A machine with Node alone has none (the
 * embedded server's binaries include no pg_dump), and a pg_dump older than the server refuses it.
 */
async function pgDumpProblem(): Promise<string | undefined> {
  const version = await collect(spawn("pg_dump", ["--version"], { stdio: ["ignore", "pipe", "pipe"] })).catch(
    (error: Error) => ({ code: 1, stdout: "", stderr: error.message }),
  );
  const dumpMajor = Number(/(\d+)\.\d+/.exec(version.stdout)?.[1]);
  if (version.code !== 0 || !dumpMajor) return `no usable pg_dump (${version.stderr.trim().split("\n").at(-1)})`;
  const serverMajor = Math.floor(
    Number((await source.memory.pool.query("SHOW server_version_num")).rows[0]?.server_version_num) / 10_000,
  );
  return dumpMajor < serverMajor ? `pg_dump ${dumpMajor} is older than the server (${serverMajor})` : undefined;
}

describe("backup and restore with pg_dump and pg_restore", () => {
  it("restores the whole memory into an empty database, as it was", async (context) => {
    const problem = await pgDumpProblem();
    if (problem) {
      // A Node-only machine (the embedded server) has no pg_dump; CI must have one.
      if (process.env.CI === "true") throw new Error(`backup test needs pg_dump: ${problem}`);
      process.stderr.write(`tests/integration/backup.test.ts: SKIPPED, ${problem}\n`);
      context.skip();
    }
    const lines = readFileSync(join(ROOT, "tests/fixtures/import-small.jsonl"), "utf8").split("\n");
    await importJsonl(source.memory, lines);
    const worker = await startWorker(source.memory, source.config, () => {});
    try {
      for (const { session_id } of (await source.memory.pool.query("SELECT session_id FROM optchat.sessions")).rows) {
        await source.memory.settle(session_id, { timeoutMs: 60_000 });
      }
    } finally {
      await worker.stop();
    }

    const dump = join(scratch, "optchat.dump");
    await run("pg_dump", ["--format=custom", `--file=${dump}`, source.url]);
    const admin = new pg.Client({ connectionString: inject("adminUrl") });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${restored.name}`);
    await admin.end();
    await run("pg_restore", ["--no-owner", "--exit-on-error", `--dbname=${restored.url}`, dump]);

    const env = (url: string) => ({ DATABASE_URL: url });
    const migrate = await runCli(["migrate", "--json"], env(restored.url));
    expect(JSON.parse(migrate.stdout)).toMatchObject({ ok: true, applied: [] });
    const audit = await runCli(["audit", "--json"], env(restored.url));
    expect(JSON.parse(audit.stdout).ok, audit.stdout).toBe(true);
    const [before, after] = await Promise.all([
      runCli(["export", "--jsonl"], env(source.url)),
      runCli(["export", "--jsonl"], env(restored.url)),
    ]);
    expect(after.stdout.length).toBeGreaterThan(0);
    expect(after.stdout).toBe(before.stdout);
    const [statusBefore, statusAfter] = await Promise.all([
      runCli(["status", "--json"], env(source.url)),
      runCli(["status", "--json"], env(restored.url)),
    ]);
    expect(JSON.parse(statusAfter.stdout).tables).toEqual(JSON.parse(statusBefore.stdout).tables);
  }, 120_000);
});
