import { execFile } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stopLocalServers } from "../../plugin/transport/local-server/client.js";
import { type ModelServer, startModelServer } from "../../scripts/model-server.js";
import {
  cleanupOpencode2Env,
  createOpencode2Env,
  execOpencode2,
  type Opencode2Env,
  runOpencode2,
} from "../../scripts/opencode2-harness.js";
import { resolveConfig } from "../../src/memory/config.js";
import {
  dependencyClosure,
  type LocalRegistry,
  packFromCache,
  startRegistry,
  versionOrder,
} from "../helpers/registry.js";
import { firstPublication, ROOT } from "../helpers.js";

/**
 * Issue 44: optchat installed by name, as every OpenCode plugin is, on both OpenCode lines, from a real npm registry
 * (Verdaccio on loopback, no uplinks) holding this checkout packed and its production dependency closure, all packed
 * from the npm cache without network, plus what V1's start-up install asks for (`@opencode-ai/plugin`). With no
 * database URL: the embedded server. V1: `"plugin": [["optchat", {…}]]` in opencode.json; V2: `opencode plugin add
 * optchat`. In each, a second `opencode run` of the project must see the first one's decision in its first request;
 * `npx optchat` reaches the same memory; afterwards no process of the test is left.
 */

const run = promisify(execFile);
const V1_BIN = join(ROOT, "node_modules", ".bin", "opencode");
const DECISION = "We decided: the release branch is named trunk-7. REPLY=Noted: trunk-7.";
const QUESTION = "Which release branch did we decide on?";
let root = "";
let registry: LocalRegistry | undefined;
let model: ModelServer;
let packed = { size: 0, unpackedSize: 0, files: [] as string[] };
const homes: string[] = [];
let v2: Opencode2Env | undefined;

/** A person's shell in a fresh HOME: none of the runner's variables, no optchat setting, npm at the local registry. */
function personEnv(home: string): NodeJS.ProcessEnv {
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) =>
        !/^(OPTCHAT_|OPENCODE|npm_|VITEST|XDG_)/i.test(name) && name !== "DATABASE_URL" && name !== "NODE_ENV",
    ),
  );
  mkdirSync(join(home, "tmp"), { recursive: true });
  return {
    ...inherited,
    HOME: home,
    XDG_CONFIG_HOME: join(home, ".config"),
    XDG_DATA_HOME: join(home, ".local", "share"),
    XDG_STATE_HOME: join(home, ".local", "state"),
    XDG_CACHE_HOME: join(home, ".cache"),
    TMPDIR: join(home, "tmp"),
    // As root the embedded server's default data directory is /var/lib/optchat, the machine's: keep it in this HOME.
    ...(process.getuid?.() === 0 ? { OPTCHAT_DATA_DIR: join(home, ".local", "share", "optchat") } : {}),
    npm_config_registry: registry?.url ?? "",
    npm_config_update_notifier: "false",
    npm_config_fund: "false",
    npm_config_audit: "false",
    OPENCODE_DISABLE_MODELS_FETCH: "1",
    OPENCODE_DISABLE_AUTOUPDATE: "1",
  };
}

/** The person's OpenCode provider (the scripted model stands in for theirs) and, for V1, the plugin line. */
function opencodeConfig(extra: Record<string, unknown>): string {
  return JSON.stringify({
    autoupdate: false,
    share: "disabled",
    model: "fake/fake",
    small_model: "fake/fake",
    enabled_providers: ["fake"],
    provider: {
      fake: {
        npm: "@ai-sdk/openai-compatible",
        name: "Fake",
        options: { baseURL: model.url, apiKey: "x" },
        models: { fake: { name: "fake", limit: { context: 100_000, output: 4_000 } } },
      },
    },
    ...extra,
  });
}

