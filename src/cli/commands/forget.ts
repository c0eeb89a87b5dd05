import { OptchatError } from "../../core/errors.js";
import type { ForgetRequest, ForgetSummary } from "../../memory/forget.js";
import { resolveSession } from "../../memory/resolve-session.js";
import { type Command, parseCommand, withMemory } from "../command.js";

const usage = "optchat forget (--session ID | --scope S | --before DATE) [--yes] [--json]";

export const forgetCommand: Command = {
  name: "forget",
  usage: [usage],
  summary:
    "delete memory for good: a session, a whole scope, or the sessions last active before a date\n(without --yes: a dry run that only says what would go)",
  details: [
    "Removes the records and their unshared payloads, search rows and statistics, summaries, and every shared",
    "summary derived from them; the session's publications keep their numbers and show as removed, and the shared",
    "summaries above them are rebuilt by the compactor (`optchat worker`). One transaction: an interruption",
    "changes nothing. Not recalled: what was already sent to a model, and text other sessions quoted into their own",
    "transcripts (docs/deletion.md).",
    "--session ID   an optchat session id or an OpenCode session id (its subagent sessions go with it)",
    "--scope S      every session of the scope (see `optchat scopes`)",
    "--before DATE  every session whose last message is before DATE (ISO 8601, e.g. 2026-01-31)",
    "--yes          delete; without it, print what would be deleted and exit 2",
    "Exit codes: 0 deleted (or nothing matched), 2 dry run.",
  ].join("\n"),
  async run(args, { config, output }) {
    const { values } = parseCommand(
      args,
      {
        session: { type: "string" },
        scope: { type: "string" },
        before: { type: "string" },
        yes: { type: "boolean" },
      },
      0,
      usage,
    );
    const given = [values.session, values.scope, values.before].filter((v) => v !== undefined);
    if (given.length !== 1)
      throw new OptchatError("INPUT_INVALID", `give exactly one of --session, --scope, --before\nUsage: ${usage}`);
    return await withMemory(config, "optchat-forget", async (memory) => {
      const request: ForgetRequest =
        values.session !== undefined
          ? { sessionIds: [(await resolveSession(memory, values.session)).sessionId] }
          : values.scope !== undefined
            ? { scopeId: values.scope }
            : { before: parseDate(values.before as string) };
      if (!values.yes) {
        const plan = await memory.planForget(request);
        if (output.json) output.out(JSON.stringify({ ok: true, dryRun: true, ...plan }));
        else for (const line of describePlan(plan)) output.out(line);
        return 2;
      }
      const report = await memory.forget(request, { onProgress: (line) => output.err(line) });
      if (output.json) output.out(JSON.stringify({ ok: true, ...report }));
      else
        output.out(
          report.sessions.length === 0
            ? "nothing to forget: no live session matched"
            : `forgot ${report.sessions.length} session(s): ${report.removed.records} record(s), ${report.publications} publication(s) retired, ${report.removed.sharedNodes} shared summaries to rebuild (the compactor rebuilds them)`,
        );
      return 0;
    });
  },
};

function parseDate(text: string): Date {
  const date = new Date(text);
  if (!/^\d{4}-\d{2}-\d{2}/.test(text) || Number.isNaN(date.getTime()))
    throw new OptchatError("INPUT_INVALID", `--before must be an ISO 8601 date such as 2026-01-31, not ${text}`);
  return date;
}

function describePlan(plan: ForgetSummary): string[] {
  if (plan.sessions.length === 0) return ["nothing to forget: no live session matched"];
  return [
    `would forget ${plan.sessions.length} session(s), ${plan.records} record(s), ${plan.publications} publication(s):`,
    ...plan.sessions.map((s) => `  ${s.sessionId}  ${s.hostSessionId}  ${s.scopeId}  ${s.title ?? ""}`.trimEnd()),
    "dry run: nothing was deleted; run again with --yes to delete",
  ];
}
