import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { createInterface } from "node:readline";
import { OptchatError } from "../../core/errors.js";
import type { Config } from "../../memory/config.js";
import { checkJsonl, type ImportProgress, type ImportSummary, importJsonl } from "../../memory/import.js";
import { type Command, type Output, parseCommand, withMemory } from "../command.js";
import { interruptible } from "../interrupt.js";
import { importOpencodeCommand, OPENCODE_DETAILS, OPENCODE_USAGE } from "./import-opencode.js";

const USAGE = "optchat import <file.jsonl> [--progress] [--json]";

export const importFileCommand: Command = {
  name: "import",
  usage: [USAGE, OPENCODE_USAGE],
  summary:
    "import sessions and turns from a JSONL file (docs/import.md), or with --opencode the sessions OpenCode\n" +
    "already stored (recorded as the plugin records them live: nothing is stored twice)",
  details: OPENCODE_DETAILS,
  run: (args, ctx) =>
    args.includes("--opencode") ? importOpencodeCommand(args, ctx) : importCommand(args, ctx.config, ctx.output),
};

/** Invalid lines listed before giving up on a file. */
const MAX_LISTED_ERRORS = 20;

/** Where the progress line goes; only a terminal gets one. */
export interface ProgressTerminal {
  readonly isTTY?: boolean;
  write(chunk: string): unknown;
}

/**
 * `optchat import <file.jsonl> [--json]` (docs/import.md). Two passes over the file: the first checks every line
 * without touching the database, and an invalid file is refused whole (exit 1, naming each bad line and field, up to
 * 20); the second imports it line by line. Progress goes to stderr as one updating line when stderr is a terminal.
 * Prints a summary; exit 0, or 1 when some records or outcomes did not land as the file says (conflicts, listed).
 */
export async function importCommand(
  args: readonly string[],
  config: Config,
  output: Output,
  terminal: ProgressTerminal = process.stderr,
): Promise<number> {
  const { file, forced } = parseImportArgs(args);
  await assertReadableFile(file);
  const progress = progressLine(terminal, forced);

  const check = await checkJsonl(readLines(file), { maxErrors: MAX_LISTED_ERRORS });
  if (check.errors.length > 0) {
    const more = check.invalidLines - check.errors.length;
    const verdict = `${file}: ${check.invalidLines} invalid line(s)${more > 0 ? ` (the first ${check.errors.length} are listed)` : ""}; nothing was imported`;
    if (output.json) {
      const [first] = check.errors;
      output.out(
        JSON.stringify({
          ok: false,
          error: { ...(first as NonNullable<typeof first>).toJSON(), message: verdict },
          invalidLines: check.invalidLines,
          errors: check.errors.map((error) => ({ line: error.line, issues: error.issues, message: error.message })),
        }),
      );
    } else {
      for (const error of check.errors) output.err(`optchat: ${error.code}: ${error.message}`);
      output.err(`optchat: ${verdict}`);
    }
    return 1;
  }

  let summary: ImportSummary;
  const interrupt = interruptible("import", () => progress.end());
  try {
    summary = await withMemory(config, "optchat-import", (memory) =>
      importJsonl(memory, readLines(file), { onProgress: (p) => progress.update(p, check.lines) }),
    );
  } finally {
    interrupt.release();
    progress.clear();
  }

  if (output.json) {
    output.out(JSON.stringify({ ok: summary.errors === 0, file, ...summary }));
  } else {
    const { turns, records } = summary;
    output.out(
      `imported ${file}: ${summary.lines} lines, ${summary.sessions} sessions, ${turns.total} turns (${turns.finished} finished now, ${turns.alreadyFinished} already finished), ${records.total} records (${records.sealed} new, ${records.duplicates} already stored, ${records.conflicts} conflicts) in ${summary.seconds.toFixed(1)} s`,
    );
    if (turns.publicationsScheduled > 0) {
      output.err(
        `${turns.publicationsScheduled} publication(s) scheduled: the compactor worker (\`optchat worker\`) summarizes and publishes them`,
      );
    }
    for (const problem of summary.problems) output.err(`  line ${problem.line} ${problem.field}: ${problem.problem}`);
    if (summary.errors > summary.problems.length) {
      output.err(`  ... and ${summary.errors - summary.problems.length} more`);
    }
  }
  if (summary.errors > 0 && !output.json) {
    output.err(`optchat: ${summary.errors} record(s) or outcome(s) were already stored differently and were kept`);
  }
  return summary.errors === 0 ? 0 : 1;
}

function parseImportArgs(args: readonly string[]): { file: string; forced: boolean } {
  const { values, positionals } = parseCommand(args, { progress: { type: "boolean" } }, 1, USAGE);
  return { file: positionals[0] as string, forced: values.progress === true };
}

async function assertReadableFile(file: string): Promise<void> {
  try {
    const info = await stat(file);
    if (!info.isFile()) throw new Error("not a regular file");
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new OptchatError("INPUT_INVALID", `import: cannot read ${file} (${reason})\nUsage: ${USAGE}`, {
      field: "file",
    });
  }
}

/** The file's lines, streamed (\n or \r\n endings; a last line without a newline counts). */
async function* readLines(file: string): AsyncGenerator<string> {
  const input = createReadStream(file, { encoding: "utf8" });
  const lines = createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY });
  try {
    for await (const line of lines) yield line;
  } finally {
    lines.close();
    input.destroy();
  }
}

/**
 * One updating stderr line, redrawn at most every 100 ms, when stderr is a terminal; elsewhere nothing, or with
 * --progress a plain line every 5 s and at the end (for logs).
 */
function progressLine(terminal: ProgressTerminal, forced: boolean) {
  let shown = false;
  let last = 0;
  return {
    update(p: ImportProgress, totalLines: number): void {
      if (!terminal.isTTY && !forced) return;
      const now = performance.now();
      if (now - last < (terminal.isTTY ? 100 : 5_000) && p.lines < totalLines) return;
      last = now;
      const text = `imported ${p.lines}/${totalLines} lines, ${p.sessions} sessions, ${p.turns} turns, ${p.records} records`;
      if (!terminal.isTTY) {
        terminal.write(`${text}\n`);
        return;
      }
      shown = true;
      terminal.write(`\r\u001b[K${text}`);
    },
    clear(): void {
      if (shown) terminal.write("\r\u001b[K");
    },
    /** Ends a line being redrawn with a newline, keeping what it said (an interruption prints below it). */
    end(): void {
      if (shown) terminal.write("\n");
      shown = false;
    },
  };
}
