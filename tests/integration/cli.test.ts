import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { main } from "../../src/cli/main.js";
import { COMMANDS } from "../../src/cli/registry.js";
import { startWorker } from "../../src/memory/worker.js";
import { findOrRegisterSession } from "../../src/store/sessions.js";
import { collect, ingestEvent, ROOT, runCli, useTestMemory, waitForPublications } from "../helpers.js";

/** Each test runs the CLI as several processes (~1.5 s each idle, 10 s and more at load average ~20): a hang bound. */
const CLI_TEST_TIMEOUT_MS = 180_000;

/** The `optchat` conventions of issue 12 item 4: help, pipes, session ids, scopes. */

const db = useTestMemory();
const OPENCODE_ID = "ses_2319975570014Lzkby7p0TSd";
let optchatId = "";

beforeAll(async () => {
  const session = await db.memory.openSession({ host: "opencode", hostSessionId: OPENCODE_ID, projectId: "prj_cli" });
  optchatId = session.sessionId;
  await db.memory.admitTurn({ sessionId: optchatId, turnId: "msg_1", query: "where is the broker" });
  await db.memory.ingestMany(
    ["where is the broker configured?", "In src/broker.ts, DurableBroker."].map((content, n) =>
      ingestEvent({
        sessionId: optchatId,
        turnId: "msg_1",
        kind: n === 0 ? ("user" as const) : ("assistant" as const),
        host: OPENCODE_ID,
        messageId: `msg_${n + 1}`,
        partId: `prt_${n}`,
        occurredAt: new Date(Date.UTC(2026, 10, 1, 9, 0, n)).toISOString(),
        content,
      }),
    ),
  );
  await db.memory.finishTurn({ sessionId: optchatId, turnId: "msg_1" }, "completed");
  const worker = await startWorker(db.memory, db.config, () => {});
  try {
    await db.memory.settle(optchatId, { timeoutMs: 60_000 });
    // The scope's search below reads published turns: the turn's publication runs after its leaves, so wait for it
    // before the worker stops (in a loaded CI run the worker was stopped first and the search found nothing).
    await waitForPublications(db.memory.pool, 1, 60_000, "the turn published");
  } finally {
    await worker.stop();
  }
});

describe("--help", { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  // An invalid setting and an unreachable server: help must need neither.
  const broken = { OPTCHAT_POOL_SIZE: "lots", DATABASE_URL: "postgres://postgres@127.0.0.1:1/none" };

  it("works on every command, before any setting is read or the database is touched", async () => {
    const written: string[] = [];
    const write = vi.spyOn(process.stdout, "write").mockImplementation((chunk) => {
      written.push(String(chunk));
      return true;
    });
    try {
      for (const command of COMMANDS) {
        written.length = 0;
        expect(await main([command.name, "--help"], broken), command.name).toBe(0);
        expect(written.join(""), command.name).toContain(`Usage:\n  optchat ${command.name}`);
      }
    } finally {
      write.mockRestore();
    }
  });

  it("works from the installed command, as --help, -h and help <command>", async () => {
    for (const args of [
      ["status", "--help"],
      ["worker", "-h"],
      ["help", "worker"],
    ]) {
      const result = await runCli(args, broken);
      expect(result.code, `${args.join(" ")}: ${result.stderr}`).toBe(0);
      expect(result.stdout).toContain(`optchat ${args.includes("worker") ? "worker" : "status"} [`);
      expect(result.stderr).toBe("");
    }
    const unknown = await runCli(["help", "nope"]);
    expect(unknown.code).toBe(2);
  });
});

describe("a closed output pipe", { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it("ends the command quietly, without a stack trace (optchat status | head -1)", async () => {
    for (const args of [["status"], ["status", "--json"], ["view", optchatId], ["help"]]) {
      const child = spawn(process.execPath, [`${ROOT}/bin/optchat.mjs`, ...args], {
        cwd: ROOT,
        env: { ...process.env, DATABASE_URL: db.url },
        stdio: ["ignore", "pipe", "pipe"],
      });
      // The reader is gone before the first line is written: every write fails with EPIPE.
      child.stdout.destroy();
      const result = await collect(child);
      expect(result.stderr, args.join(" ")).not.toMatch(/EPIPE|Unhandled|\n\s+at /);
      expect(result.code, args.join(" ")).toBe(0);
    }
  });

  it("also through a shell pipe into head", async () => {
    const result = await collect(
      spawn("sh", ["-c", `node ${ROOT}/bin/optchat.mjs status | head -1`], {
        cwd: ROOT,
        env: { ...process.env, DATABASE_URL: db.url },
        stdio: ["ignore", "pipe", "pipe"],
      }),
    );
    expect(result.stdout).toMatch(/^verdict {4}working: /);
    expect(result.stdout.trim().split("\n")).toHaveLength(1);
    expect(result.stderr).toBe("");
  });
});

