/**
 * End-to-end harness: runs the real OpenCode 1.18.33 binary (`opencode run`, `opencode serve`) in an isolated home
 * against a scripted OpenAI-compatible model. Findings it relies on are in docs/opencode-notes.md.
 *
 * - Every environment has its own HOME and XDG_CONFIG/DATA/STATE/CACHE dirs under one temporary root; the provider
 *   `fake/fake` and the plugin are written to that environment's global config (`$XDG_CONFIG_HOME/opencode/
 *   opencode.json`), so two environments can share one data dir and project dir while keeping their own config.
 * - Nothing is fetched at start-up: the config dir is pre-populated (`node_modules/` + a `package-lock.json` that lists
 *   `@opencode-ai/plugin`), `OPENCODE_DISABLE_MODELS_FETCH=1`, and `npm_config_registry` points at a closed port, so
 *   any attempted install would hang the start-up instead of passing silently.
 * - Every child is spawned in its own process group and killed (SIGKILL to the group) by `cleanupOpencodeEnv`, or when
 *   this process exits.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, parse } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { stopLocalServers } from "../plugin/transport/local-server/client.js";
import { prepareOpencodeConfigDir } from "./opencode-setup.js";

const REPO_ROOT = fileURLToPath(new URL("..", import.meta.url));

/**
 * Absolute path of opencode-ai 1.18.33's binary. Not `node_modules/.bin/opencode`: `@opencode/cli` (V2) declares the
 * same bin name, and which package's link wins there is up to npm.
 */
export const OPENCODE_BIN: string = join(REPO_ROOT, "node_modules", "opencode-ai", "bin", "opencode.exe");

/** Provider and model id of the scripted model in every environment. */
export const FAKE_MODEL = { providerID: "fake", modelID: "fake" } as const;

/** A closed port: a registry request there fails, and OpenCode's start-up install would hang rather than succeed. */
export const CLOSED_REGISTRY = "http://127.0.0.1:9/";

export interface OpencodeEnv {
  /**
   * Temporary directory of this environment, removed by cleanupOpencodeEnv. With `shareDataWith`, the project dir and
   * XDG_DATA_HOME live under the other environment's root: clean the sharing environment up first.
   */
  readonly root: string;
  /** The directory OpenCode runs in (its cwd). Shared with `shareDataWith`. */
  readonly projectDir: string;
  /** Complete environment for OpenCode processes: isolated HOME and XDG dirs, closed registry, no inherited OPENCODE_*. */
  readonly env: NodeJS.ProcessEnv;
}

export interface CreateOpencodeEnvOptions {
  /** Base URL of the scripted model, e.g. `http://127.0.0.1:PORT/v1`. */
  modelUrl: string;
  /**
   * The AI SDK provider OpenCode talks to `fake/fake` with: "openai-compatible" (default, POST {modelUrl}/chat/completions)
   * or "anthropic" (OpenCode's bundled @ai-sdk/anthropic, POST {modelUrl}/messages, with OpenCode's cache marks; see
   * docs/opencode-notes.md "Anthropic provider at a local URL").
   */
  modelApi?: "openai-compatible" | "anthropic";
  /** Absolute path of the plugin module; listed as `[path, pluginOptions]` when options are given. */
  pluginPath?: string;
  pluginOptions?: Record<string, unknown>;
  /** `limit.context` of the fake model (default 100000). */
  contextLimit?: number;
  /** `limit.output` of the fake model (default 4000). */
  outputLimit?: number;
  /** Added last, so it can override anything (e.g. `npm_config_registry`). */
  extraEnv?: Record<string, string>;
  /** `small_model` in opencode.json: default `fake/fake`; null leaves it out. */
  smallModel?: string | null;
  /** Use the same XDG_DATA_HOME (OpenCode's SQLite) and project dir as this environment: two "terminals". */
  shareDataWith?: OpencodeEnv;
}

export interface RunOpencodeOptions {
  /** Continue this session (`--session`). */
  session?: string;
  /** `--title`: also skips the title request. */
  title?: string;
  /** Default 90 s. On timeout the process group is killed and the promise rejects with the output's tail. */
  timeoutMs?: number;
  /** Appended to the arguments. */
  extraArgs?: string[];
  /**
   * "json" (default): `--format json`, one event per stdout line; the session id comes from it. "default": what a person
   * sees (reply on stdout, `Error: …` on stderr); `sessionId` is then only known when `session` was given.
   */
  format?: "json" | "default";
  /**
   * Measure the process's CPU time (user + system, all its threads) with `/usr/bin/time` (GNU time): `cpuS` in the
   * result. Throws when /usr/bin/time is missing.
   */
  cpuTime?: boolean;
  /** SIGKILLs the process group when aborted (a test's crash); the result then has code null. */
  kill?: AbortSignal;
}

