import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { OptchatError } from "../../core/errors.js";
import { EMBEDDED_MAJOR } from "../../embedded/binaries.js";
import { clusterMajor } from "../../embedded/cluster.js";
import { alive, postmasterPid, probeServer, stopEmbeddedServer, supervisorPid } from "../../embedded/server.js";
import { type Config, redactUrl } from "../../memory/config.js";
import { describeDatabase, megabytes, startEmbedded } from "../../memory/database.js";
import { type Command, type CommandContext, parseCommand } from "../command.js";
import { exportJsonlCommand } from "./export-jsonl.js";
import { importCommand } from "./import.js";

const usage = [
  "optchat db status [--json]",
  "optchat db start [--json]",
  "optchat db stop [--json]",
  "optchat db move-in --from URL [--json]",
];

/** `optchat db …`: see or control the embedded PostgreSQL server (docs/database.md). */
export const dbCommand: Command = {
  name: "db",
  usage,
  summary:
    "the embedded PostgreSQL server: status (running or not, data directory and size), start, stop (fast\n" +
    "shutdown), move-in --from URL (copies a server's memory into it: export --jsonl, then import)",
  database: "raw",
  async run(args, ctx) {
    const [sub, ...rest] = args;
    if (sub === "status") return await dbStatus(rest, ctx);
    if (sub === "start") return await dbStart(rest, ctx);
    if (sub === "stop") return await dbStop(rest, ctx);
    if (sub === "move-in") return await dbMoveIn(rest, ctx);
    throw new OptchatError("INPUT_INVALID", `choose status, start, stop or move-in\nUsage: ${usage.join("\n       ")}`);
  },
};

function embeddedOf(config: Config) {
  if (config.embedded) return config.embedded;
  throw new OptchatError(
    "INPUT_INVALID",
    `DATABASE_URL (or the plugin option databaseUrl) is set to ${redactUrl(config.databaseUrl)}: optchat uses that server, not the embedded one; unset it to use the embedded server`,
    { settings: ["DATABASE_URL"] },
  );
}

async function dbStatus(args: readonly string[], { config, output }: CommandContext): Promise<number> {
  parseCommand(args, {}, 0, usage[0] as string);
  const description = describeDatabase(config);
  if (!config.embedded) {
    if (output.json) output.out(JSON.stringify({ ok: true, ...description }));
    else
      output.out(
        `optchat uses ${description.url} (DATABASE_URL or the plugin option databaseUrl), not the embedded server`,
      );
    return 0;
  }
  const embedded = config.embedded;
  const probe = await probeServer(embedded).catch(
    (error: Error) => ({ state: "error", reason: error.message }) as const,
  );
  const pid = postmasterPid(embedded);
  const supervisor = supervisorPid(embedded);
  const major = clusterMajor(embedded.clusterDir);
  const state = {
    running: probe.state === "up",
    pid: pid !== undefined && alive(pid) ? pid : null,
    supervisorPid: supervisor !== undefined && alive(supervisor) ? supervisor : null,
    initialised: major !== undefined,
    major: major ?? null,
    binariesMajor: EMBEDDED_MAJOR,
  };
  if (output.json) {
    output.out(JSON.stringify({ ok: true, ...description, ...state }));
    return 0;
  }
  output.out(
    `embedded PostgreSQL ${state.running ? `running (pid ${state.pid})` : "not running (the next optchat process starts it)"}`,
  );
  output.out(`  data      ${embedded.dataDir} (${megabytes(description.sizeBytes ?? 0)})`);
  output.out(`  cluster   ${state.initialised ? `PostgreSQL ${major}` : "not made yet"} in ${embedded.clusterDir}`);
  output.out(`  socket    ${embedded.socketDir} (mode 0700, no TCP port)`);
  output.out(
    `  idle stop after ${embedded.idleSeconds} s without a client (OPTCHAT_EMBEDDED_IDLE_SECONDS)${state.supervisorPid ? `; supervisor pid ${state.supervisorPid}` : ""}`,
  );
  output.out(`  log       ${join(embedded.dataDir, "server.log")}`);
  return 0;
}

async function dbStart(args: readonly string[], { config, output }: CommandContext): Promise<number> {
  parseCommand(args, {}, 0, usage[1] as string);
  const embedded = embeddedOf(config);
  const started = performance.now();
  await startEmbedded(config);
  const ms = Math.round(performance.now() - started);
  if (output.json) output.out(JSON.stringify({ ok: true, dataDir: embedded.dataDir, ms }));
  else output.out(`embedded PostgreSQL is running (data in ${embedded.dataDir}; ${ms} ms)`);
  return 0;
}

async function dbStop(args: readonly string[], { config, output }: CommandContext): Promise<number> {
  parseCommand(args, {}, 0, usage[2] as string);
  const embedded = embeddedOf(config);
  const stopped = await stopEmbeddedServer(embedded);
  if (output.json) output.out(JSON.stringify({ ok: true, stopped }));
  else output.out(stopped ? "embedded PostgreSQL stopped (fast shutdown)" : "embedded PostgreSQL was not running");
  return 0;
}

/**
 * Copies the memory of another server (typically the old default, postgres://postgres@127.0.0.1:5432/optchat) into
 * the embedded one: `optchat export --jsonl` from it, `optchat import` into the embedded server (records, sessions and
 * outcomes; the compactor summarizes them again). The source is left untouched.
 */
async function dbMoveIn(args: readonly string[], ctx: CommandContext): Promise<number> {
  const { values } = parseCommand(args, { from: { type: "string" } }, 0, usage[3] as string);
  if (!values.from) throw new OptchatError("INPUT_INVALID", `--from URL is required\nUsage: ${usage[3]}`);
  const embedded = embeddedOf(ctx.config);
  const source: Config = Object.freeze({ ...ctx.config, databaseUrl: values.from, embedded: null });
  const dir = mkdtempSync(join(tmpdir(), "optchat-move-"));
  const file = join(dir, "memory.jsonl");
  try {
    const exported = await exportJsonlCommand(["--jsonl", "--out", file], { ...ctx, config: source });
    if (exported !== 0) return exported;
    const target = await startEmbedded(ctx.config);
    const imported = await importCommand([file], target, ctx.output, { isTTY: false, write: () => true });
    if (imported === 0 && !ctx.output.json) {
      ctx.output.err(
        `Moved into the embedded server (data in ${embedded.dataDir}). ${redactUrl(values.from)} is untouched: drop it once you are satisfied.`,
      );
    }
    return imported;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
