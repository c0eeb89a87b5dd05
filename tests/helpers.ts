import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import type { Clock, Timer } from "../plugin/base/clock.js";
import { withDatabase } from "../scripts/bench/common.js";
import { type ModelServer, startModelServer } from "../scripts/model-server.js";
import {
  type CreateOpencodeEnvOptions,
  cleanupOpencodeEnv,
  createOpencodeEnv,
  type OpencodeEnv,
  type OpencodeServer,
  startOpencodeServer,
} from "../scripts/opencode-harness.js";
import { type Config, resolveConfig, type SettingName } from "../src/memory/config.js";
import type { IngestResult } from "../src/memory/ingest.js";
import type { IngestEvent } from "../src/memory/schemas.js";
import { type Memory, openMemory } from "../src/memory/service.js";
import { startWorker } from "../src/memory/worker.js";
import type { Session } from "../src/store/sessions.js";

export const ROOT = fileURLToPath(new URL("..", import.meta.url));

async function adminQuery(sql: string): Promise<void> {
  const admin = new pg.Client({ connectionString: inject("adminUrl") });
  await admin.connect();
  try {
    await admin.query(sql);
  } finally {
    await admin.end();
  }
}

/** A fresh database cloned from the migrated template; named after this process so leftovers can be cleaned. */
export async function createTestDatabase(): Promise<{ name: string; url: string; drop(): Promise<void> }> {
  const name = `optchat_t_${process.pid}_${randomBytes(4).toString("hex")}`;
  await adminQuery(`CREATE DATABASE ${name} TEMPLATE ${inject("templateDatabase")}`);
  return {
    name,
    url: withDatabase(inject("adminUrl"), name),
    drop: () => adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`),
  };
}

/**
 * A database outage as clients see it: new connections refused (SQLSTATE 55000) and open ones terminated, until the
 * returned function lets them in again.
 */
export async function refuseConnections(name: string): Promise<() => Promise<void>> {
  await adminQuery(`ALTER DATABASE ${name} WITH ALLOW_CONNECTIONS false`);
  await adminQuery(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${name}'`);
  return () => adminQuery(`ALTER DATABASE ${name} WITH ALLOW_CONNECTIONS true`);
}

