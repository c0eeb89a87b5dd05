// Every `optchat` command, in the order the overview lists them. A new command is one module under commands/ and one
// line here.
import type { Command } from "./command.js";
import { archiveCommand, isolateCommand, unarchiveCommand } from "./commands/archive.js";
import { auditCommand } from "./commands/audit.js";
import { browseCommand } from "./commands/browse.js";
import { costCommand } from "./commands/cost.js";
import { dbCommand } from "./commands/db.js";
import { doctorCommand } from "./commands/doctor.js";
import { exportCommand } from "./commands/export.js";
import { forgetCommand } from "./commands/forget.js";
import { importFileCommand } from "./commands/import.js";
import { inspectCommand } from "./commands/inspect.js";
import { migrateCommand } from "./commands/migrate.js";
import { rebuildCommand } from "./commands/rebuild.js";
import { scopesCommand } from "./commands/scopes.js";
import { searchCommand } from "./commands/search.js";
import { sessionsCommand } from "./commands/sessions.js";
import { statusCommand } from "./commands/status.js";
import { teamCommand } from "./commands/team.js";
import { uninstallCommand } from "./commands/uninstall.js";
import { viewCommand } from "./commands/view.js";
import { workerCommand } from "./commands/worker.js";
import { zoomCommand } from "./commands/zoom.js";

export const COMMANDS: readonly Command[] = [
  migrateCommand,
  statusCommand,
  doctorCommand,
  dbCommand,
  workerCommand,
  viewCommand,
  zoomCommand,
  scopesCommand,
  searchCommand,
  sessionsCommand,
  importFileCommand,
  exportCommand,
  auditCommand,
  forgetCommand,
  rebuildCommand,
  archiveCommand,
  unarchiveCommand,
  isolateCommand,
  inspectCommand,
  costCommand,
  teamCommand,
  browseCommand,
  uninstallCommand,
];

export function findCommand(name: string): Command | undefined {
  return COMMANDS.find((command) => command.name === name);
}

/** The overview `optchat help` prints: every command's usage and summary. */
export function overview(): string {
  const lines = ["optchat — shared, never-ending memory for OpenCode, kept in PostgreSQL", "", "Usage:"];
  for (const command of COMMANDS) {
    for (const usage of command.usage) lines.push(`  ${usage}`);
    for (const line of command.summary.split("\n")) lines.push(`      ${line}`);
  }
  lines.push(
    "  optchat help [command]",
    "      this overview, or one command's help (also `optchat <command> --help`)",
    "",
  );
  lines.push(
    "Settings come from the environment; docs/configuration.md lists them all (DATABASE_URL, OPTCHAT_SUMMARIZER, ...).",
  );
  return lines.join("\n");
}

/** `optchat <name> --help`: the command's usage, what it does, and its details. */
export function commandHelp(command: Command): string {
  const lines = ["Usage:", ...command.usage.map((usage) => `  ${usage}`), "", command.summary.replace(/\n/g, " ")];
  if (command.details) lines.push("", command.details);
  lines.push("", "Every command accepts --json (one JSON object on stdout) and --help.");
  return lines.join("\n");
}