describe("session ids", { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it("gives new sessions an id of their own kind, mem_…, never mistaken for OpenCode's ses_…", () => {
    expect(optchatId).toMatch(/^mem_[0-9a-z]{26}$/);
  });

  it("accepts OpenCode's session id wherever a session is asked for", async () => {
    const env = { DATABASE_URL: db.url };
    const ours = await runCli(["view", optchatId], env);
    const theirs = await runCli(["view", OPENCODE_ID], env);
    expect(ours.code, ours.stderr).toBe(0);
    expect(theirs.code, theirs.stderr).toBe(0);
    expect(theirs.stdout).toBe(ours.stdout);

    const zoom = await runCli(["zoom", OPENCODE_ID, "1+1"], env);
    expect(zoom.code, zoom.stderr).toBe(0);
    expect(zoom.stdout).toContain("In src/broker.ts, DurableBroker.");

    const inspect = await runCli(["inspect", OPENCODE_ID, "--json"], env);
    expect(JSON.parse(inspect.stdout).session.id).toBe(optchatId);

    const search = await runCli(
      ["search", "--scope", "project:prj_cli", "--session", OPENCODE_ID, "broker", "--json"],
      env,
    );
    expect(search.code, search.stderr).toBe(0);
    expect(JSON.parse(search.stdout).hits.length).toBeGreaterThan(0);

    const missing = await runCli(["view", "ses_nobody"], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/SESSION_NOT_FOUND.*optchat session id.*OpenCode session id/);
  });

  it("keeps ids made before the mem_ prefix working", async () => {
    await findOrRegisterSession(
      db.memory.pool,
      {
        sessionId: "ses_0123456789abcdefghjkmnpqrs",
        scopeId: "project:prj_cli",
        host: "import",
        hostSessionId: "legacy",
        projectId: "prj_cli",
        parentSessionId: null,
        title: null,
        visibility: "shared",
      },
      "project",
    );
    const view = await runCli(["view", "ses_0123456789abcdefghjkmnpqrs", "--json"], { DATABASE_URL: db.url });
    expect(view.code, view.stderr).toBe(0);
    expect(JSON.parse(view.stdout).leafCount).toBe(0);
    // And by the imported file's id.
    const byHostId = await runCli(["view", "legacy", "--json"], { DATABASE_URL: db.url });
    expect(byHostId.code, byHostId.stderr).toBe(0);
  });
});

describe("progress", { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it("is shown off a terminal only when asked, on stderr, never in the --json answer", async () => {
    const file = join(mkdtempSync(join(tmpdir(), "optchat-cli-")), "p.jsonl");
    writeFileSync(
      file,
      [
        JSON.stringify({ type: "session", id: "progress-s", project: "prj_cli" }),
        JSON.stringify({
          type: "turn",
          session: "progress-s",
          id: "t1",
          outcome: "completed",
          records: [{ id: "m1", kind: "user", at: "2026-11-20T10:00:00Z", text: "progress please" }],
        }),
      ].join("\n"),
    );
    const quiet = await runCli(["import", file, "--json"], { DATABASE_URL: db.url });
    expect(quiet.stderr).not.toContain("imported 2/2 lines");
    const asked = await runCli(["import", file, "--json", "--progress"], { DATABASE_URL: db.url });
    expect(asked.code, asked.stderr).toBe(0);
    expect(asked.stderr).toContain("imported 2/2 lines, 1 sessions, 1 turns, 1 records\n");
    expect(JSON.parse(asked.stdout)).toMatchObject({ ok: true, lines: 2 });
  });
});

describe("optchat scopes", { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it("lists each scope with its sessions per host and publications", async () => {
    const result = await runCli(["scopes", "--json"], { DATABASE_URL: db.url });
    expect(result.code, result.stderr).toBe(0);
    const { scopes } = JSON.parse(result.stdout);
    const scope = scopes.find((s: { scopeId: string }) => s.scopeId === "project:prj_cli");
    expect(scope).toMatchObject({ kind: "project", projectIds: ["prj_cli"] });
    expect(scope.hosts).toMatchObject({ opencode: 1 });
    const text = await runCli(["scopes"], { DATABASE_URL: db.url });
    expect(text.stdout).toMatch(/^project:prj_cli {2}\d+ session\(s\) \(/m);
  });

  it("names --data-dir when OpenCode's storage is not where it was pointed", async () => {
    const result = await runCli(["scopes", "--data-dir", "/nonexistent/opencode"], { DATABASE_URL: db.url });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      /INPUT_INVALID: No OpenCode database at \/nonexistent\/opencode\/opencode\.db.*--data-dir/,
    );
  });
});