export interface RunOpencodeResult {
  code: number | null;
  stdout: string;
  stderr: string;
  sessionId: string | undefined;
  /** Parsed `--format json` lines (empty in "default" format). */
  events: Array<Record<string, unknown>>;
  /** Text of the `text` events, joined with newlines (json format). */
  text: string;
  /** `error.data.message` (or the error's name) of every `error` event (json format). */
  errors: string[];
  /** With `cpuTime`: CPU seconds the opencode process used (user + system). */
  cpuS?: number;
  /** The process's pid (GNU time's with `cpuTime`). */
  pid: number | undefined;
}

export interface OpencodeServer {
  /** Base URL, e.g. `http://127.0.0.1:PORT` (no trailing slash). */
  readonly url: string;
  readonly pid: number;
  /** `POST /session` → the new session id. */
  createSession(title?: string): Promise<string>;
  /** `POST /session/:id/prompt_async` with the fake model; resolves when accepted (204), before the turn runs. */
  prompt(sessionId: string, text: string): Promise<void>;
  /**
   * Resolves when the session's turn is over: after the last `prompt()` on it, a `session.idle` or `session.error`
   * event was seen, `GET /session/status` no longer lists the session, and (within a short grace) the last assistant
   * message has `time.completed`. Without a prior `prompt()` it only waits for the status to clear.
   */
  waitIdle(sessionId: string, timeoutMs?: number): Promise<void>;
  /** `GET /session/:id/message`: `[{info, parts}]` in order. */
  // biome-ignore lint/suspicious/noExplicitAny: OpenCode's message JSON as returned; tests read whatever they need
  messages(sessionId: string): Promise<any[]>;
  /** `POST /session/:id/abort`. */
  abort(sessionId: string): Promise<void>;
  /** Sends `signal` (default SIGKILL) to the server's process group and waits up to 10 s for it to exit. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** `POST /instance/dispose` (runs the plugins' `dispose`), then SIGTERM, then SIGKILL after 5 s. */
  stop(): Promise<void>;
  /** stdout + stderr so far. */
  readonly output: () => string;
  /** Events received on `GET /event` so far (`{id, type, properties}`). */
  readonly events: () => ReadonlyArray<OpencodeEvent>;
}

export interface OpencodeEvent {
  readonly id?: string;
  readonly type: string;
  readonly properties: Record<string, unknown>;
}

interface EnvState {
  readonly children: Set<ChildProcess>;
  readonly aborters: Set<AbortController>;
}

/** Keyed by `root`, so a copy of an environment with a changed `env` still belongs to it. */
const states = new Map<string, EnvState>();
const liveChildren = new Set<ChildProcess>();

process.once("exit", () => {
  for (const child of liveChildren) killGroup(child, "SIGKILL");
});

function stateOf(env: OpencodeEnv): EnvState {
  const state = states.get(env.root);
  if (!state) throw new Error("not an environment made by createOpencodeEnv (or already cleaned up)");
  return state;
}

function tail(text: string, chars = 4000): string {
  return text.length <= chars ? text : `…${text.slice(-chars)}`;
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    try {
      child.kill(signal);
    } catch {
      // already gone
    }
  }
}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once("exit", () => resolve()));
}

async function waitExit(child: ChildProcess, ms: number): Promise<boolean> {
  const timer = delay(ms).then(() => false);
  return Promise.race([exited(child).then(() => true), timer]);
}

/** Directories that would make OpenCode install `@opencode-ai/plugin` (it walks up from the project dir to `/`). */
function dotOpencodeAncestors(dir: string): string[] {
  const found: string[] = [];
  let current = dir;
  for (;;) {
    const candidate = join(current, ".opencode");
    if (existsSync(candidate)) found.push(candidate);
    const parent = dirname(current);
    if (parent === current || current === parse(current).root) break;
    current = parent;
  }
  return found;
}

