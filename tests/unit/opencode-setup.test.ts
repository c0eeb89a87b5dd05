import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { pluginLine } from "../../scripts/opencode-setup.js";
import { collect, startScript } from "../helpers.js";

describe("npm run opencode-setup", () => {
  it("prints the plugin line with the database in effect, not a fixed default", async () => {
    const dir = await mkdtemp(join(tmpdir(), "optchat-setup-"));
    try {
      const url = "postgres://me@db.example:6543/team_memory";
      const run = await collect(
        startScript("scripts/opencode-setup.ts", [join(dir, "opencode")], { DATABASE_URL: url }),
      );
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toContain(`{"databaseUrl":"${url}"}`);
      expect(run.stdout).not.toContain("127.0.0.1:5432/optchat");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("hides a password and says where it goes", () => {
    const { line, passwordHidden } = pluginLine("postgres://me:s3cret@db.example/optchat");
    expect(line).not.toContain("s3cret");
    expect(line).toContain("postgres://me:***@db.example/optchat");
    expect(passwordHidden).toBe(true);
    expect(JSON.parse(`{${line}}`).plugin[0][0]).toMatch(/\/plugin\/index\.ts$/);
  });
});
