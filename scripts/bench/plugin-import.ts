/**
 * `bench plugin`, case `import`: what importing the plugin's entry module costs in OpenCode's own Bun (the first
 * thing every `opencode run` pays for the plugin, before its first request; issue 9 item 2). Each round starts
 * OpenCode's binary as Bun (`BUN_BE_BUN=1`) on a script that imports the module once and reports its wall time and the
 * process's CPU time over the import (all threads: Bun's transpiler and the modules' own code). With
 * OPTCHAT_BENCH_PLUGIN_BASELINE the baseline's module is imported in the same rounds, alternating order.
 *
 * The plugin runs in a thread of its own (plugin/transport/remote-hooks.ts): OpenCode's thread imports the entry module and the
 * bridge (`importMs`, `importCpuMs`: what the run waits for), the plugin's thread the rest beside it (`threadImportMs`,
 * `threadImportCpuMs`: plugin/host/hooks.ts, which the thread's entry imports; CPU on another core). Each is measured in
 * its own process. The baseline entry is imported alone, as OpenCode imports any plugin.
 *
 * CPU time is the steadier figure on a busy machine: the wall time also counts waiting for a core. A bare Bun start
 * imports nothing of the plugin; builtins the plugin needs (`node:net`, `node:crypto`...) are counted here although
 * OpenCode has loaded some of them already, so both figures are upper bounds of what a run pays.
 * Environment:
 *   OPTCHAT_BENCH_PLUGIN_IMPORTS   rounds (default 9; 0 skips the case)
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { OPENCODE_BIN } from "../opencode-harness.js";
import { emit, envNumber, median, round } from "./common.js";

const SCRIPT = `const started = performance.now();
const cpu = process.cpuUsage();
for (const module of process.env.OPTCHAT_BENCH_IMPORT.split(",")) await import(module);
const used = process.cpuUsage(cpu);
console.log(JSON.stringify({ ms: performance.now() - started, cpuMs: (used.user + used.system) / 1000 }));
`;

interface ImportFigures {
  readonly ms: number;
  readonly cpuMs: number;
}

function importOnce(script: string, entry: string): Promise<ImportFigures> {
  return new Promise((resolve, reject) => {
    const child = spawn(OPENCODE_BIN, [script], {
      env: { ...process.env, BUN_BE_BUN: "1", OPTCHAT_BENCH_IMPORT: entry },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
    });
    child.stderr.on("data", (chunk) => {
      err += chunk;
    });
    child.once("error", reject);
    child.once("close", (code) => {
      const line = out.trim().split("\n").at(-1) ?? "";
      if (code !== 0 || !line.startsWith("{"))
        reject(new Error(`importing ${entry} in OpenCode's Bun exited ${code}: ${err.slice(-1000)}`));
      else resolve(JSON.parse(line) as ImportFigures);
    });
  });
}

const medianOf = (figures: readonly ImportFigures[], key: keyof ImportFigures) => {
  const m = median(figures.map((f) => f[key]));
  return m === null ? null : round(m, 1);
};

/**
 * `entry`: the modules OpenCode's thread imports (comma-separated), `threadEntry` those the plugin's thread imports.
 */
export async function runPluginImportBench(
  entry: string,
  threadEntry: string,
  signal: AbortSignal,
  baselineEntry?: string,
): Promise<void> {
  const rounds = envNumber("OPTCHAT_BENCH_PLUGIN_IMPORTS", 9, { min: 0, integer: true });
  if (rounds === 0) return;
  const dir = mkdtempSync(join(tmpdir(), "optchat-bench-import-"));
  const script = join(dir, "import.mjs");
  writeFileSync(script, SCRIPT);
  try {
    // One warm-up each: the first start of the binary reads it from disk.
    await importOnce(script, entry);
    await importOnce(script, threadEntry);
    if (baselineEntry) await importOnce(script, baselineEntry);
    const mine: ImportFigures[] = [];
    const thread: ImportFigures[] = [];
    const base: ImportFigures[] = [];
    for (let i = 0; i < rounds && !signal.aborted; i++) {
      const order = [[entry, mine], [threadEntry, thread], ...(baselineEntry ? [[baselineEntry, base]] : [])] as [
        string,
        ImportFigures[],
      ][];
      if (i % 2 === 1) order.reverse();
      for (const [which, into] of order) into.push(await importOnce(script, which));
    }
    emit("plugin", "import", {
      rounds: mine.length,
      importMs: medianOf(mine, "ms"),
      importCpuMs: medianOf(mine, "cpuMs"),
      threadImportMs: medianOf(thread, "ms"),
      threadImportCpuMs: medianOf(thread, "cpuMs"),
      ...(baselineEntry
        ? { baselineImportMs: medianOf(base, "ms"), baselineImportCpuMs: medianOf(base, "cpuMs") }
        : {}),
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
