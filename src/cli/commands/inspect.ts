import { budgetSettingsOf } from "../../memory/config.js";
import { inspectStoredSession } from "../../memory/inspect.js";
import { inspectText } from "../../memory/inspect-text.js";
import { resolveSession } from "../../memory/resolve-session.js";
import { type Command, parseCommand, withMemory } from "../command.js";

const usage = "optchat inspect <session> [--json]";

export const inspectCommand: Command = {
  name: "inspect",
  usage: [usage],
  summary:
    "a session's health (by optchat id or OpenCode session id), its verdict first: records, summaries,\n" +
    "publications, failures, lease, workers, last injection, recent problems (--json: the full report)",
  async run(args, { config, output }) {
    const { positionals } = parseCommand(args, {}, 1, usage);
    const id = positionals[0] as string;
    const report = await withMemory(config, "optchat-inspect", async (memory) =>
      inspectStoredSession(memory, await resolveSession(memory, id), { budget: budgetSettingsOf(config) }),
    );
    output.out(output.json ? JSON.stringify(report) : inspectText(report));
    return 0;
  },
};
