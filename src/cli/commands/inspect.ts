import { OptchatError } from "../../core/errors.js";
import { inspectStoredSession } from "../../memory/inspect.js";
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
    const report = await withMemory(config, "optchat-inspect", async (memory) => {
      // Both kinds of id start with ses_: try ours, then OpenCode's.
      const session =
        (await memory.getSession(id).catch(() => undefined)) ?? (await memory.host.findSession("opencode", id));
      if (!session) {
        throw new OptchatError(
          "SESSION_NOT_FOUND",
          `No session ${id}: give an optchat session id (from \`optchat sessions --scope …\`) or an OpenCode session id that the plugin has seen`,
          { sessionId: id },
        );
      }
      return await inspectStoredSession(memory, session);
    });
    output.out(output.json ? JSON.stringify(report) : JSON.stringify(report, null, 2));
    return 0;
  },
};