/**
 * Makes OpenCode's start-up install a no-op: `Npm.install(dir)` reifies only when `dir/node_modules` is missing or a
 * dependency of `package.json` (plus `@opencode-ai/plugin`) is missing from `package-lock.json`'s root package.
 */
function baseEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (/^OPENCODE/i.test(key) || /^npm_/i.test(key) || key.startsWith("XDG_")) continue;
    env[key] = value;
  }
  return env;
}

export async function createOpencodeEnv(options: CreateOpencodeEnvOptions): Promise<OpencodeEnv> {
  const root = await mkdtemp(join(tmpdir(), "optchat-e2e-"));
  const shared = options.shareDataWith;
  const projectDir = shared ? shared.projectDir : join(root, "project");
  const dataHome = shared ? (shared.env.XDG_DATA_HOME as string) : join(root, "xdg", "data");
  const configHome = join(root, "xdg", "config");
  const dirs = {
    HOME: join(root, "home"),
    XDG_CONFIG_HOME: configHome,
    XDG_DATA_HOME: dataHome,
    XDG_STATE_HOME: join(root, "xdg", "state"),
    XDG_CACHE_HOME: join(root, "xdg", "cache"),
  };
  for (const dir of [projectDir, ...Object.values(dirs)]) await mkdir(dir, { recursive: true });

  const blockers = dotOpencodeAncestors(projectDir);
  if (blockers.length > 0) {
    throw new Error(`${blockers.join(", ")} would make OpenCode install packages at start-up; remove it`);
  }

  const configDir = join(configHome, "opencode");
  prepareOpencodeConfigDir(configDir);
  const plugin = options.pluginPath
    ? [options.pluginOptions ? [options.pluginPath, options.pluginOptions] : options.pluginPath]
    : [];
  const config = {
    $schema: "https://opencode.ai/config.json",
    autoupdate: false,
    share: "disabled",
    model: `${FAKE_MODEL.providerID}/${FAKE_MODEL.modelID}`,
    ...(options.smallModel === null
      ? {}
      : { small_model: options.smallModel ?? `${FAKE_MODEL.providerID}/${FAKE_MODEL.modelID}` }),
    enabled_providers: [FAKE_MODEL.providerID],
    provider: {
      [FAKE_MODEL.providerID]: {
        npm: options.modelApi === "anthropic" ? "@ai-sdk/anthropic" : "@ai-sdk/openai-compatible",
        name: "Fake",
        options: { baseURL: options.modelUrl, apiKey: "x" },
        models: {
          [FAKE_MODEL.modelID]: {
            name: "fake",
            limit: { context: options.contextLimit ?? 100_000, output: options.outputLimit ?? 4_000 },
          },
        },
      },
    },
    plugin,
  };
  await writeFile(join(configDir, "opencode.json"), `${JSON.stringify(config, null, 2)}\n`);

  const env: NodeJS.ProcessEnv = {
    ...baseEnv(),
    ...dirs,
    npm_config_registry: CLOSED_REGISTRY,
    OPENCODE_DISABLE_MODELS_FETCH: "1",
    OPENCODE_DISABLE_AUTOUPDATE: "1",
    OPENCODE_DISABLE_SHARE: "1",
    OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
    // The plugin's compactor uses the deterministic summarizer unless extraEnv names another: with the default
    // (auto) it would take OpenCode's small_model, here the scripted model (a test can ask for that explicitly).
    OPTCHAT_SUMMARIZER: "fake",
    // The optchat local servers this environment's `opencode run`s start live under its root, and stop with it.
    TMPDIR: join(root, "tmp"),
    ...options.extraEnv,
  };
  await mkdir(join(root, "tmp"), { recursive: true });
  const result: OpencodeEnv = { root, projectDir, env };
  states.set(root, { children: new Set(), aborters: new Set() });
  return result;
}

function spawnTracked(env: OpencodeEnv, args: string[], prefix: readonly string[] = []): ChildProcess {
  const state = stateOf(env);
  const [command, ...rest] = [...prefix, OPENCODE_BIN, ...args] as [string, ...string[]];
  const child = spawn(command, rest, {
    cwd: env.projectDir,
    // OpenCode takes its directory from PWD when set: an inherited PWD would open a second instance elsewhere.
    env: { ...env.env, PWD: env.projectDir },
    stdio: ["pipe", "pipe", "pipe"],
    detached: true,
  });
  state.children.add(child);
  liveChildren.add(child);
  child.once("exit", () => {
    state.children.delete(child);
    liveChildren.delete(child);
  });
  return child;
}

