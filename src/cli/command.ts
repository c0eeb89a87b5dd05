import { parseArgs } from "node:util";
import { OptchatError } from "../core/errors.js";
import { didYouMean } from "../core/suggest.js";
import type { Config } from "../memory/config.js";
import { type Memory, openMemory } from "../memory/service.js";

/** Where a command writes: answers to `out` (stdout), diagnostics to `err` (stderr); `json` when --json was given. */
export interface Output {
  readonly json: boolean;
  out(line: string): void;
  err(line: string): void;
}

/** What a command runs with: the resolved settings and where to write. */
export interface CommandContext {
  readonly config: Config;
  readonly output: Output;
  /** The directory the command runs in: commands that read a scope default to its project's (here.ts). */
  readonly cwd: string;
}

/** One `optchat <name>` command, in a module of its own under src/cli/commands/. */
export interface Command {
  readonly name: string;
  /** One or more usage lines, `optchat <name> ...`. */
  readonly usage: readonly string[];
  /** What the command does, one or two lines (the overview and `--help` print it). */
  readonly summary: string;
  /** More for `optchat <name> --help`: options, where ids come from, exit codes. */
  readonly details?: string;
  /**
   * "raw": the command gets the settings as resolved, its database not prepared (`optchat db` controls the embedded
   * server itself). Default: the database is made ready first (src/memory/database.ts `prepareDatabase`).
   */
  readonly database?: "raw";
  /** Returns the process exit code; throws OptchatError for bad input or a failure (main reports it). */
  run(args: readonly string[], ctx: CommandContext): Promise<number>;
}

type FlagSpec = Record<string, { type: "string" | "boolean"; multiple?: false }>;
type FlagValues<F extends FlagSpec> = {
  [K in keyof F]?: F[K]["type"] extends "string" ? string : boolean;
} & { json?: boolean };

/**
 * Parses a command's arguments with node:util parseArgs (strict: an unknown flag is INPUT_INVALID); --json is always
 * allowed. `positionals` is the exact count expected, or "any" when the command checks them itself.
 */
export function parseCommand<F extends FlagSpec>(
  args: readonly string[],
  flags: F,
  positionals: number | "any",
  usage: string,
): { values: FlagValues<F>; positionals: string[] } {
  let parsed: { values: Record<string, unknown>; positionals: string[] };
  try {
    parsed = parseArgs({
      args: [...args],
      options: { json: { type: "boolean" }, ...flags },
      strict: true,
      allowPositionals: true,
    });
  } catch (error) {
    throw new OptchatError("INPUT_INVALID", `${flagProblem(error, ["json", ...Object.keys(flags)])}\nUsage: ${usage}`);
  }
  if (positionals !== "any" && parsed.positionals.length !== positionals) {
    throw new OptchatError(
      "INPUT_INVALID",
      `expected ${positionals} argument(s), got ${parsed.positionals.length}\nUsage: ${usage}`,
    );
  }
  return { values: parsed.values as FlagValues<F>, positionals: parsed.positionals };
}

/** parseArgs' complaint in a person's words, with the nearest known flag for an unknown one. */
function flagProblem(error: unknown, known: readonly string[]): string {
  const { code, message } = error as { code?: string; message: string };
  const named = /'(-{1,2}[^' ]+)/.exec(message)?.[1];
  if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && named) {
    const bare = named.replace(/^-+/, "").replace(/=.*$/, "");
    return `unknown flag ${named}.${didYouMean(bare, known, (name) => `--${name}`)}`;
  }
  if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE" && named) {
    return /argument missing/.test(message) ? `${named} needs a value` : `${named} takes no value`;
  }
  if (code === "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL") return `unexpected argument: ${message}`;
  return message;
}

/** An integer flag within [min, max], or undefined when absent. */
export function integerFlag(value: string | undefined, name: string, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new OptchatError("INPUT_INVALID", `--${name} must be an integer from ${min} to ${max}, not ${String(value)}`);
  }
  return n;
}

/** Opens memory for one command (`readOnly`: nothing it does can write), runs `use`, and closes memory whatever happens. */
export async function withMemory<T>(
  config: Config,
  applicationName: string,
  use: (memory: Memory) => Promise<T>,
  options: { readOnly?: boolean } = {},
): Promise<T> {
  const memory = await openMemory(config, { applicationName, ...options });
  try {
    return await use(memory);
  } finally {
    await memory.close();
  }
}
