/**
 * End-to-end harness for OpenCode V2 (`@opencode/cli` 2.1.2), beside scripts/opencode-harness.ts (V1). Findings it
 * relies on are in docs/opencode-v2-notes.md.
 *
 * - Every environment has its own HOME and XDG_CONFIG/DATA/STATE/CACHE dirs under one temporary root; the provider
 *   `fake/fake` (the scripted model, scripts/model-server.ts, OpenAI-compatible or Anthropic-simulated) and the plugin
 *   directories (`"plugins": [...]`, plural in V2) go to that environment's global config. `shareDataWith` shares the
 *   data dir (V2's `opencode.db`) and the project dir: two "terminals" on one machine.
 * - Nothing is fetched: `OPENCODE_DISABLE_MODELS_FETCH=1` and `npm_config_registry` at a closed port.
 * - `opencode run --standalone --auto --format json` runs one turn on a private server and exits; without
 *   `standalone` it talks to the environment's background service (`startService`), which `cleanupOpencode2Env`
 *   stops (`opencode service stop`, then SIGKILL to any process still holding the environment's root).
 * - Every child is spawned in its own process group and killed by cleanup or when this process exits.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { fileURLToPath } from "node:url";

const REPO_ROOT = fileURLToPath(new URL("..", import.meta.url));

/**
 * `@opencode/cli` 2.1.2's binary. It is installed apart from the project (tests/hosts/opencode-v2, by .ci/run or
 * `npm run setup:v2`): both it and opencode-ai declare the bin name `opencode`, and the project's `.bin/opencode` is V1.
 */
export const OPENCODE2_BIN: string = join(
  REPO_ROOT,
  "tests",
  "hosts",
  "opencode-v2",
  "node_modules",
  "@opencode",
  "cli",
  "bin",
  "opencode.exe",
);

/** Throws, saying how to install it, when OpenCode V2 is not installed. */
export function requireOpencode2(): void {
  if (!existsSync(OPENCODE2_BIN))
    throw new Error(
      `OpenCode V2 is not installed at ${OPENCODE2_BIN}: run \`npm run setup:v2\` (it installs @opencode/cli 2.1.2 under tests/hosts/opencode-v2, apart from the project's OpenCode V1).`,
    );
}

/** The V2 plugin directory (`plugin/v2/index.ts`), as a person lists it under `plugins`. */
export const OPTCHAT_V2_PLUGIN_DIR: string = join(REPO_ROOT, "plugin", "v2");

export const CLOSED_REGISTRY = "http://127.0.0.1:9/";

export interface Opencode2Env {
  readonly root: string;
  readonly projectDir: string;
  readonly env: NodeJS.ProcessEnv;
}

export interface CreateOpencode2EnvOptions {
  /** Base URL of the scripted model, e.g. `http://127.0.0.1:PORT/v1`. */
  modelUrl: string;
  modelApi?: "openai-compatible" | "anthropic";
  /** Absolute plugin directories (`<dir>/index.ts`). */
  plugins?: readonly string[];
  contextLimit?: number;
  outputLimit?: number;
  extraEnv?: Record<string, string>;
  shareDataWith?: Opencode2Env;
}

export interface RunOpencode2Options {
  session?: string;
  /** `--fork`: continue a copy of `session`. */
  fork?: boolean;
  /** Default true: a private server for this run. */
  standalone?: boolean;
  timeoutMs?: number;
  extraArgs?: string[];
}

export interface RunOpencode2Result {
  code: number | null;
  stdout: string;
  stderr: string;
  sessionId: string | undefined;
  events: Array<Record<string, unknown>>;
  /** Text of the `text` events, joined with newlines. */
  text: string;
  errors: string[];
}

const children = new Map<string, Set<ChildProcess>>();
const live = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of live) killGroup(child, "SIGKILL");
});

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

function baseEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (/^OPENCODE/i.test(key) || /^npm_/i.test(key) || key.startsWith("XDG_")) continue;
    env[key] = value;
  }
  return env;
}

export async function createOpencode2Env(options: CreateOpencode2EnvOptions): Promise<Opencode2Env> {
  requireOpencode2();
  const root = await mkdtemp(join(tmpdir(), "optchat-v2-"));
  const shared = options.shareDataWith;
  const projectDir = shared ? shared.projectDir : join(root, "project");
  const dirs = {
    HOME: join(root, "home"),
    XDG_CONFIG_HOME: join(root, "xdg", "config"),
    XDG_DATA_HOME: shared ? (shared.env.XDG_DATA_HOME as string) : join(root, "xdg", "data"),
    XDG_STATE_HOME: join(root, "xdg", "state"),
    XDG_CACHE_HOME: join(root, "xdg", "cache"),
  };
  for (const dir of [projectDir, join(root, "tmp"), ...Object.values(dirs)]) await mkdir(dir, { recursive: true });
  const configDir = join(dirs.XDG_CONFIG_HOME, "opencode");
  await mkdir(configDir, { recursive: true });
  const config = {
    autoupdate: false,
    share: "disabled",
    model: "fake/fake",
    small_model: "fake/fake",
    enabled_providers: ["fake"],
    provider: {
      fake: {
        npm: options.modelApi === "anthropic" ? "@ai-sdk/anthropic" : "@ai-sdk/openai-compatible",
        name: "Fake",
        options: { baseURL: options.modelUrl, apiKey: "x" },
        models: {
          fake: {
            name: "fake",
            limit: { context: options.contextLimit ?? 100_000, output: options.outputLimit ?? 4_000 },
          },
        },
      },
    },
    plugins: [...(options.plugins ?? [])],
  };
  await writeFile(join(configDir, "opencode.json"), `${JSON.stringify(config, null, 2)}\n`);
  const env: NodeJS.ProcessEnv = {
    ...baseEnv(),
    ...dirs,
    npm_config_registry: CLOSED_REGISTRY,
    OPENCODE_DISABLE_MODELS_FETCH: "1",
    OPENCODE_DISABLE_AUTOUPDATE: "1",
    OPTCHAT_SUMMARIZER: "fake",
    TMPDIR: join(root, "tmp"),
    ...options.extraEnv,
  };
  children.set(root, new Set());
  return { root, projectDir, env };
}

