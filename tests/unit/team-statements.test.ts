import { describe, expect, it } from "vitest";
import { addStatements, checkRoleName, initStatements, removeStatements } from "../../src/store/team.js";

describe("optchat team statements", () => {
  it("refuses role names that are not plain lowercase PostgreSQL names", () => {
    for (const bad of ['x"; DROP TABLE optchat.records; --', "Alice", "a b", "", "1abc", "a".repeat(64)])
      expect(() => checkRoleName(bad)).toThrow(/lowercase PostgreSQL role name/);
    expect(checkRoleName("alice_2")).toBe("alice_2");
  });

  it("quotes display names as literals and gives members no write on the team tables", () => {
    const [, , member] = addStatements("optchat_member", "alice", "O'Brien");
    expect(member).toContain("VALUES ('alice', 'O''Brien')");
    const init = initStatements("optchat_member", false).join(";\n");
    expect(init).toMatch(/REVOKE INSERT, UPDATE ON optchat\.team, optchat\.team_members, optchat\.team_grants/);
    expect(init).not.toMatch(/DELETE ON ALL TABLES IN SCHEMA optchat/);
    expect(init).not.toContain("pgboss");
    expect(initStatements("optchat_member", true).join("\n")).toContain("GRANT USAGE ON SCHEMA pgboss");
  });

  it("removes the member row before taking the group away, and never drops the login", () => {
    expect(removeStatements("optchat_member", "carol")).toEqual([
      "DELETE FROM optchat.team_members WHERE role_name = 'carol'",
      'REVOKE "optchat_member" FROM "carol"',
    ]);
  });
});
