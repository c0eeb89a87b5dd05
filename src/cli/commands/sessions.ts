import { listScopes } from "../../memory/scopes.js";
import type { Memory } from "../../memory/service.js";
import { type Command, parseCommand, withMemory } from "../command.js";
import { readScopeOrHere } from "../here.js";
import { sessionLabelsFor } from "../labels.js";
import { renderSessions } from "../render.js";

const usage = "optchat sessions [--scope <scope> | --all] [--cursor C] [--json]";

export const sessionsCommand: Command = {
  name: "sessions",
  usage: [usage],
  summary: "the sessions of this directory's project (or --scope S, or --all scopes) with their published turns",
  details: `Each session is named by optchat's id, OpenCode's id (ses_…), its title and the start of its first prompt.
Without --scope the scope is the current directory's project, as the plugin names it (optchat scopes lists them all).`,
  async run(args, { config, output, cwd }) {
    const flags = { scope: { type: "string" }, cursor: { type: "string" }, all: { type: "boolean" } } as const;
    const { values } = parseCommand(args, flags, 0, usage);
    await withMemory(config, "optchat-cli", async (memory) => {
      const scopeIds = values.all
        ? (await listScopes(memory)).map((scope) => scope.scopeId)
        : [(await readScopeOrHere(memory, values.scope, cwd)).scope.scopeId];
      const pages = [];
      for (const scopeId of scopeIds) pages.push(await page(memory, scopeId, values.cursor));
      const labels = await sessionLabelsFor(
        memory,
        pages.flatMap((answer) => answer.sessions.map((s) => s.sessionId as string)),
      );
      if (output.json) {
        const named = pages.map((answer) => ({
          ...answer,
          sessions: answer.sessions.map((s) => ({ ...s, ...labelFields(labels.get(s.sessionId as string)) })),
        }));
        output.out(JSON.stringify(values.all ? { ok: true, scopes: named } : { ok: true, ...named[0] }));
        return;
      }
      for (const answer of pages) {
        if (values.all) output.out(`${answer.snapshot.scopeId}:`);
        output.out(renderSessions(answer, labels));
      }
    });
    return 0;
  },
};

async function page(memory: Memory, scopeId: string, cursor: string | undefined) {
  return await memory.sessions(await memory.readScope(scopeId), cursor ? { cursor } : {});
}

function labelFields(
  label: { host: string; hostSessionId: string; title: string | null; firstPrompt: string | null } | undefined,
) {
  return label
    ? { host: label.host, hostSessionId: label.hostSessionId, title: label.title, firstPrompt: label.firstPrompt }
    : {};
}