/** A name for a database that does not exist yet (for tests of `optchat migrate` creating it). */
export function freshDatabaseName(): { name: string; url: string; drop(): Promise<void> } {
  const name = `optchat_t_${process.pid}_${randomBytes(4).toString("hex")}`;
  return {
    name,
    url: withDatabase(inject("adminUrl"), name),
    drop: () => adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`),
  };
}

export interface TestMemory {
  memory: Memory;
  config: Config;
  url: string;
}

/** Registers beforeAll/afterAll hooks giving the file its own database and an open memory service. */
export function useTestMemory(overrides: Partial<Record<SettingName, string | number>> = {}): TestMemory {
  const handle = {} as TestMemory;
  let drop: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    const db = await createTestDatabase();
    drop = db.drop;
    handle.url = db.url;
    // The deterministic summarizer unless a test names another: the default (auto) would look for a real model.
    handle.config = resolveConfig({
      overrides: { poolSize: 12, summarizer: "fake", ...overrides, databaseUrl: db.url },
    });
    handle.memory = await openMemory(handle.config);
  });
  afterAll(async () => {
    await handle.memory?.close();
    await drop?.();
  });
  return handle;
}

/** An ingest event as tests write it: the finalization key flattened to `host`, `messageId` and an optional `partId`. */
export type TestEvent = Omit<IngestEvent, "finalization"> & {
  readonly host: string;
  readonly messageId: string;
  readonly partId?: string;
};

/** The ingest event of a test message (the one fixture builder for ingest events). */
export function ingestEvent({ host, messageId, partId, ...event }: TestEvent): IngestEvent {
  return { ...event, finalization: { hostSessionId: host, messageId, ...(partId !== undefined ? { partId } : {}) } };
}

/**
 * Ingests a test file's messages numbered across all its sessions: the n-th is message `m<n>` of its session's host
 * session and occurred n seconds after `start` (epoch ms), so their ids are unique and their times in order.
 */
export function messageWriter(
  db: { readonly memory: Memory },
  start: number,
): (
  session: Pick<Session, "sessionId" | "hostSessionId">,
  turnId: string,
  kind: IngestEvent["kind"],
  content: string,
  extra?: Partial<TestEvent>,
) => Promise<IngestResult> {
  let n = 0;
  return async (session, turnId, kind, content, extra = {}) => {
    n += 1;
    return await db.memory.ingest(
      ingestEvent({
        sessionId: session.sessionId,
        turnId,
        kind,
        host: session.hostSessionId,
        messageId: `m${n}`,
        occurredAt: new Date(start + n * 1000).toISOString(),
        content,
        ...extra,
      }),
    );
  };
}

/**
 * One publishing turn per call: admitted with its first text as the query, its texts written as alternating user and
 * assistant messages (through `messageWriter`), then finished as completed.
 */
export function turnWriter(
  db: { readonly memory: Memory },
  start: number,
): (session: Pick<Session, "sessionId" | "hostSessionId">, turnId: string, texts: readonly string[]) => Promise<void> {
  const writeMessage = messageWriter(db, start);
  return async (session, turnId, texts) => {
    await db.memory.admitTurn({ sessionId: session.sessionId, turnId, query: texts[0], publishes: true });
    for (const [k, text] of texts.entries()) await writeMessage(session, turnId, k === 0 ? "user" : "assistant", text);
    await db.memory.finishTurn({ sessionId: session.sessionId, turnId }, "completed");
  };
}

/** Waits until no backend of the pool's database is left idle in a transaction (a killed one rolled back). */
export async function noOpenTransaction(db: Pick<pg.Pool, "query">): Promise<void> {
  await eventually(
    async () => {
      const { rows } = await db.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
      );
      return rows[0].n === 0 ? true : undefined;
    },
    10_000,
    "the killed transaction to be rolled back",
  );
}

/**
 * One test per step a fixture stops at (it prints `STOPPED <step>` there): the process is SIGKILLed at that step, and
 * once its transaction is rolled back `digest()` is what it was before (a crash leaves the previous state).
 */
export function itLeavesThePreviousStateWhenKilled(
  db: { readonly memory: Memory },
  steps: readonly string[],
  start: (step: string) => ChildProcess,
  digest: () => Promise<Record<string, string>>,
): void {
  for (const step of steps) {
    it(`leaves the previous state when killed at ${step}`, async () => {
      const before = await digest();
      const child = start(step);
      const finished = collect(child);
      await waitForLine(child, /^STOPPED /);
      child.kill("SIGKILL");
      expect((await finished).signal).toBe("SIGKILL");
      await noOpenTransaction(db.memory.pool);
      expect(await digest()).toEqual(before);
    }, 60_000);
  }
}

/** A new session holding one message of turn t1 (not admitted), at 2026-11-20T10:00:00Z. */
export async function sessionWithOneMessage(
  memory: Memory,
  input: {
    hostSessionId: string;
    projectId: string;
    kind: "user" | "assistant";
    content: string;
    host?: string;
    messageId?: string;
  },
): Promise<Session> {
  const { hostSessionId, projectId, kind, content, host = "test", messageId = "m0" } = input;
  const session = await memory.openSession({ host, hostSessionId, projectId });
  await memory.ingest(
    ingestEvent({
      sessionId: session.sessionId,
      turnId: "t1",
      kind,
      host: hostSessionId,
      messageId,
      occurredAt: "2026-11-20T10:00:00Z",
      content,
    }),
  );
  return session;
}

/** Counts turns of the event loop (setImmediate callbacks) until stopped: a task that never yields sees none. */
export function loopTurns(): { stop(): number } {
  let turns = 0;
  let running = true;
  const tick = () => {
    if (!running) return;
    turns++;
    setImmediate(tick);
  };
  setImmediate(tick);
  return {
    stop() {
      running = false;
      return turns;
    },
  };
}

export function readFixture<T = unknown>(name: string): T {
  return JSON.parse(readFileSync(new URL(`./fixtures/${name}`, import.meta.url), "utf8")) as T;
}

/** A deterministic pseudo-random generator (mulberry32) so shuffles are reproducible from a printed seed. */
export { seededRandom } from "../scripts/bench/common.js";

export function shuffled<T>(items: readonly T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

/** Starts a TypeScript script of the project in its own Node process. */
export function startScript(script: string, args: readonly string[], env: Record<string, string> = {}): ChildProcess {
  return spawn(process.execPath, ["--import", "tsx", script, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
}

export interface Finished {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export function collect(child: ChildProcess): Promise<Finished> {
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (chunk) => {
    stdout += chunk;
  });
  child.stderr?.on("data", (chunk) => {
    stderr += chunk;
  });
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

/** A large model window for assembling context in service-level tests (every block fits). */
export const LARGE_WINDOW = {
  windowTokens: 200_000,
  instructionsTokens: 2000,
  activeTokens: 500,
  outputTokens: 8000,
  reserveTokens: 1000,
} as const;

/** A 100,000-token model window with the instructions, active turn and output of a small session's request. */
export const MEDIUM_WINDOW = {
  windowTokens: 100_000,
  instructionsTokens: 3000,
  activeTokens: 1000,
  outputTokens: 4000,
  reserveTokens: 1000,
} as const;

/**
 * Child processes use the deterministic summarizer unless a test says otherwise: the default (auto) would pick a
 * real provider from ANTHROPIC_API_KEY / OPENAI_API_KEY in the developer's environment.
 */
export const TEST_SUMMARIZER_ENV = { OPTCHAT_SUMMARIZER: "fake" } as const;

/** Runs the `optchat` CLI as a user would (bin/optchat.mjs) and waits for it. */
export function runCli(args: readonly string[], env: Record<string, string> = {}): Promise<Finished> {
  const child = spawn(process.execPath, [`${ROOT}/bin/optchat.mjs`, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...TEST_SUMMARIZER_ENV, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  return collect(child);
}

/** Resolves with the first stdout line matching `pattern` (rejects if the process ends first). */
export function waitForLine(child: ChildProcess, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffer = "";
    const onData = (chunk: Buffer) => {
      buffer += chunk.toString();
      for (const line of buffer.split("\n")) {
        if (pattern.test(line)) {
          child.stdout?.off("data", onData);
          resolve(line);
          return;
        }
      }
    };
    child.stdout?.on("data", onData);
    child.on("close", (code) => reject(new Error(`process ended (${code}) before printing ${pattern}`)));
  });
}

/** Starts `optchat worker --json` against `databaseUrl` and resolves once it reports ready. */
export async function startWorkerProcess(
  databaseUrl: string,
  env: Record<string, string> = {},
): Promise<WorkerProcess> {
  const child = spawn(process.execPath, [`${ROOT}/bin/optchat.mjs`, "worker", "--json"], {
    cwd: ROOT,
    env: { ...process.env, ...TEST_SUMMARIZER_ENV, DATABASE_URL: databaseUrl, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const events: Record<string, unknown>[] = [];
  let buffer = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    buffer += chunk.toString();
    const lines = buffer.split("\n");
    buffer = lines.pop() ?? "";
    for (const line of lines) if (line.trim()) events.push(JSON.parse(line));
  });
  let stderr = "";
  child.stderr?.on("data", (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("close", (code, signal) => resolve({ code, signal })),
  );
  // A worker process's start (tsx, pg-boss, its schema check) takes ~2 s on an idle machine and over 30 s was seen at
  // load average ~12 (the full suite beside benches): a bound for a hung start, not a speed target.
  const deadline = Date.now() + 90_000;
  while (!events.some((e) => e.type === "ready")) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`worker did not start: ${stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { child, events, exited, stderr: () => stderr };
}

export interface WorkerProcess {
  child: ChildProcess;
  /** Every JSON event the worker printed so far. */
  events: Record<string, unknown>[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr(): string;
}

/**
 * Registers an afterAll hook that kills every worker process the file started with `start` (on its database, with
 * `defaults` under each call's env) and is still running; SIGCONT first, so that a paused one dies too.
 */
export function useWorkerProcesses(
  db: Pick<TestMemory, "url">,
  defaults: Record<string, string> = {},
): { readonly all: readonly WorkerProcess[]; start(env?: Record<string, string>): Promise<WorkerProcess> } {
  const all: WorkerProcess[] = [];
  afterAll(async () => {
    for (const w of all) {
      if (w.child.exitCode === null) {
        w.child.kill("SIGCONT");
        w.child.kill("SIGKILL");
      }
    }
  });
  return {
    all,
    async start(env = {}) {
      const worker = await startWorkerProcess(db.url, { ...defaults, ...env });
      all.push(worker);
      return worker;
    },
  };
}

/** Polls `check` until it returns a value (not undefined) or `timeoutMs` passes. */
export async function eventually<T>(
  check: () => Promise<T | undefined>,
  timeoutMs: number,
  what: string | (() => string),
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === "string" ? what : what()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Waits until `count` backends of the pool's database wait on a lock (pg_stat_activity): the moment a concurrent
 * writer is known to be blocked behind a held transaction, instead of a sleep that hopes it got there.
 */
export async function waitForLockWaiters(db: Pick<pg.Pool, "query">, count = 1, timeoutMs = 10_000): Promise<void> {
  await eventually(
    async () => {
      const { rows } = await db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
      );
      return (rows[0]?.n ?? 0) >= count ? true : undefined;
    },
    timeoutMs,
    `${count} backend(s) waiting on a lock`,
  );
}

/**
 * Waits until no optchat job is queued or running (pgboss.job): what a started worker would do has been done. For
 * "nothing happens" checks, instead of a sleep that hopes a stray job would have run by then.
 */
export async function waitForIdleQueues(db: Pick<pg.Pool, "query">, timeoutMs = 30_000): Promise<void> {
  await eventually(
    async () => {
      const { rows } = await db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pgboss.job WHERE name LIKE 'optchat-%' AND state IN ('created', 'retry', 'active')",
      );
      return rows[0]?.n === 0 ? true : undefined;
    },
    timeoutMs,
    "the job queues to drain",
  );
}

/** Waits until the database holds exactly `count` publications (of every scope). */
export async function waitForPublications(
  db: Pick<pg.Pool, "query">,
  count: number,
  timeoutMs: number,
  what: string,
): Promise<void> {
  await eventually(
    async () => {
      const { rows } = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM optchat.publications");
      return rows[0]?.n === count ? true : undefined;
    },
    timeoutMs,
    what,
  );
}

/** Polls `check` until it resolves without throwing, or `timeoutMs` passes (then fails with the last error). */
export async function retrying<T>(check: () => Promise<T>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (error) {
      if (Date.now() > deadline) {
        throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}: ${(error as Error).message}`);
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The plugin module OpenCode loads in the e2e tests: this checkout's. */
export const PLUGIN_PATH = `${ROOT}plugin/index.ts`;

/**
 * What an e2e test file runs OpenCode against: a fresh database, a pool on it, the scripted model, and the OpenCode
 * environments and servers it starts (all cleaned up by `close`, newest first).
 */
export interface PluginWorld {
  readonly database: { name: string; url: string; drop(): Promise<void> };
  readonly db: pg.Pool;
  readonly model: ModelServer;
  /** An OpenCode environment loading the plugin on this world's database (options and env merged over defaults). */
  env(options?: Partial<Omit<CreateOpencodeEnvOptions, "modelUrl" | "pluginPath">>): Promise<OpencodeEnv>;
  server(env: OpencodeEnv): Promise<OpencodeServer>;
  close(): Promise<void>;
}

export async function startPluginWorld(): Promise<PluginWorld> {
  const database = await createTestDatabase();
  const db = new pg.Pool({ connectionString: database.url, max: 2 });
  // A dropped idle connection is reported by the next query, not as an uncaught exception in the test process.
  db.on("error", () => {});
  const model = await startModelServer();
  const envs: OpencodeEnv[] = [];
  const servers: OpencodeServer[] = [];
  return {
    database,
    db,
    model,
    async env(options = {}) {
      const env = await createOpencodeEnv({
        ...options,
        modelUrl: model.url,
        pluginPath: PLUGIN_PATH,
        pluginOptions: { databaseUrl: database.url, ...options.pluginOptions },
        extraEnv: { OPTCHAT_READINESS_WAIT_MS: "30000", OPTCHAT_LEASE_SECONDS: "10", ...options.extraEnv },
      });
      envs.push(env);
      return env;
    },
    async server(env) {
      const server = await startOpencodeServer(env);
      servers.push(server);
      return server;
    },
    async close() {
      await Promise.allSettled(servers.map((server) => server.stop()));
      // Environments sharing another's data dir live under its root: the newest (the sharer) goes first.
      for (const env of envs.reverse()) await cleanupOpencodeEnv(env).catch(() => {});
      await model.close();
      await db.end();
      await database.drop();
    },
  };
}

/** What `usePluginServer` gives an e2e file: its plugin world and one OpenCode server on a default environment. */
export interface PluginServer {
  readonly world: PluginWorld;
  readonly db: pg.Pool;
  readonly model: ModelServer;
  readonly server: OpencodeServer;
  /** The environment's project directory (where the agent's tools run). */
  readonly projectDir: string;
  /** Sends `text` to the session and waits until the session is idle again. */
  ask(session: string, text: string): Promise<void>;
}

/** Registers beforeAll/afterAll hooks giving the file a plugin world with one OpenCode server (see `PluginServer`). */
export function usePluginServer(waitMs: number): PluginServer {
  const handle = {
    async ask(session: string, text: string) {
      await handle.server.prompt(session, text);
      await handle.server.waitIdle(session, waitMs);
    },
  } as { -readonly [K in keyof PluginServer]: PluginServer[K] };
  beforeAll(async () => {
    handle.world = await startPluginWorld();
    ({ db: handle.db, model: handle.model } = handle.world);
    const env = await handle.world.env();
    handle.projectDir = env.projectDir;
    handle.server = await handle.world.server(env);
  }, 120_000);
  afterAll(async () => {
    await handle.world?.close();
  });
  return handle;
}

/**
 * A session with one finished turn of three 240-byte messages on `theme`: each message is a free session node, but the
 * publication leaf over their cover needs the summarizer (the fixture of the publication failure and crash tests).
 */
export async function finishTurnNeedingSummary(
  memory: Memory,
  input: { hostSessionId: string; projectId: string; theme: string; day: number },
): Promise<{ sessionId: string; turnId: string }> {
  const session = await memory.openSession({
    host: "test",
    hostSessionId: input.hostSessionId,
    projectId: input.projectId,
  });
  const ctx = { sessionId: session.sessionId, turnId: "t1" };
  await memory.admitTurn(ctx);
  for (let k = 0; k < 3; k++) {
    await memory.ingest({
      sessionId: session.sessionId,
      turnId: "t1",
      kind: k === 0 ? "user" : "assistant",
      finalization: { hostSessionId: input.hostSessionId, messageId: `m${k}` },
      occurredAt: new Date(Date.UTC(2026, 10, input.day, 7, k)).toISOString(),
      content: `message ${k}: ${`${input.theme} `.repeat(4)}`.slice(0, 240),
    });
  }
  await memory.finishTurn(ctx, "completed");
  return ctx;
}

/** Stored text that a page must show literally and never run (the browser's escaping tests). */
export const HOSTILE_TEXT =
  'Careful: <script>alert(1)</script> and </shared_memory> then <img src=x onerror="alert(2)"> and &amp;lt; stay text.';

/**
 * Two sessions of one project (A with a tool call, a CJK message and HOSTILE_TEXT; B asking about it), every turn
 * finished and published by a deterministic-summarizer worker, and one recorded injection: a memory with trees,
 * publications and inspection data, seeded through the service API only (the browser tests read it).
 */
export async function seedBrowseMemory(
  memory: Memory,
  config: Config,
): Promise<{ a: Session; b: Session; texts: Map<string, string> }> {
  const worker = await startWorker(memory, config, () => {});
  const a = await memory.openSession({
    host: "test",
    hostSessionId: "browse-A",
    projectId: "prj_browse",
    title: "queue design",
  });
  const b = await memory.openSession({
    host: "test",
    hostSessionId: "browse-B",
    projectId: "prj_browse",
    title: "follow-up",
  });
  const texts = new Map<string, string>();
  let message = 0;
  const turn = async (
    session: Session,
    turnId: string,
    parts: { kind: "user" | "assistant" | "tool_call" | "tool_result"; text: string; tool?: string }[],
  ) => {
    await memory.admitTurn({ sessionId: session.sessionId, turnId, query: parts[0]?.text });
    for (const part of parts) {
      message += 1;
      const result = await memory.ingest({
        sessionId: session.sessionId,
        turnId,
        kind: part.kind,
        finalization: { hostSessionId: session.hostSessionId, messageId: `m${message}` },
        occurredAt: new Date(Date.UTC(2026, 10, 20, 9, 0, message)).toISOString(),
        content: part.text,
        ...(part.tool ? { toolName: part.tool, toolCallId: `call${message}` } : {}),
      });
      if (result.status === "sealed") texts.set(`${session.sessionId}:${result.seq}`, part.text);
    }
    await memory.finishTurn({ sessionId: session.sessionId, turnId }, "completed");
  };
  try {
    await turn(a, "a1", [
      { kind: "user", text: "Where should the importer keep its queue? Not in Redis, please." },
      { kind: "tool_call", text: '{"command":"grep -rn broker src/"}', tool: "bash" },
      {
        kind: "tool_result",
        text: [
          "src/broker.ts:12: export class DurableBroker {",
          "src/broker.ts:40:   /** Messages survive a restart: every enqueue is fsynced before it is acknowledged. */",
          "src/broker.ts:41:   async enqueue(queue: string, message: Uint8Array): Promise<void> {",
          "src/importer.ts:7: // TODO: the importer still keeps its work list in memory and loses it on a crash",
          "src/importer.ts:19:   private readonly pending: ImportItem[] = []; // lost when the process dies",
          "src/importer.ts:42:   async run(): Promise<void> { for (const item of this.pending) await this.importOne(item); }",
          "src/queue/redis.ts:3: // unused since the broker landed; kept for the old deployment scripts",
        ].join("\n"),
        tool: "bash",
      },
      {
        kind: "assistant",
        text: "Decision: the importer uses the Broker's durable queue, no Redis. The broker already fsyncs every enqueue before acknowledging it (src/broker.ts:40), so a crash loses nothing, and one more service to run and back up is not worth it.\n\nNext: move the importer's in-memory work list onto that queue.",
      },
    ]);
    await turn(a, "a2", [
      { kind: "user", text: "我们把数据存进队列吗？" },
      { kind: "assistant", text: HOSTILE_TEXT },
    ]);
    // A's turns are published before B's starts: publications of different sessions are ordered by when their
    // covers are summarized, not by when the turns finished, and the pages' tests read the numbering.
    await waitForPublications(memory.pool, 2, 60_000, "A's two publications");
    await turn(b, "b1", [
      { kind: "user", text: "What did session A decide about the queue?" },
      { kind: "assistant", text: "It chose the broker's durable queue." },
    ]);
    await waitForPublications(memory.pool, 3, 60_000, "three publications");
    await memory.host.recordInjection({
      sessionId: b.sessionId,
      turnId: "b1",
      holder: "test-holder",
      status: "injected",
      mode: "replace",
      query: "What did session A decide about the queue?",
      detail: { tokens: { used: 120, available: 180000 }, blocks: ["shared_memory"], note: "</shared_memory>" },
      error: null,
    });
  } finally {
    await worker.stop();
  }
  return { a, b, texts };
}

/** A digest of every row of every optchat table and of pgboss.job: equal digests mean nothing was written. */
export async function databaseDigest(db: Pick<pg.Pool, "query">): Promise<Record<string, string>> {
  const { rows: tables } = await db.query<{ name: string }>(
    `SELECT format('%I.%I', table_schema, table_name) AS name FROM information_schema.tables
      WHERE table_type = 'BASE TABLE' AND (table_schema = 'optchat' OR (table_schema = 'pgboss' AND table_name = 'job'))
      ORDER BY 1`,
  );
  const digest: Record<string, string> = {};
  for (const { name } of tables) {
    const { rows } = await db.query<{ md5: string }>(
      `SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) AS md5 FROM ${name} t`,
    );
    digest[name] = rows[0]?.md5 ?? "";
  }
  return digest;
}

/**
 * A clock that moves only when the test says so (plugin/base/clock.ts): the adapter's idle grace, lease renewals and job
 * retry waits then run when `advance` reaches them, so a test proves "nothing before the grace, the outcome after it"
 * without sleeping through it.
 */
export class ManualClock implements Clock {
  private current: number;
  private readonly timers = new Map<number, { due: number; run: () => void; every: number | undefined }>();
  private nextId = 1;

  constructor(start = Date.UTC(2026, 10, 30, 9, 0, 0)) {
    this.current = start;
  }

  now(): number {
    return this.current;
  }

  setTimeout(run: () => void, ms: number): Timer {
    return this.add(run, ms, undefined);
  }

  setInterval(run: () => void, ms: number): Timer {
    return this.add(run, ms, ms);
  }

  clear(timer: Timer | undefined): void {
    if (timer) this.timers.delete(timer.id as number);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const timer = this.add(resolve, ms, undefined);
      signal?.addEventListener(
        "abort",
        () => {
          this.clear(timer);
          resolve();
        },
        { once: true },
      );
    });
  }

  /** Timers waiting to fire. */
  get pending(): number {
    return this.timers.size;
  }

  /** Moves time forward by `ms`, firing every timer that falls due on the way, in order of due time. */
  advance(ms: number): void {
    const until = this.current + ms;
    for (;;) {
      const next = [...this.timers.entries()].sort((a, b) => a[1].due - b[1].due)[0];
      if (!next || next[1].due > until) break;
      const [id, timer] = next;
      this.current = Math.max(this.current, timer.due);
      if (timer.every === undefined) this.timers.delete(id);
      else timer.due += Math.max(1, timer.every);
      timer.run();
    }
    this.current = until;
  }

  private add(run: () => void, ms: number, every: number | undefined): Timer {
    const id = this.nextId++;
    this.timers.set(id, { due: this.current + Math.max(0, ms), run, every });
    return { id };
  }
}