function collectOutput(child: ChildProcess): { stdout: () => string; stderr: () => string; both: () => string } {
  let stdout = "";
  let stderr = "";
  let both = "";
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
    both += chunk;
  });
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
    both += chunk;
  });
  return { stdout: () => stdout, stderr: () => stderr, both: () => both };
}

function parseJsonLines(stdout: string): Array<Record<string, unknown>> {
  const events: Array<Record<string, unknown>> = [];
  for (const line of stdout.split("\n")) {
    const trimmed = line.trim();
    if (!trimmed.startsWith("{")) continue;
    try {
      events.push(JSON.parse(trimmed) as Record<string, unknown>);
    } catch {
      // not an event line
    }
  }
  return events;
}

/**
 * `opencode run -m fake/fake [--format json]`: the prompt goes on stdin, so its text reaches the model exactly (an
 * argument containing whitespace would be wrapped in double quotes; stdin is appended after any positional message).
 */
export async function runOpencode(
  env: OpencodeEnv,
  prompt: string,
  options: RunOpencodeOptions = {},
): Promise<RunOpencodeResult> {
  const format = options.format ?? "json";
  const args = ["run", "-m", `${FAKE_MODEL.providerID}/${FAKE_MODEL.modelID}`];
  if (format === "json") args.push("--format", "json");
  if (options.session) args.push("--session", options.session);
  if (options.title !== undefined) args.push("--title", options.title);
  args.push(...(options.extraArgs ?? []));
  const timesFile = options.cpuTime
    ? join(env.root, `cpu-${Date.now()}-${Math.random().toString(36).slice(2)}.txt`)
    : "";
  if (options.cpuTime && !existsSync(GNU_TIME)) throw new Error(`cpuTime needs ${GNU_TIME} (GNU time)`);
  const child = spawnTracked(env, args, options.cpuTime ? [GNU_TIME, "-f", "%U %S", "-o", timesFile] : []);
  const out = collectOutput(child);
  child.stdin?.on("error", () => {});
  child.stdin?.end(prompt);
  options.kill?.addEventListener("abort", () => killGroup(child, "SIGKILL"), { once: true });

  const timeoutMs = options.timeoutMs ?? 90_000;
  const done = new Promise<{ code: number | null }>((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code) => resolve({ code }));
  });
  const timedOut = Symbol("timeout");
  const cancelTimer = new AbortController();
  const timer = delay(timeoutMs, timedOut, { signal: cancelTimer.signal }).catch(() => timedOut);
  const first = await Promise.race([done, timer]).finally(() => cancelTimer.abort());
  if (first === timedOut) {
    killGroup(child, "SIGKILL");
    await waitExit(child, 5_000);
    throw new Error(
      `opencode ${args.join(" ")} did not finish within ${timeoutMs} ms (killed). Output tail:\n${tail(out.both())}`,
    );
  }
  const { code } = first as { code: number | null };
  const stdout = out.stdout();
  const events = format === "json" ? parseJsonLines(stdout) : [];
  const sessionId =
    (events.find((event) => typeof event.sessionID === "string")?.sessionID as string | undefined) ?? options.session;
  const text = events
    .filter((event) => event.type === "text")
    .map((event) => ((event.part as { text?: string } | undefined)?.text ?? "") as string)
    .join("\n");
  const errors = events
    .filter((event) => event.type === "error")
    .map((event) => {
      const error = event.error as { name?: string; data?: { message?: string } } | undefined;
      return error?.data?.message ?? error?.name ?? JSON.stringify(event.error);
    });
  const cpuS = options.cpuTime ? readCpuSeconds(timesFile) : undefined;
  return {
    code,
    pid: child.pid,
    stdout,
    stderr: out.stderr(),
    sessionId,
    events,
    text,
    errors,
    ...(cpuS === undefined ? {} : { cpuS }),
  };
}

const GNU_TIME = "/usr/bin/time";

