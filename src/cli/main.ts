import { isOptchatError } from "../core/errors.js";
import { didYouMean } from "../core/suggest.js";
import { resolveConfig } from "../memory/config.js";
import { prepareDatabase } from "../memory/database.js";
import type { Output } from "./command.js";
import { unknownVariables } from "./environment.js";
import { processOutput } from "./output.js";
import { COMMANDS, commandHelp, findCommand, overview } from "./registry.js";

const HELP_FLAGS = new Set(["--help", "-h"]);

/** Runs one command; returns the process exit code. Never throws. `cwd`: where a scope defaults to (here.ts). */
export async function main(
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  options: { cwd?: string } = {},
): Promise<number> {
  const [name, ...rest] = argv;
  const output = processOutput(rest.includes("--json"));
  if (name === undefined || name === "help" || HELP_FLAGS.has(name)) {
    const topic = name === "help" && rest[0] !== undefined ? findCommand(rest[0]) : undefined;
    if (name === "help" && rest[0] !== undefined && !topic) return unknownCommand(rest[0], output);
    output.out(topic ? commandHelp(topic) : overview());
    return 0;
  }
  const command = findCommand(name);
  if (!command) return unknownCommand(name, output);
  // Before the settings are read: help must work with a broken environment, and without a database.
  if (rest.some((arg) => HELP_FLAGS.has(arg))) {
    output.out(commandHelp(command));
    return 0;
  }
  for (const line of unknownVariables(env)) output.err(line);
  try {
    const resolved = resolveConfig({ env });
    const config =
      command.database === "raw" ? resolved : await prepareDatabase(resolved, { notice: (line) => output.err(line) });
    return await command.run(rest, { config, output, cwd: options.cwd ?? whereTyped(env) });
  } catch (error) {
    reportError(error, output);
    return 1;
  }
}

function unknownCommand(name: string, output: Output): number {
  const names = [...COMMANDS.map((command) => command.name), "help"];
  output.err(
    `optchat: unknown command "${name}".${didYouMean(name, names, (n) => `optchat ${n}`)}\nRun \`optchat help\` for every command.`,
  );
  return 2;
}

function reportError(error: unknown, output: Output): void {
  const payload = isOptchatError(error)
    ? error.toJSON()
    : { code: "INTERNAL", message: error instanceof Error ? error.message : String(error) };
  if (output.json) output.out(JSON.stringify({ ok: false, error: payload }));
  else output.err(`optchat: ${payload.code}: ${payload.message}`);
}

/** Where the person typed the command: `npm run optchat` runs in the package's directory and keeps theirs in INIT_CWD. */
function whereTyped(env: NodeJS.ProcessEnv): string {
  return env.npm_lifecycle_event === "optchat" && env.INIT_CWD ? env.INIT_CWD : process.cwd();
}
