import { exportHtml } from "../../browse/export.js";
import { OptchatError } from "../../core/errors.js";
import { createBrowseModel } from "../../memory/browse.js";
import { type CommandContext, parseCommand, withMemory } from "../command.js";

export const HTML_USAGE = "optchat export --html DIR [--json]";
const usage = HTML_USAGE;

export const HTML_DETAILS = `DIR must be new or empty. Every page of \`optchat browse\` is written except search, which needs the
server; nothing in the database is written.`;

/** \`optchat export --html DIR\`: the browser's pages as static files (docs/browse.md). */
export async function exportHtmlCommand(args: readonly string[], { config, output }: CommandContext): Promise<number> {
  const { values } = parseCommand(args, { html: { type: "string" } }, 0, usage);
  if (values.html === undefined || values.html === "")
    throw new OptchatError("INPUT_INVALID", `--html DIR is required\nUsage: ${usage}`);
  const directory = values.html;
  const progress = process.stderr.isTTY && !output.json;
  const summary = await withMemory(
    config,
    "optchat-export",
    (memory) =>
      exportHtml(createBrowseModel(memory), directory, ({ pages }) => {
        if (progress && pages % 100 === 0) process.stderr.write(`\r${pages} pages written`);
      }),
    { readOnly: true },
  );
  if (progress) process.stderr.write("\r");
  if (output.json) output.out(JSON.stringify({ ok: true, ...summary }));
  else
    output.out(
      `Wrote ${summary.pages} pages (${summary.bytes} bytes) to ${summary.directory}: ${summary.scopes} scope(s), ${summary.sessions} session(s), ${summary.messages} message(s). Open ${summary.directory}/index.html.`,
    );
  return 0;
}
