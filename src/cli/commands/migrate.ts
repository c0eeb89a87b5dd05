import { redactUrl } from "../../memory/config.js";
import { migrateAll } from "../../memory/migrate.js";
import { type Command, parseCommand } from "../command.js";

const usage = "optchat migrate [--json]";

export const migrateCommand: Command = {
  name: "migrate",
  usage: [usage],
  summary: "create the database if missing and apply the schema migrations",
  async run(args, { config, output }) {
    parseCommand(args, {}, 0, usage);
    const log = output.json ? () => {} : (line: string) => output.err(`  ${line}`);
    if (!output.json) output.err(`Migrating ${redactUrl(config.databaseUrl)} ...`);
    const outcome = await migrateAll(config.databaseUrl, process.stderr.isTTY ? log : () => {});
    if (output.json) {
      output.out(JSON.stringify({ ok: true, database: redactUrl(config.databaseUrl), ...outcome }));
      return 0;
    }
    if (outcome.databaseCreated) output.out("Created the database.");
    output.out(
      outcome.applied.length > 0
        ? `Applied ${outcome.applied.length} migration(s): ${outcome.applied.join(", ")}. Schema version ${outcome.schemaVersion}.`
        : `Schema is up to date (version ${outcome.schemaVersion}).`,
    );
    return 0;
  },
};
