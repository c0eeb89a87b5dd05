import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import type { Memory } from "../../src/memory/service.js";
import { noOpenTransaction } from "./database.js";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));

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
