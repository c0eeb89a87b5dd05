import { type Command, parseCommand, withMemory } from "../command.js";
import { renderSessions } from "../render.js";
import { requireScope } from "./scope-flag.js";

const usage = "optchat sessions --scope <scope> [--cursor C] [--json]";

export const sessionsCommand: Command = {
  name: "sessions",
  usage: [usage],
  summary: "the sessions of a scope with their published turns, latest first",
  async run(args, { config, output }) {
    const { values } = parseCommand(args, { scope: { type: "string" }, cursor: { type: "string" } }, 0, usage);
    const scope = requireScope(values.scope, usage);
    const answer = await withMemory(config, "optchat-cli", async (memory) =>
      memory.sessions(await memory.readScope(scope), values.cursor ? { cursor: values.cursor } : {}),
    );
    output.out(output.json ? JSON.stringify({ ok: true, ...answer }) : renderSessions(answer));
    return 0;
  },
};
