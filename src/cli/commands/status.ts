import { budgetSettingsOf, redactUrl } from "../../memory/config.js";
import { sessionSpendLines, UNPRICED_PRICE_TEXT } from "../../memory/cost.js";
import { databaseLine, describeDatabase } from "../../memory/database.js";
import { compactorLines, labelled, verdictLines } from "../../memory/health-text.js";
import { readStatusReport } from "../../memory/status.js";
import { type Command, parseCommand } from "../command.js";

const usage = "optchat status [--json]";

/** Exit codes: 0 working, 1 not set up (or the command failed), 3 stalled. */
export const STALLED_EXIT_CODE = 3;

export const statusCommand: Command = {
  name: "status",
  usage: [usage],
  summary:
    "a verdict first (working / stalled and why / not set up and what is missing), then workers,\n" +
    "waiting jobs, the last turn's publication lag, today's spend, schema version and row counts",
  details:
    "Exit code: 0 working, 3 stalled, 1 not set up (database unreachable or not migrated). A worker counts as alive " +
    "while its heartbeat is under 30 s old; the compactor is stalled when a job has waited over 60 s with no " +
    "worker taking it, or the compactor model keeps failing (docs/operations.md).",
  async run(args, { config, output }) {
    parseCommand(args, {}, 0, usage);
    const report = await readStatusReport(config.databaseUrl, budgetSettingsOf(config));
    const url = redactUrl(config.databaseUrl);
    const code = report.verdict.state === "working" ? 0 : report.verdict.state === "stalled" ? STALLED_EXIT_CODE : 1;
    if (output.json) {
      output.out(
        JSON.stringify({
          ok: report.setUp,
          verdict: report.verdict,
          url,
          databaseServer: describeDatabase(config),
          ...(report.status ?? {}),
          ...(report.setUp ? { compactor: report.compactor } : {}),
          ...(!report.setUp && report.error ? { error: report.error.toJSON() } : {}),
        }),
      );
      return code;
    }
    for (const line of verdictLines(report.verdict)) output.out(line);
    output.out(databaseLine(config));
    const status = report.status;
    if (!status) {
      if (!report.setUp && report.error) output.err(`optchat: ${report.error.code}: ${report.error.message}`);
      return code;
    }
    const expected = status.expectedSchemaVersion;
    output.out(labelled("server", `PostgreSQL ${status.serverVersion} (${url})`));
    output.out(
      labelled(
        "schema",
        `version ${status.schemaVersion} of ${expected}${status.schemaVersion >= expected ? "" : " — out of date: run `optchat migrate`"}`,
      ),
    );
    if (report.setUp) for (const line of compactorLines(report.compactor)) output.out(line);
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
        `spend      today (${today.day} UTC): ${today.all.calls} compactor call(s), ${today.all.tokens} tokens, $${today.all.costUsd.toFixed(4)} ${caps}${today.all.unpricedTokens > 0 ? ` (${today.all.unpricedTokens} tokens of models with no price counted at ${UNPRICED_PRICE_TEXT}: set OPTCHAT_PRICES)` : ""}; fallback nodes: ${today.fallbackNodes}`,
      );
      if (today.notice) output.out(`           ${today.notice}`);
      for (const m of today.models) output.out(`           model ${m.model}: ${m.price}`);
      for (const line of sessionSpendLines(status.compactorSessionsToday ?? [])) output.out(`           ${line}`);
    }
    const width = Math.max(0, ...Object.keys(status.tables).map((name) => name.length));
    for (const [name, rows] of Object.entries(status.tables)) output.out(`  ${name.padEnd(width)}  ${rows}`);
    if (!report.setUp) {
      output.err(
        `optchat: SCHEMA_OUT_OF_DATE: schema version ${status.schemaVersion}, expected ${expected}: run \`optchat migrate\``,
      );
    }
    return code;
  },
};
