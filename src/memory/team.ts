/**
 * Team administration (docs/team.md), for `optchat team`: each operation returns the SQL it runs (or would run, with
 * `dryRun`), so that an operator sees and can repeat exactly what was done. Only the operator (the owner of schema
 * optchat) can run them: members have no write privilege on the team tables.
 */
import { OptchatError } from "../core/errors.js";
import type { Pool } from "../store/db.js";
import { jobQueueInstalled } from "../store/job-queue.js";
import {
  addStatements,
  checkRoleName,
  DEFAULT_GROUP_ROLE,
  grantStatements,
  initStatements,
  isMember,
  listTeam,
  readGroupRole,
  removeStatements,
  revokeStatements,
  runTeamStatements,
  type TeamMember,
} from "../store/team.js";

export type { TeamMember };
export { DEFAULT_GROUP_ROLE };

export interface TeamChange {
  readonly statements: readonly string[];
  readonly applied: boolean;
}

export type TeamRequest =
  | { readonly action: "init"; readonly group?: string }
  | { readonly action: "add"; readonly role: string; readonly displayName?: string }
  | { readonly action: "remove"; readonly role: string }
  | { readonly action: "grant" | "revoke"; readonly role: string; readonly scopeId: string };

/** Runs one change of the team (or only plans it with `dryRun`). */
export async function changeTeam(pool: Pool, request: TeamRequest, dryRun = false): Promise<TeamChange> {
  const statements = await planChange(pool, request);
  if (!dryRun) await runTeamStatements(pool, statements);
  return { statements, applied: !dryRun };
}

async function planChange(pool: Pool, request: TeamRequest): Promise<string[]> {
  if (request.action === "init") {
    const group = checkRoleName(request.group ?? DEFAULT_GROUP_ROLE, "group role");
    const existing = await readGroupRole(pool);
    if (existing !== undefined && existing !== group)
      throw new OptchatError(
        "INPUT_INVALID",
        `this database's team already uses group role "${existing}"; run \`optchat team init --group ${existing}\` to refresh its privileges`,
      );
    return initStatements(group, await jobQueueInstalled(pool));
  }
  const role = checkRoleName(request.role);
  const group = await requireGroup(pool);
  if (role === group) throw new OptchatError("INPUT_INVALID", `"${role}" is the team's group role, not a person`);
  if (request.action === "add") return addStatements(group, role, request.displayName?.trim() || null);
  if (!(await isMember(pool, role)))
    throw new OptchatError("INPUT_INVALID", `"${role}" is not a member of this database's team (optchat team list)`);
  if (request.action === "remove") return removeStatements(group, role);
  if (request.scopeId.length === 0 || request.scopeId.length > 300)
    throw new OptchatError("INPUT_INVALID", "the scope must be 1 to 300 characters");
  return request.action === "grant" ? grantStatements(role, request.scopeId) : revokeStatements(role, request.scopeId);
}

async function requireGroup(pool: Pool): Promise<string> {
  const group = await readGroupRole(pool);
  if (group === undefined)
    throw new OptchatError(
      "INPUT_INVALID",
      "no team in this database yet: run `optchat team init` first (docs/team.md)",
    );
  return group;
}

export async function teamMembers(pool: Pool): Promise<{ group: string | undefined; members: TeamMember[] }> {
  const group = await readGroupRole(pool);
  return { group, members: group === undefined ? [] : await listTeam(pool) };
}