/** Pids of the processes started with this HOME (the embedded server and the local server included). */
function processesWithHome(home: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/environ`, "utf8").split("\0").includes(`HOME=${home}`)) pids.push(Number(entry));
    } catch {
      // gone, or not ours to read
    }
  }
  return pids;
}

/** The installed package's `optchat` (as a global install runs it). */
function installedCli(directory: string): string {
  return join(directory, "node_modules", "optchat", "bin", "optchat.mjs");
}

const README = readFileSync(join(ROOT, "README.md"), "utf8");

/** The README's quick start: V1's opencode.json entry and V2's commands, each between its markers. */
function quickStart(): { v1: Record<string, unknown>; v2: string[][] } {
  const v1 = /<!-- quick-start-v1[^>]*-->\s*```json\n([\s\S]*?)```\s*<!-- \/quick-start-v1 -->/.exec(README)?.[1];
  const v2 = /<!-- quick-start[^>]*-->\s*```sh\n([\s\S]*?)```\s*<!-- \/quick-start -->/.exec(README)?.[1];
  if (!v1 || !v2) throw new Error("README.md lacks its quick-start-v1 (json) or quick-start (sh) block");
  const commands = v2
    .split("\n")
    .map((line) => line.replace(/\s+#.*$/, "").trim())
    .filter(Boolean)
    .map((line) => line.split(/\s+/));
  for (const words of commands)
    if (words[0] !== "opencode") throw new Error(`the V2 quick start runs more than opencode: ${words.join(" ")}`);
  return { v1: JSON.parse(v1) as Record<string, unknown>, v2: commands.map((words) => words.slice(1)) };
}

const seconds = (since: number) => Math.round((performance.now() - since) / 100) / 10;

beforeAll(async () => {
  const began = performance.now();
  root = mkdtempSync(join(tmpdir(), "optchat-npm-"));
  // As root the embedded server runs as user postgres, which must be able to enter the data directory's parents.
  chmodSync(root, 0o755);
  model = await startModelServer();
  registry = await startRegistry(ROOT, join(root, "registry"));

  // This checkout as `npm publish` would pack it (prepack builds dist/).
  const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", root], {
    cwd: ROOT,
    maxBuffer: 64 << 20,
  });
  const own = (JSON.parse(stdout.slice(stdout.indexOf("["))) as Array<Record<string, unknown>>)[0] ?? {};
  packed = {
    size: Number(own.size),
    unpackedSize: Number(own.unpackedSize),
    files: ((own.files as Array<{ path: string }>) ?? []).map((file) => file.path),
  };
  const tarball = join(root, String(own.filename));
  const packSeconds = seconds(began);

  // Its production closure and what V1's start-up install asks for, from the cache, oldest versions first.
  const closure = dependencyClosure(ROOT, ["", "node_modules/@opencode-ai/plugin"]);
  const tarballs = await packFromCache(closure, join(root, "tarballs"));
  const ordered = [...closure].sort((a, b) => a.name.localeCompare(b.name) || versionOrder(a.version, b.version));
  for (const p of ordered) {
    const manifest = JSON.parse(readFileSync(join(ROOT, p.path, "package.json"), "utf8")) as Record<string, unknown>;
    await registry.publish(tarballs.get(p) as string, manifest);
  }
  const manifest = JSON.parse(
    (await run("tar", ["-xzOf", tarball, "package/package.json"], { maxBuffer: 8 << 20 })).stdout,
  ) as Record<string, unknown>;
  await registry.publish(tarball, manifest);
  process.stdout.write(
    `${JSON.stringify({ bench: "npm-package", packedBytes: packed.size, unpackedBytes: packed.unpackedSize, files: packed.files.length, closurePackages: closure.length, packSeconds, registryReadySeconds: seconds(began) })}\n`,
  );
}, 240_000);

afterAll(async () => {
  if (v2) {
    // A test that failed midway: its embedded server, stopped with the copy of the CLI V2 installed, then V2's service.
    for (const install of npmCacheDirs(v2.root, v2.env.XDG_CACHE_HOME as string))
      await run(process.execPath, [installedCli(install), "db", "stop"], { env: v2.env }).catch(() => {});
    await cleanupOpencode2Env(v2);
  }
  for (const home of homes) {
    await stopLocalServers(join(home, "tmp", `optchat-${process.getuid?.() ?? "user"}`)).catch(() => []);
    // The embedded server, stopped with the copy of the CLI OpenCode installed (a test that failed midway included).
    await run(process.execPath, [installedCli(join(home, ".cache", "opencode", "packages", "optchat")), "db", "stop"], {
      env: personEnv(home),
    }).catch(() => {});
  }
  await registry?.stop();
  await model?.close();
  if (root) rmSync(root, { recursive: true, force: true });
}, 120_000);

/** V2's install directories of optchat (`$XDG_CACHE_HOME/opencode/npm/optchat@…`). */
function npmCacheDirs(home: string, cacheHome = join(home, ".cache")): string[] {
  try {
    return readdirSync(join(cacheHome, "opencode", "npm"))
      .filter((name) => name.startsWith("optchat"))
      .map((name) => join(cacheHome, "opencode", "npm", name));
  } catch {
    return [];
  }
}

describe("optchat installed by name from an npm registry", () => {
  it("is a package of compiled JavaScript and declarations, without tests, fixtures or benchmark data", () => {
    expect(packed.files).toContain("dist/plugin/package-entry.js");
    expect(packed.files).toContain("dist/plugin/package-entry.d.ts");
    expect(packed.files).toContain("dist/src/cli/main.js");
    expect(packed.files).toContain("dist/migrations/001_source_records.sql");
    expect(packed.files.filter((file) => /^(tests|scripts|src|plugin|\.demo|\.bench)\//.test(file))).toEqual([]);
    expect(packed.files.filter((file) => file.endsWith(".ts") && !file.endsWith(".d.ts"))).toEqual([]);
    expect(packed.size).toBeLessThan(2_000_000);
  });

  it(
    "OpenCode V1: the README's entry alone; the second run (the `[name, options]` form) sees the first; `npx optchat` reads the same memory",
    { timeout: 480_000 },
    async () => {
      const home = join(root, "v1");
      homes.push(home);
      const env = personEnv(home);
      mkdirSync(join(home, ".config", "opencode"), { recursive: true });
      const project = join(home, "project");
      mkdirSync(project, { recursive: true });
      await run("git", ["init", "-q"], { cwd: project });
      const configPath = join(home, ".config", "opencode", "opencode.json");
      const started = performance.now();
      // The one edit, as the README writes it.
      writeFileSync(configPath, opencodeConfig(quickStart().v1));
      // stdin from /dev/null: a person's terminal, not the runner's open pipe, which `opencode run` would read to its end.
      const ask = (prompt: string) =>
        run("bash", ["-c", `"$OPENCODE" run "$PROMPT" < /dev/null`], {
          env: { ...env, PWD: project, OPENCODE: V1_BIN, PROMPT: prompt },
          cwd: project,
          timeout: 240_000,
        }).catch((error: { stderr?: string; stdout?: string; message: string }) => {
          throw new Error(`${error.message}\nstdout: ${error.stdout}\nstderr: ${error.stderr}`);
        });
      const before = model.requests().length;
      await ask(DECISION);
      const first = seconds(started);
      // The entry's `[name, options]` form for the second run (the option is the default: same scope, same memory).
      writeFileSync(configPath, opencodeConfig({ plugin: [["optchat", { scope: "project" }]] }));
      // A person's seconds between two commands: the local server publishes the first run's turn after that run ends,
      // and a run admitted before that cannot see it (its snapshot is pinned at admission). Not counted in the timing.
      const waitStarted = performance.now();
      await firstPublication(resolveConfig({ env }).embedded?.socketDir);
      const waited = seconds(waitStarted);
      await ask(QUESTION);
      const total = Math.round((seconds(started) - waited) * 10) / 10;
      const mains = model
        .requests()
        .slice(before)
        .filter((request) => request.kind === "main");
      expect(mains).toHaveLength(2);
      expect(JSON.stringify(mains[0]?.body)).not.toMatch(/<shared_memory[^>]*>[\s\S]*trunk-7/);
      expect(JSON.stringify(mains[1]?.body)).toMatch(/<shared_memory[^>]*>[\s\S]*trunk-7/);
      // What OpenCode installed: the package and its production dependencies (the embedded PostgreSQL included).
      const installed = await run("du", ["-skL", join(home, ".cache", "opencode", "packages")]);
      const installedKB = Number(installed.stdout.split("\t")[0]);
      process.stdout.write(
        `${JSON.stringify({ bench: "install-by-name", line: "v1", installedKB, commandsTyped: 2, edits: 1, firstRunSeconds: first, secondRunSeconds: Math.round((total - first) * 10) / 10, totalSeconds: total })}\n`,
      );

      // The CLI from the registry reaches the database the plugin used.
      const npxStarted = performance.now();
      const npx = await run("npx", ["--yes", "optchat", "search", "trunk-7"], {
        env: { ...env, PWD: project },
        cwd: project,
        timeout: 180_000,
        maxBuffer: 16 << 20,
      });
      expect(npx.stdout).toMatch(/trunk-7/);
      process.stdout.write(
        `${JSON.stringify({ bench: "install-by-name", line: "cli", npxSeconds: seconds(npxStarted) })}\n`,
      );
      const stop = await run("npx", ["--yes", "optchat", "db", "stop"], { env, cwd: project, timeout: 60_000 });
      expect(stop.stdout + stop.stderr).not.toMatch(/error/i);
      await stopLocalServers(join(home, "tmp", `optchat-${process.getuid?.() ?? "user"}`));
      await waitUntil(() => processesWithHome(home).length === 0, 20_000);
      expect(processesWithHome(home)).toEqual([]);
    },
  );

  it(
    "OpenCode V2: the README's `opencode plugin add optchat` installs it from the registry, the second run's first request holds the first run's decision, `plugin remove` takes it out, nothing is left running",
    { timeout: 480_000 },
    async () => {
      v2 = await createOpencode2Env({ modelUrl: model.url, extraEnv: { npm_config_registry: registry?.url ?? "" } });
      const env = v2.env;
      // Only what a person has: no database URL, no optchat setting (the compactor's model comes from V2's provider:
      // OPTCHAT_SUMMARIZER=auto, the default, not the harness's fake).
      delete env.DATABASE_URL;
      delete env.OPTCHAT_SUMMARIZER;
      if (process.getuid?.() === 0) {
        env.OPTCHAT_DATA_DIR = join(v2.root, "home", ".local", "share", "optchat");
        // As root the embedded server runs as user postgres, which must be able to enter the data directory's parents.
        mkdirSync(join(v2.root, "home", ".local", "share"), { recursive: true });
        for (const dir of [v2.root, join(v2.root, "home"), join(v2.root, "home", ".local")]) chmodSync(dir, 0o755);
        chmodSync(join(v2.root, "home", ".local", "share"), 0o755);
      }
      await run("git", ["init", "-q"], { cwd: v2.projectDir });
      const started = performance.now();
      for (const args of quickStart().v2) {
        const result = await execOpencode2(v2, args, "", 180_000);
        expect(result.code, result.stderr).toBe(0);
      }
      const config = JSON.parse(readFileSync(join(env.XDG_CONFIG_HOME as string, "opencode", "opencode.json"), "utf8"));
      expect(JSON.stringify(config.plugins)).toMatch(/optchat/);
      const before = model.requests().length;
      // Longer than a memory line (512 bytes): its summary needs the compactor's model.
      const long = `${DECISION.replace(" REPLY=", ` ${"The branch name follows the release train. ".repeat(14)}REPLY=`)}`;
      const a = await runOpencode2(v2, long, { timeoutMs: 240_000 });
      expect(a.code, a.stderr).toBe(0);
      const first = seconds(started);
      const afterA = model.requests().length;
      const b = await runOpencode2(v2, QUESTION, { timeoutMs: 240_000 });
      expect(b.code, b.stderr).toBe(0);
      const total = seconds(started);
      const mainsOf = (from: number, to?: number) =>
        model
          .requests()
          .slice(from, to)
          .filter((request) => request.kind === "main");
      const [firstOfA] = mainsOf(before, afterA);
      const [firstOfB] = mainsOf(afterA);
      // The package loaded under V2 and its setup() started the V2 host: the memory tools are in the requests.
      expect(JSON.stringify(firstOfA?.body.tools ?? [])).toContain("memory_zoom");
      expect(JSON.stringify(firstOfA?.body.messages)).not.toMatch(/<shared_memory[^>]*>[\s\S]*trunk-7/);
      // The second run's first request holds the first run's decision (published by the second run's own worker while
      // its first request waits for the compactor: a standalone run's worker stops with its process).
      expect(JSON.stringify(firstOfB?.body.messages)).toMatch(/<shared_memory[^>]*>[\s\S]*trunk-7/);
      // Summarized by the person's own provider, chosen by `auto` from what V2 lists (plugin/v2/compactor-source.ts).
      expect(model.requests().filter((request) => request.kind === "compactor").length).toBeGreaterThan(0);
      process.stdout.write(
        `${JSON.stringify({ bench: "install-by-name", line: "v2", commandsTyped: 3, firstRunSeconds: first, secondRunSeconds: Math.round((total - first) * 10) / 10, totalSeconds: total })}\n`,
      );

      // Out: the installed CLI stops the embedded server (before `plugin remove`, which deletes V2's copy).
      const installs = npmCacheDirs(v2.root, env.XDG_CACHE_HOME as string);
      expect(installs.length).toBeGreaterThan(0);
      // Wherever V2 laid the package out under its install directory.
      const found = await run("find", [installs[0] as string, "-path", "*/optchat/bin/optchat.mjs"]);
      const cli = found.stdout.split("\n").find(Boolean);
      expect(cli, `no bin/optchat.mjs under ${installs[0]}`).toBeDefined();
      await run(process.execPath, [cli as string, "db", "stop"], { env });
      // Off: `opencode plugin remove optchat` takes it out of the config.
      const remove = await execOpencode2(v2, ["plugin", "remove", "optchat"], "", 60_000);
      expect(remove.code, remove.stderr).toBe(0);
      const after = JSON.parse(readFileSync(join(env.XDG_CONFIG_HOME as string, "opencode", "opencode.json"), "utf8"));
      expect(JSON.stringify(after.plugins ?? [])).not.toMatch(/optchat/);

      // Then V2's service goes, and nothing of the test is left.
      await cleanupOpencode2Env(v2);
      const home = v2.env.HOME as string;
      v2 = undefined;
      await waitUntil(() => processesWithHome(home).length === 0, 20_000);
      expect(processesWithHome(home)).toEqual([]);
    },
  );
});

async function waitUntil(done: () => boolean, ms: number): Promise<void> {
  const until = Date.now() + ms;
  while (!done() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 250));
}
