import { once } from "node:events";
import { createWriteStream, existsSync } from "node:fs";
import { OptchatError } from "../../core/errors.js";
import { type ExportSummary, exportJsonl } from "../../memory/export.js";
import { resolveSession } from "../../memory/resolve-session.js";
import { type CommandContext, parseCommand, withMemory } from "../command.js";
import { progressBar } from "../progress.js";

export const JSONL_USAGE = "optchat export --jsonl [--scope S] [--session X] [--out FILE] [--progress] [--json]";
const usage = JSONL_USAGE;

export const JSONL_DETAILS = `--jsonl           the import format, one JSON object per line (the only format so far)
--scope S         only the sessions of scope S (optchat scopes lists them); default: every session
--session X       only session X (optchat's id, or OpenCode's)
--out FILE        write to FILE instead of stdout; the summary then goes to stdout, else to stderr
--progress        a progress line on stderr even when it is not a terminal
Sessions come parents first, each session's turns in the order they were admitted. Running turns are left out (an
import needs a turn's outcome): export again once they end. For a full backup of everything (summaries, publications,
jobs), use pg_dump: docs/backup.md.`;

/** \`optchat export --jsonl …\`: memory in the import format (docs/import.md, "Export"). */
export async function exportJsonlCommand(args: readonly string[], { config, output }: CommandContext): Promise<number> {
  const flags = {
    jsonl: { type: "boolean" },
    scope: { type: "string" },
    session: { type: "string" },
    out: { type: "string" },
    progress: { type: "boolean" },
  } as const;
  const { values } = parseCommand(args, flags, 0, usage);
  if (!values.jsonl) throw new OptchatError("INPUT_INVALID", `choose a format: --jsonl\nUsage: ${usage}`);
  if (values.out !== undefined && existsSync(values.out)) {
    throw new OptchatError("INPUT_INVALID", `--out ${values.out} already exists: remove it or choose another file`, {
      field: "out",
    });
  }
  const target = values.out === undefined ? process.stdout : createWriteStream(values.out, { flags: "wx" });
  const write = lineWriter(target);
  const summaryTo = values.out === undefined ? output.err : output.out;
  const bar = progressBar({
    format: "export [{bar}] {value}/{total} sessions | {turns} turns, {records} records",
    total: 0,
    forced: values.progress === true,
    json: output.json,
  });
  let summary: ExportSummary;
  try {
    summary = await withMemory(
      config,
      "optchat-export",
      async (memory) => {
        const session = values.session === undefined ? undefined : await resolveSession(memory, values.session);
        return await exportJsonl(
          memory.pool,
          { ...(values.scope ? { scopeId: values.scope } : {}), ...(session ? { sessionId: session.sessionId } : {}) },
          write,
          {
            onProgress: (p) => {
              bar.setTotal(p.totalSessions);
              bar.update(p.sessions, { turns: p.turns, records: p.records });
            },
          },
        );
      },
      { readOnly: true },
    );
  } catch (error) {
    if (isClosedPipe(error)) return 0; // `optchat export --jsonl | head`: the reader has what it wanted
    throw error;
  } finally {
    bar.stop();
    if (target !== process.stdout) await closeFile(target);
  }
  reportExport(summary, values.out, summaryTo, output);
  return 0;
}

/** What was exported, on `summaryTo` (stderr when the lines went to stdout), and what was left out, on stderr. */
function reportExport(
  summary: ExportSummary,
  file: string | undefined,
  summaryTo: (line: string) => void,
  output: CommandContext["output"],
): void {
  if (output.json) summaryTo(JSON.stringify({ ok: true, ...(file ? { file } : {}), ...summary }));
  else {
    summaryTo(
      `exported ${summary.sessions} session(s), ${summary.turns} turn(s), ${summary.records} record(s), ${summary.bytes} payload bytes${file ? ` to ${file}` : ""}`,
    );
    if (summary.skipped.activeTurns > 0) {
      output.err(`  ${summary.skipped.activeTurns} running turn(s) left out: export again once they end`);
    }
    if (summary.skipped.emptyTurns > 0) output.err(`  ${summary.skipped.emptyTurns} turn(s) without records left out`);
  }
}

/** Writes one line and waits while the stream's buffer is full; rejects once the stream has failed. */
function lineWriter(stream: NodeJS.WritableStream): (line: string) => Promise<void> {
  let failure: Error | undefined;
  stream.on("error", (error: Error) => {
    failure = error;
  });
  return async (line) => {
    if (failure) throw failure;
    if (!stream.write(`${line}\n`)) {
      await Promise.race([once(stream, "drain"), once(stream, "error").then(([error]) => Promise.reject(error))]);
    }
  };
}

async function closeFile(stream: NodeJS.WritableStream): Promise<void> {
  if ((stream as { destroyed?: boolean }).destroyed) return;
  stream.end();
  await once(stream, "close").catch(() => {});
}

function isClosedPipe(error: unknown): boolean {
  return (error as NodeJS.ErrnoException | undefined)?.code === "EPIPE";
}
