import { OptchatError } from "../../core/errors.js";
import { resolveSession } from "../../memory/resolve-session.js";
import { type Command, parseCommand, withMemory } from "../command.js";

const archiveUsage = "optchat archive --session ID [--json]";
const unarchiveUsage = "optchat unarchive --session ID [--json]";
const isolateUsage = "optchat isolate --session ID [--json]";

function sessionFlag(args: readonly string[], usage: string): string {
  const { values } = parseCommand(args, { session: { type: "string" } }, 0, usage);
  if (!values.session) throw new OptchatError("INPUT_INVALID", `--session is required\nUsage: ${usage}`);
  return values.session;
}

function archiving(name: "archive" | "unarchive", usage: string, archived: boolean): Command {
  return {
    name,
    usage: [usage],
    summary: archived
      ? "hide a session from `optchat sessions`, memory_sessions and the browser; nothing is forgotten"
      : "show an archived session in listings again",
    details:
      "Archive only hides: the session's memory stays in search, zoom and the shared view (to remove it, `optchat forget`; to stop sharing it, `optchat isolate`). docs/deletion.md.",
    async run(args, { config, output }) {
      const id = sessionFlag(args, usage);
      const sessionId = await withMemory(config, "optchat-archive", async (memory) => {
        const session = await resolveSession(memory, id);
        await memory.archiveSession(session.sessionId, archived);
        return session.sessionId;
      });
      output.out(output.json ? JSON.stringify({ ok: true, sessionId, archived }) : `${name}d ${sessionId}`);
      return 0;
    },
  };
}

export const archiveCommand = archiving("archive", archiveUsage, true);
export const unarchiveCommand = archiving("unarchive", unarchiveUsage, false);

export const isolateCommand: Command = {
  name: "isolate",
  usage: [isolateUsage],
  summary:
    "revoke a session's sharing: it moves to isolated sharing, its publications are retired from the shared view",
  details:
    "The session keeps its own memory; other sessions no longer see it (its shared summaries are rebuilt without it). docs/deletion.md.",
  async run(args, { config, output }) {
    const id = sessionFlag(args, isolateUsage);
    const report = await withMemory(config, "optchat-isolate", async (memory) =>
      memory.isolateSession((await resolveSession(memory, id)).sessionId),
    );
    output.out(
      output.json
        ? JSON.stringify({ ok: true, ...report })
        : report.toScope
          ? `isolated ${report.sessionId}: now in ${report.toScope}, ${report.publicationsRetired} publication(s) retired from ${report.fromScope}`
          : `${report.sessionId} was isolated already`,
    );
    return 0;
  },
};
