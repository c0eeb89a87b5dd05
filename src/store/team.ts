/**
 * The SQL of `optchat team` (docs/team.md): the group role, people, and their scope grants. Each operation is a list
 * of literal statements (identifiers and values quoted here, never bound), so that the command can print exactly what
 * it runs and an operator can run the same text by hand. They run in one transaction: role DDL is transactional.
 */
import pg from "pg";
import { OptchatError } from "../core/errors.js";
import { type Pool, type Queryable, withTransaction } from "./db.js";

export const DEFAULT_GROUP_ROLE = "optchat_member";

/** Tables a member may read but never write (authorization and bookkeeping). */
const READ_ONLY_TABLES = ["team", "team_members", "team_grants", "migrations", "revision_clock"];
/** Tables a member's own write path prunes or unstages (their rows are still under the policies). */
const MEMBER_DELETE_TABLES = ["staged_items", "injections", "adapter_problems"];

export interface TeamMember {
  readonly role: string;
  readonly displayName: string | null;
  readonly scopes: readonly string[];
  /** Whether the login still exists and belongs to the group role. */
  readonly inGroup: boolean;
}

const ident = (name: string) => pg.escapeIdentifier(name);
const literal = (value: string) => pg.escapeLiteral(value);

/** A PostgreSQL role name as a person types it: refused when it could not be a plain login name. */
export function checkRoleName(role: string, what = "role"): string {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(role))
    throw new OptchatError(
      "INPUT_INVALID",
      `${what} "${role}" must be a lowercase PostgreSQL role name (letters, digits, _; at most 63)`,
    );
  return role;
}

/**
 * Creates the role unless it exists (roles are cluster-wide: another database's team may have made it, or be making it
 * at this moment: the loser of that race sees duplicate_object or unique_violation, and the role is there).
 */
function createRole(role: string, login: boolean): string {
  return `DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = ${literal(role)}) THEN
    CREATE ROLE ${ident(role)} ${login ? "LOGIN" : "NOLOGIN"};
  END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END $$`;
}

/** `optchat team init`: the group role with the privileges a member needs, recorded as this database's team. */
export function initStatements(group: string, withJobQueue: boolean): string[] {
  const g = ident(group);
  const statements = [
    createRole(group, false),
    `GRANT USAGE ON SCHEMA optchat TO ${g}`,
    `GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA optchat TO ${g}`,
    `REVOKE INSERT, UPDATE ON ${READ_ONLY_TABLES.map((t) => `optchat.${t}`).join(", ")} FROM ${g}`,
    `GRANT DELETE ON ${MEMBER_DELETE_TABLES.map((t) => `optchat.${t}`).join(", ")} TO ${g}`,
    `GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA optchat TO ${g}`,
    `GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA optchat TO ${g}`,
  ];
  if (withJobQueue)
    statements.push(
      `GRANT USAGE ON SCHEMA pgboss TO ${g}`,
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA pgboss TO ${g}`,
      `GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA pgboss TO ${g}`,
    );
  statements.push(
    `INSERT INTO optchat.team (group_role) VALUES (${literal(group)})
  ON CONFLICT (singleton) DO UPDATE SET group_role = EXCLUDED.group_role`,
  );
  return statements;
}

/** `optchat team add`: the person's login (created when missing, without a password), in the group and the team. */
export function addStatements(group: string, role: string, displayName: string | null): string[] {
  const name = displayName === null ? "NULL" : literal(displayName);
  return [
    createRole(role, true),
    `GRANT ${ident(group)} TO ${ident(role)}`,
    `INSERT INTO optchat.team_members (role_name, display_name) VALUES (${literal(role)}, ${name})
  ON CONFLICT (role_name) DO UPDATE SET display_name = coalesce(EXCLUDED.display_name, team_members.display_name)`,
  ];
}

/** `optchat team remove`: out of the team (grants go with the member row) and out of the group; the login stays. */
export function removeStatements(group: string, role: string): string[] {
  return [
    `DELETE FROM optchat.team_members WHERE role_name = ${literal(role)}`,
    `REVOKE ${ident(group)} FROM ${ident(role)}`,
  ];
}

export function grantStatements(role: string, scopeId: string): string[] {
  return [
    `INSERT INTO optchat.team_grants (role_name, scope_id) VALUES (${literal(role)}, ${literal(scopeId)})
  ON CONFLICT DO NOTHING`,
  ];
}

export function revokeStatements(role: string, scopeId: string): string[] {
  return [`DELETE FROM optchat.team_grants WHERE role_name = ${literal(role)} AND scope_id = ${literal(scopeId)}`];
}

/** The team's group role, or undefined before `optchat team init`. */
export async function readGroupRole(db: Queryable): Promise<string | undefined> {
  const { rows } = await db.query<{ group_role: string }>("SELECT group_role FROM optchat.team");
  return rows[0]?.group_role;
}

export async function isMember(db: Queryable, role: string): Promise<boolean> {
  const { rows } = await db.query("SELECT 1 FROM optchat.team_members WHERE role_name = $1::text", [role]);
  return rows.length > 0;
}

/** Runs the statements in one transaction. */
export async function runTeamStatements(pool: Pool, statements: readonly string[]): Promise<void> {
  await withTransaction(pool, async (client) => {
    for (const sql of statements) await client.query(sql);
  });
}

/** Every member with their grants, and whether their login still belongs to the group. */
export async function listTeam(db: Queryable): Promise<TeamMember[]> {
  const { rows } = await db.query<{
    role_name: string;
    display_name: string | null;
    scopes: string[];
    in_group: boolean;
  }>(
    `SELECT m.role_name, m.display_name,
            coalesce(array_agg(g.scope_id ORDER BY g.scope_id) FILTER (WHERE g.scope_id IS NOT NULL), '{}') AS scopes,
            coalesce(pg_catalog.pg_has_role(r.oid, t.group_role, 'MEMBER'), false) AS in_group
       FROM optchat.team_members m
       CROSS JOIN optchat.team t
       LEFT JOIN pg_catalog.pg_roles r ON r.rolname = m.role_name
       LEFT JOIN optchat.team_grants g ON g.role_name = m.role_name
      GROUP BY m.role_name, m.display_name, r.oid, t.group_role
      ORDER BY m.role_name`,
  );
  return rows.map((row) => ({
    role: row.role_name,
    displayName: row.display_name,
    scopes: row.scopes,
    inGroup: row.in_group,
  }));
}

/** Whether the connected role sees every row (no team configured, or the operator): what a compactor worker needs. */
export async function seesEverything(db: Queryable): Promise<{ role: string; all: boolean }> {
  const { rows } = await db.query<{ role: string; all: boolean }>(
    "SELECT current_user::text AS role, optchat.team_sees_all() AS all",
  );
  return { role: rows[0]?.role ?? "", all: rows[0]?.all === true };
}
