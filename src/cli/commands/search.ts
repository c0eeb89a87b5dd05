import { OptchatError } from "../../core/errors.js";
import { singleCjkCharacters } from "../../core/search-query.js";
import { resolveSession } from "../../memory/resolve-session.js";
import { listScopes } from "../../memory/scopes.js";
import type { SearchAnswer } from "../../memory/shared.js";
import { type Command, parseCommand, withMemory } from "../command.js";
import { readScopeOrHere } from "../here.js";
import { sessionLabelsFor } from "../labels.js";
import { renderSearch } from "../render.js";

const usage =
  "optchat search [--scope <scope> | --all-scopes] <query...> [--all] [--session ID] [--before ISO] [--after ISO] [--cursor C] [--json]";

export const searchCommand: Command = {
  name: "search",
  usage: [usage],
  summary:
    "search this directory's project (or --scope S, or --all-scopes) as a new turn would; best matches first\n" +
    "(rarer words weigh more); --all: every word must occur",
  details: `Without --scope the scope is the current directory's project, as the plugin names it. --all-scopes searches
every project and profile scope in memory, one after the other. A CJK word is found from two characters on (text is
indexed in character pairs).`,
  async run(args, { config, output, cwd }) {
    const flags = {
      scope: { type: "string" },
      "all-scopes": { type: "boolean" },
      session: { type: "string" },
      before: { type: "string" },
      after: { type: "string" },
      cursor: { type: "string" },
      all: { type: "boolean" },
    } as const;
    const { values, positionals } = parseCommand(args, flags, "any", usage);
    if (positionals.length === 0) throw new OptchatError("INPUT_INVALID", `expected a query\nUsage: ${usage}`);
    if (values["all-scopes"] && values.scope) {
      throw new OptchatError("INPUT_INVALID", `--scope and --all-scopes exclude each other\nUsage: ${usage}`);
    }
    const query = positionals.join(" ");
    await withMemory(config, "optchat-cli", async (memory) => {
      const readers = values["all-scopes"]
        ? await Promise.all((await listScopes(memory)).map((scope) => memory.readScope(scope.scopeId)))
        : [await readScopeOrHere(memory, values.scope, cwd)];
      const sessionId = values.session ? (await resolveSession(memory, values.session)).sessionId : undefined;
      const answers: SearchAnswer[] = [];
      for (const reader of readers) {
        answers.push(
          await memory.search(reader, {
            query,
            ...(values.all ? { match: "all" as const } : {}),
            ...(sessionId ? { sessionId } : {}),
            ...(values.before ? { before: values.before } : {}),
            ...(values.after ? { after: values.after } : {}),
            ...(values.cursor ? { cursor: values.cursor } : {}),
          }),
        );
      }
      const labels = await sessionLabelsFor(
        memory,
        answers.flatMap((answer) => answer.hits.flatMap((hit) => (hit.sessionId ? [hit.sessionId] : []))),
      );
      const short = singleCjkCharacters(query);
      const note =
        short.length > 0
          ? ` (${short.join(", ")}: a CJK word is found from two characters on; text is indexed in character pairs)`
          : "";
      if (output.json) {
        const named = withLabels(answers, labels);
        output.out(JSON.stringify(values["all-scopes"] ? { ok: true, scopes: named } : { ok: true, ...named[0] }));
      } else printAnswers(output.out, answers, labels, { note, allScopes: values["all-scopes"] === true });
    });
    return 0;
  },
};

type SessionLabels = Awaited<ReturnType<typeof sessionLabelsFor>>;

/** The answers with each hit's session named as OpenCode shows it (its id there, title, first prompt). */
function withLabels(answers: readonly SearchAnswer[], labels: SessionLabels) {
  return answers.map((answer) => ({
    ...answer,
    hits: answer.hits.map((hit) => {
      const label = hit.sessionId ? labels.get(hit.sessionId) : undefined;
      return label
        ? { ...hit, hostSessionId: label.hostSessionId, title: label.title, firstPrompt: label.firstPrompt }
        : hit;
    }),
  }));
}

/** The answers as text: with --all-scopes each scope with hits under its name, and one line when none has any. */
function printAnswers(
  out: (line: string) => void,
  answers: readonly SearchAnswer[],
  labels: SessionLabels,
  { note, allScopes }: { readonly note: string; readonly allScopes: boolean },
): void {
  if (answers.length === 0) out("no scopes yet: memory is empty");
  for (const answer of answers) {
    if (allScopes) {
      if (answer.hits.length === 0) continue;
      out(`${answer.snapshot.scopeId}:`);
    }
    out(renderSearch(answer, labels, note));
  }
  if (allScopes && answers.length > 0 && answers.every((answer) => answer.hits.length === 0)) {
    out(`no hits in ${answers.length} scope(s)${note}`);
  }
}
