import { existsSync } from "node:fs";
import { type CommandContext, type Output, parseCommand, withMemory } from "../command.js";
import { interruptible } from "../interrupt.js";
import {
  importOpencodeSessions,
  type OpencodeImportSummary,
  opencodeDatabasePath,
  openOpencodeStorage,
  resolvePluginConfig,
} from "../opencode.js";
import { progressBar } from "../progress.js";

export const OPENCODE_USAGE =
  "optchat import --opencode [--data-dir DIR] [--project DIR] [--dry-run] [--progress] [--json]";

export const OPENCODE_DETAILS = `--opencode        read OpenCode 1.18.33's own storage (opencode.db) instead of a file
--data-dir DIR    OpenCode's data directory, the one holding opencode.db (default $XDG_DATA_HOME/opencode, or
                  ~/.local/share/opencode; OPENCODE_DB is honoured as OpenCode honours it)
--project DIR     only the sessions run in DIR (or below it), or in the git project whose root DIR is
--dry-run         read and map everything, write nothing, and print what an import would do
--progress        a progress line on stderr even when it is not a terminal
Each session is registered as the plugin registers it (OpenCode's session id, the project scope of OPTCHAT_SCOPE,
its parent for a subagent's), its turns, records and finalization keys are the ones the plugin makes, so importing
again, or the plugin later running one of these sessions, stores nothing twice. Subagent sessions are recorded and
not published. Sessions the plugin is driving right now, or that it recorded only from the middle on, are skipped
(the summary says why). The compactor worker (optchat worker, or OpenCode's embedded one) then summarizes and
publishes the imported turns.`;

/** `optchat import --opencode …`: see OPENCODE_DETAILS. */
export async function importOpencodeCommand(args: readonly string[], { config, output }: CommandContext) {
  const flags = {
    opencode: { type: "boolean" },
    "data-dir": { type: "string" },
    project: { type: "string" },
    "dry-run": { type: "boolean" },
    progress: { type: "boolean" },
  } as const;
  const { values } = parseCommand(args, flags, 0, OPENCODE_USAGE);
  if (values["data-dir"] === undefined && !existsSync(opencodeDatabasePath().databasePath)) {
    // No OpenCode history where OpenCode keeps it: nothing to do, which is no failure (issue 40 item 10).
    const path = opencodeDatabasePath().databasePath;
    if (output.json) output.out(JSON.stringify({ ok: true, nothingToImport: true, databasePath: path }));
    else
      output.out(
        `nothing to import: no OpenCode history at ${path} (OpenCode keeps its sessions there once it has run; --data-dir DIR for another place)`,
      );
    return 0;
  }
  const storage = openOpencodeStorage(values["data-dir"] === undefined ? {} : { dataDir: values["data-dir"] });
  const { scope } = resolvePluginConfig(undefined, process.env).plugin;
  const bar = progressBar({
    format: "import [{bar}] {value}/{total} sessions | {turns} turns, {records} records",
    total: 0,
    forced: values.progress === true,
    json: output.json,
  });
  const options = {
    scope,
    ...(values.project !== undefined ? { project: values.project } : {}),
    onProgress: (p: { sessions: number; totalSessions: number; turns: number; records: number }) => {
      bar.setTotal(p.totalSessions);
      bar.update(p.sessions, { turns: p.turns, records: p.records });
    },
  };
  let summary: OpencodeImportSummary;
  const interrupt = interruptible("import", () => bar.stop());
  try {
    summary = values["dry-run"]
      ? await importOpencodeSessions(undefined, storage, { ...options, dryRun: true })
      : await withMemory(config, "optchat-import", (memory) => importOpencodeSessions(memory, storage, options));
  } finally {
    interrupt.release();
    bar.stop();
  }
  printSummary(summary, output);
  return summary.records.conflicts === 0 ? 0 : 1;
}

function printSummary(summary: OpencodeImportSummary, output: Output): void {
  if (output.json) {
    output.out(JSON.stringify({ ok: summary.records.conflicts === 0, ...summary }));
    return;
  }
  const { sessions, turns, records, messagesNotStored: not } = summary;
  const skipped = Object.entries(sessions.skipped).filter(([, n]) => n > 0);
  if (!summary.dryRun && sessions.imported > 0 && records.sealed === 0 && turns.finished === 0) {
    output.out(
      `nothing new to import from ${summary.databasePath}: its ${sessions.imported} session(s) (${turns.total} turn(s), ${records.total} record(s)) are already in memory`,
    );
  } else
    output.out(
      `${summary.dryRun ? "would import" : "imported"} from ${summary.databasePath}: ${sessions.imported} of ${sessions.found} session(s) (${sessions.subagents} subagent, not published), ` +
        `${turns.total} turn(s) (${turns.completed} completed, ${turns.interrupted} interrupted, ${turns.failed} failed), ` +
        (summary.dryRun
          ? `${records.total} record(s)`
          : `${records.total} record(s) (${records.sealed} new, ${records.duplicates} already stored, ${records.conflicts} conflicts)`) +
        ` in ${summary.seconds.toFixed(1)} s`,
    );
  if (skipped.length > 0) output.out(`skipped: ${skipped.map(([reason, n]) => `${n} ${reason}`).join(", ")}`);
  for (const s of sessions.skippedSessions) output.err(`  ${s.id}: ${s.reason}${s.detail ? ` (${s.detail})` : ""}`);
  const unstored = [
    not.unfinishedSteps > 0 ? `${not.unfinishedSteps} step(s) never completed (their process was stopped)` : "",
    not.hostMessages > 0 ? `${not.hostMessages} OpenCode message(s) of its own (compaction, "Continue…")` : "",
    not.outsideTurns > 0 ? `${not.outsideTurns} assistant message(s) outside any turn` : "",
  ].filter(Boolean);
  if (unstored.length > 0) output.out(`not stored, as live: ${unstored.join("; ")}`);
  if (!summary.dryRun && turns.finished > 0) {
    output.err(
      `${turns.publicationsScheduled} publication(s) scheduled: the compactor worker (\`optchat worker\`) summarizes and publishes them`,
    );
  }
  if (turns.outcomeDiffers > 0) {
    output.err(`${turns.outcomeDiffers} turn(s) were already stored with another outcome; the stored one is kept`);
  }
}
