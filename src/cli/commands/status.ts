import { OptchatError } from "../../core/errors.js";
import { budgetSettingsOf, redactUrl } from "../../memory/config.js";
import { databaseLine, describeDatabase } from "../../memory/database.js";
import { readStatus } from "../../memory/status.js";
import { type Command, parseCommand } from "../command.js";

const usage = "optchat status [--json]";

export const statusCommand: Command = {
  name: "status",
  usage: [usage],
  summary: "server, schema version and row counts per table",
  async run(args, { config, output }) {
    parseCommand(args, {}, 0, usage);
    const status = await readStatus(config.databaseUrl, budgetSettingsOf(config));
    const expected = status.expectedSchemaVersion;
    const upToDate = status.schemaVersion >= expected;
    if (output.json) {
      output.out(
        JSON.stringify({
          ok: upToDate,
          url: redactUrl(config.databaseUrl),
          databaseServer: describeDatabase(config),
          ...status,
        }),
      );
    } else {
      output.out(`server     PostgreSQL ${status.serverVersion} (${redactUrl(config.databaseUrl)})`);
      output.out(databaseLine(config));
      output.out(
        `schema     version ${status.schemaVersion} of ${expected}${upToDate ? "" : " — out of date: run `optchat migrate`"}`,
      );
      const jobs = Object.entries(status.jobs)
        .map(([state, n]) => `${state} ${n}`)
        .join(", ");
      output.out(
        `compactor  ${status.pendingLeaves} message(s) not summarized yet; jobs: ${jobs || "none"}; failing nodes: ${status.failingNodes}; failing publications: ${status.failingPublications}`,
      );
      const today = status.compactorToday;
      if (today) {
        const caps = today.caps.dailyUsd > 0 ? `of $${today.caps.dailyUsd} a day` : "no money cap";
        output.out(
          `spend      today (${today.day} UTC): ${today.all.calls} compactor call(s), ${today.all.tokens} tokens, $${today.all.costUsd.toFixed(4)} ${caps}${today.all.unpricedTokens > 0 ? ` (+${today.all.unpricedTokens} unpriced tokens)` : ""}; fallback nodes: ${today.fallbackNodes}`,
        );
        if (today.notice) output.out(`           ${today.notice}`);
      }
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
  },
};
