import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { type ModelServer, startModelServer } from "../../scripts/model-server.js";
import { freshDatabaseName, PLUGIN_PATH, runCli, useTestMemory, useWorkerProcesses } from "../helpers.js";

/**
 * `optchat doctor` (issue 37 item 4) run as a person would, against real parts: the CLI process, opencode.json files
 * in a config directory of its own, PostgreSQL, a model server on the OpenAI-compatible wire, an `optchat worker`
 * process. A good chain passes; each broken link is one FAIL line with its fix, and the exit code says so.
 */

const db = useTestMemory();
const workers = useWorkerProcesses(db);
let model: ModelServer;
let root: string;
const created: { drop(): Promise<void> }[] = [];

beforeAll(async () => {
  model = await startModelServer();
  root = mkdtempSync(join(tmpdir(), "optchat-doctor-"));
  mkdirSync(join(root, "config", "opencode"), { recursive: true });
  mkdirSync(join(root, "project"), { recursive: true });
});

afterAll(async () => {
  await model?.close();
  if (root) rmSync(root, { recursive: true, force: true });
  for (const d of created) await d.drop();
});

const PRICED = JSON.stringify({ "openai-compatible:optchat-compactor": { input: 0, output: 0 } });

/** OpenCode's global config: the plugin entry (unless `plugin` is null) and a local model as small_model. */
function writeConfig(options: { plugin?: Record<string, unknown> | null; raw?: string } = {}): void {
  const path = join(root, "config", "opencode", "opencode.json");
  if (options.raw !== undefined) {
    writeFileSync(path, options.raw);
    return;
  }
  const config = {
    ...(options.plugin === null ? {} : { plugin: [[PLUGIN_PATH, { databaseUrl: db.url, ...options.plugin }]] }),
    model: "local/optchat-compactor",
    small_model: "local/optchat-compactor",
    provider: {
      local: {
        npm: "@ai-sdk/openai-compatible",
        options: { baseURL: model.url },
        models: { "optchat-compactor": {} },
      },
    },
  };
  writeFileSync(path, `${JSON.stringify(config, null, 2)}\n`);
}

/** `optchat doctor` in this file's OpenCode environment, with no model key from the developer's. */
function runDoctor(flags: readonly string[], env: Record<string, string> = {}) {
  return runCli(["doctor", ...flags, "--project", join(root, "project"), "--timeout-ms", "10000"], {
    HOME: join(root, "home"),
    XDG_CONFIG_HOME: join(root, "config"),
    XDG_DATA_HOME: join(root, "data"),
    OPENCODE_CONFIG: "",
    ANTHROPIC_API_KEY: "",
    OPENAI_API_KEY: "",
    OPTCHAT_SUMMARIZER: "auto",
    OPTCHAT_EMBEDDED_WORKER: "",
    OPTCHAT_PRICES: PRICED,
    DATABASE_URL: db.url,
    ...env,
  });
}

async function doctor(env: Record<string, string> = {}) {
  const result = await runDoctor([], env);
  const lines = result.stdout.trim().split("\n");
  return { ...result, lines, failed: lines.filter((l) => l.startsWith("FAIL")) };
}

