import { isOptchatError } from "../core/errors.js";
import { resolveConfig } from "../memory/config.js";
import type { Output } from "./command.js";
import { findCommand, overview } from "./registry.js";

/** Runs one command; returns the process exit code. Never throws. */
export async function main(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const [name, ...rest] = argv;
  const output: Output = {
    json: rest.includes("--json"),
    out: (line) => process.stdout.write(`${line}\n`),
    err: (line) => process.stderr.write(`${line}\n`),
  };
  if (name === undefined || name === "help" || name === "--help" || name === "-h") {
    output.out(overview());
    return 0;
  }
  const command = findCommand(name);
  if (!command) {
    output.err(`optchat: unknown command "${name}".\n\n${overview()}`);
    return 2;
  }
  try {
    return await command.run(rest, { config: resolveConfig({ env }), output });
  } catch (error) {
    reportError(error, output);
    return 1;
  }
}

function reportError(error: unknown, output: Output): void {
  const payload = isOptchatError(error)
    ? error.toJSON()
    : { code: "INTERNAL", message: error instanceof Error ? error.message : String(error) };
  if (output.json) output.out(JSON.stringify({ ok: false, error: payload }));
  else output.err(`optchat: ${payload.code}: ${payload.message}`);
}