function spawnTracked(env: Opencode2Env, args: string[]): ChildProcess {
  const set = children.get(env.root);
  if (!set) throw new Error("not an environment made by createOpencode2Env (or already cleaned up)");
  const child = spawn(OPENCODE2_BIN, args, {
    cwd: env.projectDir,
    env: { ...env.env, PWD: env.projectDir },
    stdio: ["pipe", "pipe", "pipe"],
    detached: true,
  });
  set.add(child);
  live.add(child);
  child.once("exit", () => {
    set.delete(child);
    live.delete(child);
  });
  return child;
}

/** Runs `opencode <args>` to its end; the output is collected; rejects after `timeoutMs` (the group is killed). */
export async function execOpencode2(
  env: Opencode2Env,
  args: string[],
  input = "",
  timeoutMs = 90_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawnTracked(env, args);
  let stdout = "";
  let stderr = "";
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
  });
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  child.stdin?.on("error", () => {});
  child.stdin?.end(input);
  const timer = setTimeout(() => killGroup(child, "SIGKILL"), timeoutMs);
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (exit) => resolve(exit));
  }).finally(() => clearTimeout(timer));
  if (code === null) {
    throw new Error(
      `opencode ${args.join(" ")} was killed after ${timeoutMs} ms. stderr tail:\n${stderr.slice(-3000)}`,
    );
  }
  return { code, stdout, stderr };
}

/**
 * `opencode run [--standalone] --auto --format json`; the prompt goes on stdin (an argument with spaces is re-quoted
 * by V2, docs/opencode-v2-notes.md).
 */
export async function runOpencode2(
  env: Opencode2Env,
  prompt: string,
  options: RunOpencode2Options = {},
): Promise<RunOpencode2Result> {
  const args = ["run", "--auto", "--format", "json"];
  if (options.standalone !== false) args.push("--standalone");
  if (options.session) args.push("--session", options.session);
  if (options.fork) args.push("--fork");
  args.push(...(options.extraArgs ?? []));
  const { code, stdout, stderr } = await execOpencode2(env, args, prompt, options.timeoutMs);
  const events: Array<Record<string, unknown>> = [];
  for (const line of stdout.split("\n")) {
    if (!line.trim().startsWith("{")) continue;
    try {
      events.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // not an event line
    }
  }
  const sessionId = events.find((event) => typeof event.sessionID === "string")?.sessionID as string | undefined;
  const text = events
    .filter((event) => event.type === "text")
    .map((event) => (event.part as { text?: string } | undefined)?.text ?? "")
    .join("\n");
  const errors = events
    .filter((event) => event.type === "error")
    .map((event) => {
      const error = event.error as { message?: string; type?: string } | undefined;
      return error?.message ?? error?.type ?? JSON.stringify(event.error);
    });
  return { code, stdout, stderr, sessionId: sessionId ?? options.session, events, text, errors };
}

/**
 * `opencode service start` for this environment (its env decides the service's directories and plugins), on a free
 * port set first: V2's managed service listens on one fixed port (49374) by default, so two environments' services
 * (two benches, two engineers) would collide ("Managed service port … is already in use").
 */
export async function startService(env: Opencode2Env): Promise<void> {
  const port = await freePort();
  const set = await execOpencode2(env, ["service", "set", "port", String(port)], "", 30_000);
  if (set.code !== 0) throw new Error(`opencode service set port ${port} failed (${set.code}): ${set.stderr}`);
  const result = await execOpencode2(env, ["service", "start"], "", 60_000);
  if (result.code !== 0) throw new Error(`opencode service start failed (${result.code}): ${result.stderr}`);
}

/** A port nothing listens on now (the kernel's pick, released at once). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() =>
        typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port")),
      );
    });
  });
}

/** `opencode service stop`; resolves whether it succeeded or not (cleanup kills what is left). */
export async function stopService(env: Opencode2Env): Promise<void> {
  await execOpencode2(env, ["service", "stop"], "", 30_000).catch(() => undefined);
}

/** Pids of every process whose command line or environment names this environment's root (the service included). */
export function processesOf(env: Opencode2Env): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const environ = readFileSync(`/proc/${entry}/environ`, "utf8");
      if (environ.includes(`XDG_CONFIG_HOME=${env.env.XDG_CONFIG_HOME}`)) pids.push(Number(entry));
    } catch {
      // gone, or not ours to read
    }
  }
  return pids;
}

/** Stops the service, kills every child and any process still in this environment, removes the root. */
export async function cleanupOpencode2Env(env: Opencode2Env): Promise<void> {
  await stopService(env);
  for (const child of children.get(env.root) ?? []) killGroup(child, "SIGKILL");
  for (let attempt = 0; attempt < 20; attempt++) {
    const left = processesOf(env);
    if (left.length === 0) break;
    for (const pid of left) {
      try {
        process.kill(pid, attempt < 5 ? "SIGTERM" : "SIGKILL");
      } catch {
        // gone
      }
    }
    await delay(250);
  }
  children.delete(env.root);
  await rm(env.root, { recursive: true, force: true });
}
