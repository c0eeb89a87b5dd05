/**
 * What runs the optchat local server (setting `localServerRuntime`): Node.js from PATH when it can, else OpenCode's own
 * Bun. Runs in OpenCode's thread, before the server is started (plugin/transport/local-server/client.ts), so it imports only
 * Node's built-ins.
 */
import { execFile } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";
import { fileURLToPath } from "node:url";

/** A way to run the server: the command, its arguments before the socket and idle time, its environment. */
export interface ServerCommand {
  readonly runtime: "node" | "bun";
  readonly command: string;
  readonly args: readonly string[];
  readonly env: NodeJS.ProcessEnv;
}

/**
 * How the server runs, by setting `localServerRuntime`: `auto` (the default) takes Node.js 20.6 or later when it is on
 * PATH and OpenCode's own Bun otherwise; `node` insists on Node.js (an error saying what was found otherwise); `bun`
 * always takes OpenCode's Bun. Why Node.js: the same served run cost the server ~40-60% of the CPU it cost under Bun
 * (docs/opencode-notes.md "The local server on Node.js"), CPU taken from the cores OpenCode itself is using.
 * Node.js 20.6 added `module.register`, which the Node entry needs to load TypeScript (plugin/transport/local-server/node.mjs).
 */
export async function serverCommand(
  setting: "auto" | "node" | "bun",
  env: NodeJS.ProcessEnv,
  entry: URL,
  runtime: { execPath: string; platform: NodeJS.Platform } = process,
): Promise<ServerCommand> {
  const bun: ServerCommand = {
    runtime: "bun",
    command: runtime.execPath,
    args: [fileURLToPath(entry)],
    env: { ...env, BUN_BE_BUN: "1" },
  };
  if (setting === "bun") return bun;
  const node = findExecutable(runtime.platform === "win32" ? "node.exe" : "node", env.PATH);
  const version = node ? await nodeVersion(node, env) : undefined;
  if (node && version && nodeSupported(version))
    return { runtime: "node", command: node, args: [nodeEntry(entry)], env };
  if (setting === "auto") return bun;
  const found = node ? `${node} is Node.js ${version ?? "of an unknown version"}` : "no node is on PATH";
  throw new Error(
    `localServerRuntime is node, but ${found}: the local server needs Node.js 20.6 or later (or set OPTCHAT_LOCAL_SERVER_RUNTIME=bun)`,
  );
}

/** What Node.js runs: the compiled entry itself (the npm package's dist/), else node.mjs, which loads the sources through tsx. */
function nodeEntry(entry: URL): string {
  const path = fileURLToPath(entry);
  return path.endsWith(".js") ? path : fileURLToPath(new URL("./node.mjs", entry));
}

/** Node.js 20.6 or later (`v20.6.0`, `v22.1.0`, …). */
export function nodeSupported(version: string): boolean {
  const [major = 0, minor = 0] = version.trim().replace(/^v/, "").split(".").map(Number);
  return major > 20 || (major === 20 && minor >= 6);
}

/** The first executable file named `name` in the directories of `path` (a PATH value), or undefined. */
export function findExecutable(name: string, path: string | undefined): string | undefined {
  for (const directory of (path ?? "").split(delimiter)) {
    if (!directory) continue;
    const candidate = join(directory, name);
    try {
      accessSync(candidate, constants.X_OK);
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // Not there, or not executable.
    }
  }
  return undefined;
}

/** `node --version`, or undefined when it does not answer within 5 s. */
function nodeVersion(node: string, env: NodeJS.ProcessEnv): Promise<string | undefined> {
  return new Promise((resolve) => {
    execFile(node, ["--version"], { env, timeout: 5_000 }, (error, stdout) =>
      resolve(error ? undefined : String(stdout).trim()),
    );
  });
}

/** Setting localServerRuntime as plugin/base/config.ts reads it; an invalid value is the configuration check's to refuse. */
export function runtimeSetting(
  options: Record<string, unknown> | undefined,
  env: NodeJS.ProcessEnv,
): "auto" | "node" | "bun" {
  const given = options?.localServerRuntime ?? (env.OPTCHAT_LOCAL_SERVER_RUNTIME || "auto");
  return given === "node" || given === "bun" ? given : "auto";
}
