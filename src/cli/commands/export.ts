import { OptchatError } from "../../core/errors.js";
import type { Command } from "../command.js";
import { exportHtmlCommand, HTML_DETAILS, HTML_USAGE } from "./export-html.js";
import { exportJsonlCommand, JSONL_DETAILS, JSONL_USAGE } from "./export-jsonl.js";

/** `optchat export`: memory in the import format (--jsonl) or as the browser's static pages (--html DIR). */
export const exportCommand: Command = {
  name: "export",
  usage: [JSONL_USAGE, HTML_USAGE],
  summary:
    "memory in the import format (--jsonl: importing it into an empty database gives back every record), or the\n" +
    "browser's pages as static files in DIR (--html DIR: open DIR/index.html, docs/browse.md)",
  details: `${JSONL_DETAILS}\n\n--html DIR: ${HTML_DETAILS}`,
  async run(args, ctx) {
    const jsonl = args.includes("--jsonl");
    const html = args.some((arg) => arg === "--html" || arg.startsWith("--html="));
    if (jsonl === html) {
      throw new OptchatError(
        "INPUT_INVALID",
        `choose a format: --jsonl or --html DIR\nUsage: ${JSONL_USAGE}\n       ${HTML_USAGE}`,
      );
    }
    return jsonl ? await exportJsonlCommand(args, ctx) : await exportHtmlCommand(args, ctx);
  },
};
