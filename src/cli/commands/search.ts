import { OptchatError } from "../../core/errors.js";
import { resolveSession } from "../../memory/resolve-session.js";
import { type Command, parseCommand, withMemory } from "../command.js";
import { renderSearch } from "../render.js";
import { requireScope } from "./scope-flag.js";

const usage =
  "optchat search --scope <scope> <query...> [--all] [--session ID] [--before ISO] [--after ISO] [--cursor C] [--json]";

export const searchCommand: Command = {
  name: "search",
  usage: [usage],
  summary: "best matches first (rarer words weigh more); --all: every word must occur",
  async run(args, { config, output }) {
    const flags = {
      scope: { type: "string" },
      session: { type: "string" },
      before: { type: "string" },
      after: { type: "string" },
      cursor: { type: "string" },
      all: { type: "boolean" },
    } as const;
    const { values, positionals } = parseCommand(args, flags, "any", usage);
    const scope = requireScope(values.scope, usage);
    if (positionals.length === 0) throw new OptchatError("INPUT_INVALID", `expected a query\nUsage: ${usage}`);
    const answer = await withMemory(config, "optchat-cli", async (memory) =>
      memory.search(await memory.readScope(scope), {
        query: positionals.join(" "),
        ...(values.all ? { match: "all" as const } : {}),
        ...(values.session ? { sessionId: (await resolveSession(memory, values.session)).sessionId } : {}),
        ...(values.before ? { before: values.before } : {}),
        ...(values.after ? { after: values.after } : {}),
        ...(values.cursor ? { cursor: values.cursor } : {}),
      }),
    );
    output.out(output.json ? JSON.stringify({ ok: true, ...answer }) : renderSearch(answer));
    return 0;
  },
};