/** `%U %S` as written by GNU time's `-o` (the last line: a signal note may come first). */
function readCpuSeconds(file: string): number | undefined {
  try {
    const last = readFileSync(file, "utf8").trim().split("\n").at(-1) ?? "";
    const [user, system] = last.split(" ").map(Number);
    return user !== undefined && system !== undefined && Number.isFinite(user + system) ? user + system : undefined;
  } catch {
    return undefined;
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * `opencode serve --port P --hostname 127.0.0.1` in the project dir. Resolves once it printed
 * `opencode server listening on http://127.0.0.1:P` and `GET /event` is connected. `--port 0` would bind 4096 when free,
 * so a free port is chosen here unless `port` is given.
 */
export async function startOpencodeServer(
  env: OpencodeEnv,
  options: { port?: number; startTimeoutMs?: number } = {},
): Promise<OpencodeServer> {
  const state = stateOf(env);
  const port = options.port ?? (await freePort());
  const child = spawnTracked(env, ["serve", "--port", String(port), "--hostname", "127.0.0.1"]);
  child.stdin?.end();
  const out = collectOutput(child);
  const startTimeoutMs = options.startTimeoutMs ?? 60_000;
  const started = Date.now();
  let url: string | undefined;
  while (!url) {
    const match = /listening on (http:\/\/[^\s]+)/.exec(out.both());
    if (match?.[1]) {
      url = match[1].replace(/\/$/, "");
      break;
    }
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(
        `opencode serve exited (${child.exitCode ?? child.signalCode}) before listening:\n${tail(out.both())}`,
      );
    }
    if (Date.now() - started > startTimeoutMs) {
      killGroup(child, "SIGKILL");
      throw new Error(`opencode serve did not listen within ${startTimeoutMs} ms:\n${tail(out.both())}`);
    }
    await delay(50);
  }
  const base = url;
  const pid = child.pid as number;

  const events: OpencodeEvent[] = [];
  const lastPromptAt = new Map<string, number>();
  const aborter = new AbortController();
  state.aborters.add(aborter);
  let markConnected: () => void = () => {};
  const eventsConnected = new Promise<void>((resolve) => {
    markConnected = resolve;
  });
  const readEvents = async (): Promise<void> => {
    const connecting = new AbortController();
    const connectTimer = setTimeout(() => connecting.abort(), 15_000);
    const onStop = () => connecting.abort();
    aborter.signal.addEventListener("abort", onStop, { once: true });
    try {
      const response = await fetch(`${base}/event`, { signal: connecting.signal });
      clearTimeout(connectTimer);
      if (!response.ok || !response.body) throw new Error(`GET /event -> ${response.status}`);
      markConnected();
      const decoder = new TextDecoder();
      let buffer = "";
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(chunk, { stream: true });
        for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
          const record = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = record
            .split("\n")
            .filter((line) => line.startsWith("data:"))
            .map((line) => line.slice(5).trimStart())
            .join("\n");
          if (!data) continue;
          try {
            const event = JSON.parse(data) as OpencodeEvent;
            if (event.type === "message.part.delta" || event.type === "plugin.added") continue;
            events.push(event);
          } catch {
            // not JSON
          }
        }
      }
    } finally {
      clearTimeout(connectTimer);
      aborter.signal.removeEventListener("abort", onStop);
    }
  };
  // Keeps the event stream open for the server's lifetime (reconnecting if it drops) so waitIdle sees every event.
  void (async () => {
    while (!aborter.signal.aborted && child.exitCode === null && child.signalCode === null) {
      await readEvents().catch(() => {});
      if (!aborter.signal.aborted) await delay(200);
    }
  })();

  async function request(method: string, path: string, body?: unknown): Promise<Response> {
    try {
      return await fetch(`${base}${path}`, {
        method,
        headers: body === undefined ? {} : { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(30_000),
      });
    } catch (error) {
      throw new Error(`${method} ${path} failed: ${String(error)}\nServer output tail:\n${tail(out.both())}`);
    }
  }

  async function json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const response = await request(method, path, body);
    const text = await response.text();
    if (!response.ok) throw new Error(`${method} ${path} -> ${response.status} ${text}\n${tail(out.both())}`);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  async function busy(sessionId: string): Promise<boolean> {
    const status = await json<Record<string, { type: string }>>("GET", "/session/status");
    const entry = status[sessionId];
    return entry !== undefined && entry.type !== "idle";
  }

  const eventSessionId = (event: OpencodeEvent): unknown => event.properties?.sessionID;

  const server: OpencodeServer = {
    url: base,
    pid,
    output: () => out.both(),
    events: () => events,
    async createSession(title?: string) {
      const session = await json<{ id: string }>("POST", "/session", title === undefined ? {} : { title });
      return session.id;
    },
    async prompt(sessionId: string, text: string) {
      lastPromptAt.set(sessionId, events.length);
      const response = await request("POST", `/session/${sessionId}/prompt_async`, {
        parts: [{ type: "text", text }],
        model: FAKE_MODEL,
      });
      if (response.status !== 204 && !response.ok) {
        throw new Error(`prompt_async -> ${response.status} ${await response.text()}\n${tail(out.both())}`);
      }
    },
    async waitIdle(sessionId: string, timeoutMs = 90_000) {
      const deadline = Date.now() + timeoutMs;
      const since = lastPromptAt.get(sessionId);
      const fail = (why: string) =>
        new Error(
          `session ${sessionId} ${why} within ${timeoutMs} ms. Its events: ${JSON.stringify(
            events.filter((event) => eventSessionId(event) === sessionId).map((event) => event.type),
          )}\nServer output tail:\n${tail(out.both())}`,
        );
      if (since !== undefined) {
        while (
          !events
            .slice(since)
            .some(
              (event) =>
                eventSessionId(event) === sessionId &&
                (event.type === "session.idle" || event.type === "session.error"),
            )
        ) {
          if (child.exitCode !== null || child.signalCode !== null) throw fail("server exited before it went idle");
          if (Date.now() > deadline) throw fail("did not reach session.idle/session.error");
          await delay(50);
        }
      }
      let quiet = 0;
      while (quiet < 2) {
        if (Date.now() > deadline) throw fail("stayed busy");
        quiet = (await busy(sessionId)) ? 0 : quiet + 1;
        if (quiet < 2) await delay(150);
      }
      // The first session.idle can precede the assistant's final message.updated by a few ms.
      const graceUntil = Math.min(deadline, Date.now() + 2_000);
      while (Date.now() < graceUntil) {
        const list = await server.messages(sessionId);
        const last = list.at(-1);
        if (!last || last.info?.role !== "assistant" || last.info?.time?.completed) break;
        await delay(100);
      }
      lastPromptAt.delete(sessionId);
    },
    async messages(sessionId: string) {
      return json("GET", `/session/${sessionId}/message`);
    },
    async abort(sessionId: string) {
      await json<boolean>("POST", `/session/${sessionId}/abort`);
    },
    async kill(signal: NodeJS.Signals = "SIGKILL") {
      aborter.abort();
      killGroup(child, signal);
      if (!(await waitExit(child, 10_000))) {
        throw new Error(`opencode serve (pid ${pid}) still running 10 s after ${signal}`);
      }
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        try {
          await fetch(`${base}/instance/dispose`, { method: "POST", signal: AbortSignal.timeout(10_000) });
        } catch {
          // stopping anyway
        }
      }
      aborter.abort();
      killGroup(child, "SIGTERM");
      if (!(await waitExit(child, 5_000))) {
        killGroup(child, "SIGKILL");
        await waitExit(child, 5_000);
      }
    },
  };

  const connected = await Promise.race([
    eventsConnected.then(() => true),
    delay(20_000, false, { ref: false }),
    exited(child).then(() => false),
  ]);
  if (!connected) {
    aborter.abort();
    killGroup(child, "SIGKILL");
    throw new Error(`GET ${base}/event did not connect within 20 s:\n${tail(out.both())}`);
  }
  return server;
}

/** Kills every process started for `env` (SIGKILL to each process group) and removes its temporary root. */
export async function cleanupOpencodeEnv(env: OpencodeEnv): Promise<void> {
  const state = states.get(env.root);
  if (!state) return;
  states.delete(env.root);
  for (const aborter of state.aborters) aborter.abort();
  const children = [...state.children];
  for (const child of children) killGroup(child, "SIGKILL");
  await Promise.all(children.map((child) => waitExit(child, 5_000)));
  await stopLocalServers(join(env.root, "tmp", `optchat-${process.getuid?.() ?? "user"}`));
  await rm(env.root, { recursive: true, force: true, maxRetries: 3 });
}

/** Pids of the optchat local servers running with their socket under `directory` (read from /proc). */
export function localServerPids(directory: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const args = readFileSync(`/proc/${entry}/cmdline`, "utf8");
      if (args.includes("local-server") && args.includes(directory)) pids.push(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return pids;
}
