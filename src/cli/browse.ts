/** `optchat browse` and `optchat export --html`: the memory browser, live or as static pages (docs/browse.md). */
import { parseArgs } from "node:util";
import { exportHtml } from "../browse/export.js";
import { startBrowseServer } from "../browse/server.js";
import { OptchatError } from "../core/errors.js";
import { createBrowseModel } from "../memory/browse.js";
import type { Config } from "../memory/config.js";
import { openMemory } from "../memory/service.js";

interface Output {
  json: boolean;
  out: (line: string) => void;
  err: (line: string) => void;
}

export const BROWSE_USAGE = "optchat browse [--port N] [--host 127.0.0.1] [--json]";
export const EXPORT_HTML_USAGE = "optchat export --html DIR [--json]";

function parse<O extends Record<string, { type: "string" | "boolean" }>>(
  args: readonly string[],
  flags: O,
  usage: string,
) {
  try {
    const parsed = parseArgs({ args: [...args], options: { json: { type: "boolean" }, ...flags }, strict: true });
    return parsed.values as Record<string, string | boolean | undefined>;
  } catch (error) {
    throw new OptchatError("INPUT_INVALID", `${(error as Error).message}\nUsage: ${usage}`);
  }
}

/** Serves the browser until SIGINT/SIGTERM. The URL with its token goes to stdout, once, and nowhere else. */
export async function browseCommand(args: readonly string[], config: Config, output: Output): Promise<number> {
  const values = parse(args, { port: { type: "string" }, host: { type: "string" } }, BROWSE_USAGE);
  const port = values.port === undefined ? 0 : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new OptchatError("INPUT_INVALID", `--port must be an integer from 0 to 65535, not ${String(values.port)}`);
  const memory = await openMemory(config, { applicationName: "optchat-browse", readOnly: true });
  try {
    const server = await startBrowseServer(createBrowseModel(memory), {
      host: typeof values.host === "string" ? values.host : "127.0.0.1",
      port,
    });
    if (output.json) output.out(JSON.stringify({ ok: true, url: server.url, host: server.host, port: server.port }));
    else {
      output.out(server.url);
      output.err("optchat browse: read-only; open the address above (it holds this run's token). Ctrl-C stops it.");
    }
    await new Promise<void>((resolve) => {
      process.once("SIGTERM", resolve);
      process.once("SIGINT", resolve);
    });
    await server.close();
    return 0;
  } finally {
    await memory.close();
  }
}

/** `optchat export --html DIR`. */
export async function exportHtmlCommand(args: readonly string[], config: Config, output: Output): Promise<number> {
  const values = parse(args, { html: { type: "string" } }, EXPORT_HTML_USAGE);
  if (typeof values.html !== "string" || values.html === "")
    throw new OptchatError("INPUT_INVALID", `--html DIR is required\nUsage: ${EXPORT_HTML_USAGE}`);
  const memory = await openMemory(config, { applicationName: "optchat-export", readOnly: true });
  try {
    const progress = process.stderr.isTTY && !output.json;
    const summary = await exportHtml(createBrowseModel(memory), values.html, ({ pages }) => {
      if (progress && pages % 100 === 0) process.stderr.write(`\r${pages} pages written`);
    });
    if (progress) process.stderr.write("\r");
    if (output.json) output.out(JSON.stringify({ ok: true, ...summary }));
    else
      output.out(
        `Wrote ${summary.pages} pages (${summary.bytes} bytes) to ${summary.directory}: ${summary.scopes} scope(s), ${summary.sessions} session(s), ${summary.messages} message(s). Open ${summary.directory}/index.html.`,
      );
    return 0;
  } finally {
    await memory.close();
  }
}
