import { execFileSync, spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { main } from "../../src/cli/main.js";
import { startWorker } from "../../src/memory/worker.js";
import {
  collect,
  ingestEvent,
  ROOT,
  runCli,
  TEST_SUMMARIZER_ENV,
  useScratchDirs,
  useTestMemory,
  waitForPublications,
} from "../helpers.js";

// A person's first hour with the CLI (issue 40 items 2-5, 9, 10): where they are, what they mistyped, what exists.

/** Temporary directories, removed after the file's tests. */
const scratch = useScratchDirs();

const TIMEOUT_MS = 180_000;
const db = useTestMemory();
const OPENCODE_ID = "ses_firsthour0001AbCdEfGhIj";
let repo = "";
let projectId = "";
let sessionId = "";
let forgottenId = "";

/** Runs `optchat` in this process (fast), capturing what it writes. */
async function cli(args: string[], options: { cwd?: string; env?: Record<string, string> } = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const stdout = vi.spyOn(process.stdout, "write").mockImplementation((chunk) => {
    out.push(String(chunk));
    return true;
  });
  const stderr = vi.spyOn(process.stderr, "write").mockImplementation((chunk) => {
    err.push(String(chunk));
    return true;
  });
  try {
    const env = {
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? "",
      ...TEST_SUMMARIZER_ENV,
      DATABASE_URL: db.url,
      ...options.env,
    };
    const code = await main(args, env, { cwd: options.cwd ?? repo });
    return { code, stdout: out.join(""), stderr: err.join("") };
  } finally {
    stdout.mockRestore();
    stderr.mockRestore();
  }
}

async function turn(
  session: string,
  host: string,
  turnId: string,
  records: { kind: "user" | "assistant" | "tool_call" | "tool_result"; text: string; toolName?: string }[],
) {
  await db.memory.admitTurn({ sessionId: session, turnId, query: records[0]?.text ?? "" });
  await db.memory.ingestMany(
    records.map((record, n) =>
      ingestEvent({
        sessionId: session,
        turnId,
        kind: record.kind,
        host,
        messageId: `${turnId}_m${n}`,
        partId: `prt_${n}`,
        occurredAt: new Date(Date.UTC(2026, 10, 1, 9, 0, n)).toISOString(),
        content: record.text,
        ...(record.toolName ? { toolName: record.toolName, toolCallId: `call_${turnId}` } : {}),
      }),
    ),
  );
  await db.memory.finishTurn({ sessionId: session, turnId }, "completed");
}

beforeAll(async () => {
  // A git project, as a person's checkout: the plugin's scope for it is project:<root commit>.
  repo = scratch("optchat-first-hour-");
  const git = (...args: string[]) => execFileSync("git", ["-C", repo, ...args], { encoding: "utf8" }).trim();
  git("init", "-q");
  git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "root");
  projectId = git("rev-list", "--max-parents=0", "HEAD");
  const session = await db.memory.openSession({ host: "opencode", hostSessionId: OPENCODE_ID, projectId });
  sessionId = session.sessionId;
  await turn(sessionId, OPENCODE_ID, "msg_t1", [
    { kind: "user", text: "where is the broker configured? 雨天 plan" },
    { kind: "tool_call", text: '{"query":"zanzibarquux"}', toolName: "memory_search" },
    { kind: "tool_result", text: "earlier hit: zanzibarquux lives in src/old.ts", toolName: "memory_search" },
    { kind: "assistant", text: "In src/broker.ts, DurableBroker." },
  ]);
  const doomed = await db.memory.openSession({ host: "opencode", hostSessionId: "ses_firsthour0002doomed", projectId });
  forgottenId = doomed.sessionId;
  await turn(forgottenId, "ses_firsthour0002doomed", "msg_d1", [{ kind: "user", text: "a session to forget" }]);
  const worker = await startWorker(db.memory, db.config, () => {});
  try {
    await waitForPublications(db.memory.pool, 2, 60_000, "both turns published");
  } finally {
    await worker.stop();
  }
}, TIMEOUT_MS);

