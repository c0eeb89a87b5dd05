import { budgetSettingsOf } from "../../memory/config.js";
import { inspectStoredSession } from "../../memory/inspect.js";
import { resolveSession } from "../../memory/resolve-session.js";
import { type Command, parseCommand, withMemory } from "../command.js";

const usage = "optchat inspect <session> [--json]";

export const inspectCommand: Command = {
  name: "inspect",
  usage: [usage],
  summary:
    "a session's health (by optchat id or OpenCode session id): records, summaries, publications,\n" +
    "failures, lease, last injection, recent problems",
  async run(args, { config, output }) {
    const { positionals } = parseCommand(args, {}, 1, usage);
    const id = positionals[0] as string;
    const report = await withMemory(config, "optchat-inspect", async (memory) =>
      inspectStoredSession(memory, await resolveSession(memory, id), { budget: budgetSettingsOf(config) }),
    );
    output.out(output.json ? JSON.stringify(report) : JSON.stringify(report, null, 2));
    return 0;
  },
};
