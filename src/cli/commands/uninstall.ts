import { existsSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stopEmbeddedServer } from "../../embedded/server.js";
import { redactUrl } from "../../memory/config.js";
import { describeDatabase, megabytes } from "../../memory/database.js";
import { type Command, parseCommand } from "../command.js";

const usage = "optchat uninstall [--delete-data] [--yes] [--json]";

/**
 * `optchat uninstall`: the "out" half of turning optchat off (README "Turn it off, or remove it"). Taking the plugin out
 * of OpenCode is OpenCode's own step (`opencode plugin remove optchat` on V2, deleting the line on V1); this stops what
 * optchat left running and, only when asked and confirmed, deletes the embedded server's data directory.
 */
export const uninstallCommand: Command = {
  name: "uninstall",
  usage: [usage],
  summary:
    "stop optchat's local servers and its embedded PostgreSQL server; with --delete-data --yes also delete the\n" +
    "data directory (all memory, for good; without --yes: a dry run that says what would go)",
  details: [
    "Run it after taking the plugin out of OpenCode (V2: `opencode plugin remove optchat`; V1: delete the",
    '"optchat" entry of opencode.json): an OpenCode process still loading the plugin starts the servers again.',
    "--delete-data  also delete the embedded server's data directory (the whole memory); needs --yes",
    "--yes          confirm the deletion; without it, print what would be deleted and exit 2",
    "With DATABASE_URL set, your own server is left alone: drop its database yourself.",
    "Exit codes: 0 done, 2 dry run of --delete-data.",
  ].join("\n"),
  database: "raw",
  async run(args, { config, output }) {
    const { values } = parseCommand(args, { "delete-data": { type: "boolean" }, yes: { type: "boolean" } }, 0, usage);
    const say = (line: string) => !output.json && output.out(line);
    const localServers = await stopLocalServers();
    say(localServers > 0 ? `stopped ${localServers} optchat local server(s)` : "no optchat local server was running");
    const embedded = config.embedded;
    if (!embedded) {
      const url = redactUrl(config.databaseUrl);
      say(
        `optchat uses ${url} (DATABASE_URL), not the embedded server: its memory stays; drop that database to remove it`,
      );
      if (output.json) output.out(JSON.stringify({ ok: true, localServers, embedded: false, deleted: false }));
      return 0;
    }
    const stopped = await stopEmbeddedServer(embedded);
    say(stopped ? "embedded PostgreSQL stopped" : "embedded PostgreSQL was not running");
    const sizeBytes = describeDatabase(config).sizeBytes ?? 0;
    const present = existsSync(embedded.dataDir);
    let deleted = false;
    if (values["delete-data"] && present && values.yes) {
      rmSync(embedded.dataDir, { recursive: true, force: true });
      deleted = true;
      say(`deleted ${embedded.dataDir} (${megabytes(sizeBytes)}): the memory is gone`);
    } else if (values["delete-data"] && present) {
      say(`would delete ${embedded.dataDir} (${megabytes(sizeBytes)}), the whole memory: add --yes to delete it`);
    } else if (present) {
      say(
        `the memory stays in ${embedded.dataDir} (${megabytes(sizeBytes)}); \`optchat uninstall --delete-data --yes\` deletes it`,
      );
    } else say(`no data directory at ${embedded.dataDir}`);
    const dryRun = Boolean(values["delete-data"] && present && !values.yes);
    if (output.json)
      output.out(
        JSON.stringify({ ok: true, localServers, embedded: true, stopped, dataDir: embedded.dataDir, deleted, dryRun }),
      );
    return dryRun ? 2 : 0;
  },
};

/**
 * Stops this user's optchat local servers (plugin/transport/local-server/): each writes its pid beside its socket in
 * `$TMPDIR/optchat-<uid>/`. A pid is signalled only while its process is still a local server (its command line names
 * the local server's entry), so a reused pid is left alone. Waits up to 10 s for them to exit.
 */
async function stopLocalServers(): Promise<number> {
  const directory = join(tmpdir(), `optchat-${process.getuid?.() ?? "user"}`);
  let names: string[] = [];
  try {
    if (statSync(directory).isDirectory()) names = readdirSync(directory).filter((name) => name.endsWith(".pid"));
  } catch {
    return 0;
  }
  const signalled: number[] = [];
  for (const name of names) {
    const pid = Number(readFileSync(join(directory, name), "utf8").trim());
    if (!Number.isInteger(pid) || pid <= 0 || !isLocalServer(pid)) continue;
    try {
      process.kill(pid, "SIGTERM");
      signalled.push(pid);
    } catch {
      // Already gone.
    }
  }
  const deadline = Date.now() + 10_000;
  while (signalled.some(isAlive) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
  return signalled.length;
}

function isLocalServer(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("local-server");
  } catch {
    return false;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
