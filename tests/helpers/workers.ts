import { type ChildProcess, spawn } from "node:child_process";
import { afterAll } from "vitest";
import type { TestMemory } from "./memory.js";
import { eventually } from "./polling.js";
import { ROOT, TEST_SUMMARIZER_ENV } from "./processes.js";

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
  await eventually(
    async () => {
      if (events.some((e) => e.type === "ready")) return true;
      if (child.exitCode !== null) throw new Error(`worker did not start: ${stderr}`);
      return undefined;
    },
    90_000,
    () => `the worker to start: ${stderr}`,
    50,
  );
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