describe("did you mean", { timeout: TIMEOUT_MS }, () => {
  it("names the nearest command instead of printing the whole help", async () => {
    const result = await cli(["statsu"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('unknown command "statsu". Did you mean optchat status?');
    expect(result.stderr).not.toContain("Usage:");
  });

  it("names the nearest flag, in its own words rather than Node's", async () => {
    const result = await cli(["status", "--jsn"]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("unknown flag --jsn. Did you mean --json?");
    expect(result.stderr).not.toContain("positional argument");
    expect((await cli(["sessions", "--scope"])).stderr).toContain("--scope needs a value");
  });

  it("reports an unknown OPTCHAT_* variable at start with the nearest setting", async () => {
    const result = await cli(["scopes"], { env: { OPTCHAT_VIEW_BYTE: "1000", OPTCHAT_SUMARIZER: "fake" } });
    expect(result.stderr).toContain(
      "OPTCHAT_VIEW_BYTE is not a setting optchat knows, and is ignored. Did you mean OPTCHAT_VIEW_BYTES?",
    );
    expect(result.stderr).toContain("Did you mean OPTCHAT_SUMMARIZER?");
    // The project's tooling variables are not reported.
    expect((await cli(["scopes"], { env: { OPTCHAT_BENCH_SECONDS: "1" } })).stderr).not.toContain("OPTCHAT_BENCH");
  });
});

describe("a scope from where you are", { timeout: TIMEOUT_MS }, () => {
  it("lists the sessions of the current directory's project without --scope, by OpenCode id and first prompt", async () => {
    const result = await cli(["sessions"]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(sessionId);
    expect(result.stdout).toContain(OPENCODE_ID);
    expect(result.stdout).toContain("first prompt: where is the broker configured?");
    const json = JSON.parse((await cli(["sessions", "--json"])).stdout);
    expect(json.sessions[0]).toMatchObject({
      hostSessionId: OPENCODE_ID,
      firstPrompt: expect.stringContaining("broker"),
    });
    // From a subdirectory of the checkout too.
    execFileSync("mkdir", ["-p", join(repo, "src", "deep")]);
    expect((await cli(["sessions"], { cwd: join(repo, "src", "deep") })).stdout).toContain(OPENCODE_ID);
    expect((await cli(["sessions", "--all"], { cwd: tmpdir() })).stdout).toContain(`project:${projectId}:`);
  });

  it("says where it looked, and names `optchat scopes`, in a directory with no memory", async () => {
    const elsewhere = scratch("optchat-nowhere-");
    const result = await cli(["sessions"], { cwd: elsewhere });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`No memory yet for this directory's project (${elsewhere}`);
    expect(result.stderr).toContain("optchat scopes");
    const unknown = await cli(["sessions", "--scope", "project:nothing-here"]);
    expect(unknown.stderr).toContain("`optchat scopes` lists those in memory");
    expect(unknown.stderr).not.toContain("optchat status");
  });

  it("searches here, names the session of each hit, and never finds the memory tools' own results", async () => {
    const found = await cli(["search", "broker"]);
    expect(found.code).toBe(0);
    expect(found.stdout).toContain(OPENCODE_ID);
    // The memory tool's call and result are not found as messages (a summary over them still may be: the compactor
    // summarizes the whole turn).
    const echoed = JSON.parse((await cli(["search", "zanzibarquux", "--json"])).stdout);
    expect(echoed.hits.filter((hit: { source: string }) => hit.source === "message")).toEqual([]);
    const single = await cli(["search", "雨"]);
    expect(single.stdout).toContain("a CJK word is found from two characters on");
    expect((await cli(["search", "--all-scopes", "broker"], { cwd: tmpdir() })).stdout).toContain(
      `project:${projectId}:`,
    );
  });

  it("zooms a ref here, and REF_NOT_FOUND says which refs exist, never 'this turn'", async () => {
    expect((await cli(["zoom", "pub:0+1"])).code).toBe(0);
    const missing = await cli(["zoom", "pub:0+8"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("REF_NOT_FOUND");
    expect(missing.stderr).toContain("its shared lines are pub:0+1 to pub:1+1 (2 published turns");
    expect(missing.stderr).not.toContain("this turn");
    const bare = await cli(["zoom", "--scope", `project:${projectId}`, "0+8"]);
    expect(bare.stderr).toContain("`optchat zoom <session> 0+8` opens it");
  });
});

describe("a forgotten session", { timeout: TIMEOUT_MS }, () => {
  it("is SESSION_DELETED for inspect, view and zoom, and counted nowhere", async () => {
    expect((await cli(["forget", "--session", forgottenId, "--yes"])).code).toBe(0);
    for (const args of [
      ["inspect", forgottenId],
      ["view", forgottenId],
      ["zoom", "ses_firsthour0002doomed", "0+1"],
    ]) {
      const result = await cli(args);
      expect(result.code, args.join(" ")).toBe(1);
      expect(result.stderr, args.join(" ")).toContain("SESSION_DELETED");
    }
    const scopes = JSON.parse((await cli(["scopes", "--json"])).stdout);
    const scope = scopes.scopes.find((s: { scopeId: string }) => s.scopeId === `project:${projectId}`);
    expect(scope.sessions).toBe(1);
    expect(scope.hosts).toEqual({ opencode: 1 });
  });
});

describe("smaller points", { timeout: TIMEOUT_MS }, () => {
  it("refuses a prompt version no summary was written with, instead of calling everything current", async () => {
    const result = await cli(["rebuild", "--prompt-version", "v2"]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("names no prompt version of a summary in memory");
  });

  it("documents view's exit code 3", async () => {
    expect((await cli(["view", "--help"])).stdout).toContain("3 when the view cannot fit --budget");
  });

  it("import --opencode with no OpenCode history is nothing to import, not a failure", async () => {
    const empty = scratch("optchat-no-opencode-");
    const result = await runCli(["import", "--opencode"], {
      DATABASE_URL: db.url,
      XDG_DATA_HOME: empty,
      OPENCODE_DB: "",
    });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain("nothing to import: no OpenCode history at");
  });
});

describe("long-running commands", { timeout: TIMEOUT_MS }, () => {
  let bigFile = "";

  it("Ctrl-C during import ends the progress line and says to run the same command again", async () => {
    const dir = scratch("optchat-interrupt-");
    bigFile = join(dir, "big.jsonl");
    const lines: string[] = [];
    for (let s = 0; s < 400; s++) {
      lines.push(JSON.stringify({ type: "session", id: `big-${s}`, project: "prj_big" }));
      lines.push(
        JSON.stringify({
          type: "turn",
          session: `big-${s}`,
          id: `t-${s}`,
          outcome: "completed",
          records: Array.from({ length: 20 }, (_, n) => ({
            id: `m-${s}-${n}`,
            kind: n % 2 ? "assistant" : "user",
            at: "2026-11-20T10:00:00Z",
            text: `line ${n} of session ${s}`,
          })),
        }),
      );
    }
    writeFileSync(bigFile, `${lines.join("\n")}\n`);
    const child = spawn(process.execPath, [`${ROOT}/bin/optchat.mjs`, "import", bigFile, "--progress"], {
      cwd: ROOT,
      env: { ...process.env, ...TEST_SUMMARIZER_ENV, DATABASE_URL: db.url },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const finished = collect(child);
    await new Promise<void>((resolve) => {
      child.stderr?.on("data", (chunk: Buffer) => {
        if (String(chunk).includes("imported ")) resolve();
      });
    });
    child.kill("SIGINT");
    const result = await finished;
    expect(result.stderr).toContain("import interrupted; run the same command again to continue");
    expect(result.stderr).toMatch(/\n[^\n]*interrupted/);
    expect(result.code).toBe(130);
  });

  it("optchat worker logs one line per finished job, and --quiet silences them", async () => {
    for (const quiet of [false, true]) {
      // Work for this worker alone: a new session's turn, built by nobody else.
      const host = `ses_firsthour0003worker${quiet ? "q" : "v"}`;
      const session = await db.memory.openSession({ host: "opencode", hostSessionId: host, projectId });
      await turn(session.sessionId, host, `msg_w${quiet ? "q" : "v"}`, [
        { kind: "user", text: "a job for the worker" },
        { kind: "assistant", text: "done by the worker" },
      ]);
      const child = spawn(process.execPath, [`${ROOT}/bin/optchat.mjs`, "worker", ...(quiet ? ["--quiet"] : [])], {
        cwd: ROOT,
        env: { ...process.env, ...TEST_SUMMARIZER_ENV, DATABASE_URL: db.url },
        stdio: ["ignore", "pipe", "pipe"],
      });
      const finished = collect(child);
      await new Promise<void>((resolve) => {
        child.stderr?.on("data", (chunk: Buffer) => {
          if (String(chunk).includes("type=ready")) resolve();
        });
      });
      // The session's tree built (by this worker: no other runs) before it is stopped.
      await db.memory.settle(session.sessionId, { timeoutMs: 60_000 });
      child.kill("SIGTERM");
      const result = await finished;
      if (quiet) expect(result.stderr).not.toContain("type=built");
      else expect(result.stderr).toMatch(/type=built treeId=\d+ ref=\S+/);
      expect(result.stderr).toContain("type=stopped");
    }
  });
});
