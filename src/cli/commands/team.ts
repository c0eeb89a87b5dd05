import { OptchatError } from "../../core/errors.js";
import { changeTeam, DEFAULT_GROUP_ROLE, type TeamRequest, teamMembers } from "../../memory/team.js";
import { type Command, type Output, parseCommand, withMemory } from "../command.js";

const usages = [
  `optchat team init [--group ROLE] [--dry-run] [--json]`,
  "optchat team add ROLE [--name NAME] [--dry-run] [--json]",
  "optchat team remove ROLE [--dry-run] [--json]",
  "optchat team grant|revoke ROLE (PROJECT_ID | --scope SCOPE) [--dry-run] [--json]",
  "optchat team list [--json]",
];
const usage = usages.join("\n       ");

const flags = {
  group: { type: "string" },
  name: { type: "string" },
  scope: { type: "string" },
  "dry-run": { type: "boolean" },
} as const;

/** The request of `optchat team <action> ...`, from its positionals and flags. */
function requestOf(action: string, rest: readonly string[], values: Record<string, unknown>): TeamRequest {
  const role = rest[0];
  const scope = values.scope as string | undefined;
  if (action === "init" && rest.length === 0)
    return { action, ...(values.group ? { group: values.group as string } : {}) };
  if ((action === "add" || action === "remove") && role !== undefined && rest.length === 1)
    return action === "add"
      ? { action, role, ...(values.name ? { displayName: values.name as string } : {}) }
      : { action, role };
  if ((action === "grant" || action === "revoke") && role !== undefined) {
    const project = rest[1];
    if (rest.length === 2 && project !== undefined && scope === undefined)
      return { action, role, scopeId: `project:${project}` };
    if (rest.length === 1 && scope !== undefined) return { action, role, scopeId: scope };
  }
  throw new OptchatError("INPUT_INVALID", `unexpected arguments for \`optchat team ${action}\`\nUsage: ${usage}`);
}

async function list(output: Output, config: Parameters<Command["run"]>[1]["config"]): Promise<number> {
  const team = await withMemory(config, "optchat-team", (memory) => teamMembers(memory.pool), { readOnly: true });
  if (output.json) {
    output.out(JSON.stringify({ ok: true, ...team }));
    return 0;
  }
  if (team.group === undefined) {
    output.out("no team: single-user mode (every role with privileges sees everything). optchat team init starts one.");
    return 0;
  }
  output.out(`team of group role ${team.group}: ${team.members.length} member(s)`);
  for (const m of team.members)
    output.out(
      `${m.role}${m.displayName ? ` (${m.displayName})` : ""}${m.inGroup ? "" : " [not in the group role]"}: ${m.scopes.length > 0 ? m.scopes.join(", ") : "no scope granted"}`,
    );
  return 0;
}

export const teamCommand: Command = {
  name: "team",
  usage: usages,
  summary: "people and their rights on a shared database: group role, one login per person, project grants",
  details: `Run as the operator (the role that owns schema optchat). Every change prints the SQL it runs, in one
transaction; --dry-run prints it without running it. init creates the group role (default ${DEFAULT_GROUP_ROLE}) and grants it
what members need; add creates the person's login when missing (no password: ALTER ROLE ... PASSWORD) and records
their display name; remove takes them out of the team and the group (the login stays); grant/revoke a project
(OpenCode's project id) or any --scope. docs/team.md.`,
  async run(args, { config, output }) {
    const { values, positionals } = parseCommand(args, flags, "any", usage);
    const [action, ...rest] = positionals;
    if (action === "list" && rest.length === 0) return await list(output, config);
    if (action === undefined || !["init", "add", "remove", "grant", "revoke"].includes(action))
      throw new OptchatError(
        "INPUT_INVALID",
        `name an action: init, add, remove, grant, revoke or list\nUsage: ${usage}`,
      );
    const request = requestOf(action, rest, values);
    const dryRun = values["dry-run"] === true;
    const change = await withMemory(config, "optchat-team", (memory) => changeTeam(memory.pool, request, dryRun));
    if (output.json) output.out(JSON.stringify({ ok: true, ...request, ...change }));
    else {
      for (const sql of change.statements) output.out(`${sql};`);
      output.err(change.applied ? `team ${action}: done` : `team ${action}: dry run, nothing changed`);
    }
    return 0;
  },
};
