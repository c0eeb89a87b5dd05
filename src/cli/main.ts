import { parseArgs } from "node:util";
import { isOptchatError, OptchatError } from "../core/errors.js";
import { type Config, redactUrl, resolveConfig } from "../memory/config.js";
import { expectedSchemaVersion } from "../memory/service.js";
import { connectClient } from "../store/db.js";
import { migrateDatabase } from "../store/migrate.js";
import { readStoreStatus } from "../store/status.js";

const USAGE = `optchat — shared, never-ending memory for OpenCode, kept in PostgreSQL

Usage:
  optchat migrate [--json]   create the database if missing and apply the schema migrations
  optchat status  [--json]   server, schema version and row counts per table
  optchat help

Settings come from the environment (see README "Configuration"): DATABASE_URL, OPTCHAT_POOL_SIZE,
OPTCHAT_STATEMENT_TIMEOUT_MS.`;

interface Output {
  json: boolean;
  out: (line: string) => void;
  err: (line: string) => void;
}

/** Runs one command; returns the process exit code. Never throws. */
export async function main(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const [command, ...rest] = argv;
  const json = rest.includes("--json");
  const output: Output = {
    json,
    out: (line) => process.stdout.write(`${line}\n`),
    err: (line) => process.stderr.write(`${line}\n`),
  };
  try {
    switch (command) {
      case "migrate":
        return await migrateCommand(rest, resolveConfig({ env }), output);
      case "status":
        return await statusCommand(rest, resolveConfig({ env }), output);
      case undefined:
      case "help":
      case "--help":
      case "-h":
        output.out(USAGE);
        return 0;
      default:
        output.err(`optchat: unknown command "${command}".\n\n${USAGE}`);
        return 2;
    }
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

function options(args: readonly string[]): void {
  // Only --json is accepted so far; anything else is a mistake worth naming.
  parseArgs({ args: [...args], options: { json: { type: "boolean" } }, strict: true, allowPositionals: false });
}

async function migrateCommand(args: readonly string[], config: Config, output: Output): Promise<number> {
  options(args);
  const log = output.json ? () => {} : (line: string) => output.err(`  ${line}`);
  if (!output.json) output.err(`Migrating ${redactUrl(config.databaseUrl)} ...`);
  const outcome = await migrateDatabase(config.databaseUrl, process.stderr.isTTY ? log : () => {});
  if (output.json) {
    output.out(JSON.stringify({ ok: true, database: redactUrl(config.databaseUrl), ...outcome }));
  } else {
    if (outcome.databaseCreated) output.out("Created the database.");
    output.out(
      outcome.applied.length > 0
        ? `Applied ${outcome.applied.length} migration(s): ${outcome.applied.join(", ")}. Schema version ${outcome.schemaVersion}.`
        : `Schema is up to date (version ${outcome.schemaVersion}).`,
    );
  }
  return 0;
}

async function statusCommand(args: readonly string[], config: Config, output: Output): Promise<number> {
  options(args);
  const client = await connectClient(config.databaseUrl, "optchat-status");
  try {
    const status = await readStoreStatus(client);
    const expected = expectedSchemaVersion();
    const upToDate = status.schemaVersion >= expected;
    if (output.json) {
      output.out(
        JSON.stringify({
          ok: upToDate,
          url: redactUrl(config.databaseUrl),
          expectedSchemaVersion: expected,
          ...status,
        }),
      );
    } else {
      output.out(`server     PostgreSQL ${status.serverVersion} (${redactUrl(config.databaseUrl)})`);
      output.out(
        `schema     version ${status.schemaVersion} of ${expected}${upToDate ? "" : " — out of date: run `optchat migrate`"}`,
      );
      const width = Math.max(0, ...Object.keys(status.tables).map((name) => name.length));
      for (const [name, rows] of Object.entries(status.tables)) output.out(`  ${name.padEnd(width)}  ${rows}`);
    }
    if (!upToDate) {
      throw new OptchatError(
        "SCHEMA_OUT_OF_DATE",
        `schema version ${status.schemaVersion}, expected ${expected}: run \`optchat migrate\``,
      );
    }
    return 0;
  } finally {
    await client.end().catch(() => {});
  }
}