describe("optchat doctor", () => {
  it("passes a good chain: plugin loaded, database migrated, embedded worker, a model that answers and has a price", async () => {
    writeConfig();
    model.clear();
    const result = await doctor();
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.lines).toEqual([
      expect.stringMatching(
        /^ok {4}opencode {2}\S+\/config\/opencode\/opencode\.json loads this checkout's plugin with options databaseUrl$/,
      ),
      expect.stringMatching(/^ok {4}database {2}postgres:\/\/\S+: PostgreSQL \S+.*, schema version (\d+) of \1$/),
      "ok    worker    OpenCode's embedded worker is on (the default); 0 `optchat worker` alive (heartbeat within 30 s)",
      expect.stringMatching(
        /^ok {4}model {5}openai-compatible:optchat-compactor@127\.0\.0\.1:\d+ \(auto: small_model local\/optchat-compactor in opencode\.json\)$/,
      ),
      expect.stringMatching(/^ok {4}answers {3}answered in \d+ ms \(\d+ \+ \d+ tokens\): ".+"$/),
      expect.stringMatching(
        /^ok {4}price {5}openai-compatible:optchat-compactor costs \$0 input \/ \$0 output per million tokens/,
      ),
      "doctor: all 6 checks passed",
    ]);
    // One tiny real call reached the model, through the compactor's own prompt.
    expect(model.requests().filter((r) => r.kind === "compactor")).toHaveLength(1);
    const json = JSON.parse((await runDoctor(["--json"])).stdout);
    expect(json.ok).toBe(true);
    expect(json.checks.map((c: { name: string }) => c.name)).toEqual([
      "opencode",
      "database",
      "worker",
      "model",
      "answers",
      "price",
    ]);
  });

  it("reports a misspelled plugin option as the one failure, naming the option", async () => {
    writeConfig({ plugin: { embeddedWorkr: "off" } });
    const result = await doctor();
    expect(result.code).toBe(1);
    expect(result.failed).toEqual([
      expect.stringMatching(
        /^FAIL {2}opencode {2}\S+opencode\.json: the plugin's settings are refused: .*unknown option\(s\) embeddedWorkr.* — fix: correct the option/,
      ),
    ]);
    expect(result.lines).toContain(
      "skip  worker    OpenCode runs no embedded worker until the opencode check passes, and no `optchat worker` is alive",
    );
  });

  it("reports an opencode.json that does not load the plugin, with the entry to add", async () => {
    writeConfig({ plugin: null });
    const result = await doctor();
    expect(result.code).toBe(1);
    expect(result.failed).toEqual([
      expect.stringMatching(
        new RegExp(
          `^FAIL {2}opencode {2}no opencode\\.json loads optchat \\(read: \\S+opencode\\.json\\) — fix: add "plugin": \\[\\["${PLUGIN_PATH.replace(/[.]/g, "\\.")}", \\{"databaseUrl": "postgres://`,
        ),
      ),
    ]);
  });

  it("reports a file OpenCode cannot parse", async () => {
    writeConfig({ raw: '{ "plugin": [ ' });
    const result = await doctor();
    expect(result.code).toBe(1);
    expect(result.failed[0]).toMatch(
      /^FAIL {2}opencode {2}\S+opencode\.json cannot be read: .*JSON.* — fix: fix the file/,
    );
  });

  it("reports a database that is not migrated, and one that cannot be reached", async () => {
    const empty = freshDatabaseName();
    created.push(empty);
    const admin = new pg.Client({ connectionString: inject("adminUrl") });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${empty.name}`);
    await admin.end();
    writeConfig({ plugin: { databaseUrl: empty.url } });
    const unmigrated = await doctor();
    expect(unmigrated.code).toBe(1);
    expect(unmigrated.failed).toEqual([
      "FAIL  database  schema not migrated (no optchat tables) — fix: run `optchat migrate`",
    ]);
    writeConfig({ plugin: { databaseUrl: "postgres://postgres@127.0.0.1:1/optchat" } });
    const unreachable = await doctor();
    expect(unreachable.failed).toEqual([
      expect.stringMatching(
        /^FAIL {2}database {2}database unreachable at 127\.0\.0\.1:1\/optchat: .*ECONNREFUSED.* — fix: start PostgreSQL or point DATABASE_URL at a reachable server$/,
      ),
    ]);
  });

  it("reports no worker when the embedded worker is off, and passes once an `optchat worker` is alive", async () => {
    writeConfig({ plugin: { embeddedWorker: "off" } });
    const off = await doctor();
    expect(off.code).toBe(1);
    expect(off.failed).toEqual([
      expect.stringMatching(
        /^FAIL {2}worker {4}OpenCode's embedded worker is off \(option embeddedWorker in \S+opencode\.json\) and no `optchat worker` is alive — fix: start `optchat worker`/,
      ),
    ]);
    const worker = await workers.start();
    const on = await doctor();
    expect(on.code, on.stdout).toBe(0);
    expect(on.lines).toContain(
      `ok    worker    1 \`optchat worker\` alive (heartbeat within 30 s); OpenCode's embedded worker is off (option embeddedWorker in ${join(root, "config", "opencode", "opencode.json")})`,
    );
    worker.child.kill("SIGTERM");
    await worker.exited;
  });

  it("reports a model that does not answer, and one without a price", async () => {
    writeConfig();
    model.failNext(1, { status: 401 });
    const refused = await doctor();
    expect(refused.code).toBe(1);
    expect(refused.failed).toEqual([
      expect.stringMatching(
        /^FAIL {2}answers {3}openai-compatible:optchat-compactor@\S+ did not answer a test call: .*401.* — fix: check that provider's baseURL, model and key in opencode\.json/,
      ),
    ]);
    const unpriced = await doctor({ OPTCHAT_PRICES: "" });
    expect(unpriced.code).toBe(1);
    expect(unpriced.failed).toEqual([
      expect.stringMatching(
        /^FAIL {2}price {5}no price for openai-compatible:optchat-compactor: .* — fix: add it to OPTCHAT_PRICES, e\.g\. OPTCHAT_PRICES='\{"openai-compatible:optchat-compactor":/,
      ),
    ]);
  });

  it("reports no model when auto finds none in OpenCode's config", async () => {
    writeConfig({ raw: JSON.stringify({ plugin: [[PLUGIN_PATH, { databaseUrl: db.url }]] }) });
    const result = await doctor();
    expect(result.code).toBe(1);
    expect(result.failed).toEqual([
      expect.stringMatching(/^FAIL {2}model {5}the compactor model does not resolve: .*no main model is configured/),
    ]);
    expect(result.lines.filter((l) => l.startsWith("skip")).map((l) => l.split(/\s+/)[1])).toEqual([
      "answers",
      "price",
    ]);
  });
});
