import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { pluginLine, V2_PLUGIN_DIR } from "../../scripts/opencode-setup.js";
import { collect, startScript } from "../helpers.js";

describe("npm run opencode-setup", () => {
  it("prints the plugin line with the database in effect, not a fixed default", async () => {
    const dir = await mkdtemp(join(tmpdir(), "optchat-setup-"));
    try {
      const url = "postgres://me@db.example:6543/team_memory";
      const run = await collect(
        startScript("scripts/opencode-setup.ts", [join(dir, "opencode"), "--no-plugin"], { DATABASE_URL: url }),
      );
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toContain(`{"databaseUrl":"${url}"}`);
      expect(run.stdout).not.toContain("127.0.0.1:5432/optchat");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("adds the plugin to opencode.json once, keeps what the file holds, and --remove takes it out (issue 40)", async () => {
    const dir = await mkdtemp(join(tmpdir(), "optchat-setup-"));
    try {
      const configDir = join(dir, "opencode");
      await mkdir(configDir, { recursive: true });
      await writeFile(join(configDir, "opencode.json"), JSON.stringify({ model: "anthropic/x", plugin: ["other"] }));
      for (let n = 0; n < 2; n++) {
        const run = await collect(startScript("scripts/opencode-setup.ts", [configDir], {}));
        expect(run.code, run.stderr).toBe(0);
        expect(run.stdout).toContain(n === 0 ? "optchat added to" : "optchat is already in");
      }
      const written = JSON.parse(await readFile(join(configDir, "opencode.json"), "utf8"));
      expect(written.model).toBe("anthropic/x");
      expect(written.plugin).toEqual(["other", expect.stringMatching(/\/plugin\/index\.ts$/)]);
      const removed = await collect(startScript("scripts/opencode-setup.ts", [configDir, "--remove"], {}));
      expect(removed.stdout).toContain("optchat removed from");
      expect(JSON.parse(await readFile(join(configDir, "opencode.json"), "utf8")).plugin).toEqual(["other"]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("--v2 configures OpenCode V2: plugin/v2 under 'plugins' once, V1's line and the rest kept; --remove takes it out", async () => {
    const dir = await mkdtemp(join(tmpdir(), "optchat-setup-"));
    try {
      const configDir = join(dir, "opencode");
      await mkdir(configDir, { recursive: true });
      const before = { model: "fake/fake", plugin: ["v1-other"], plugins: ["/somewhere/other-v2"] };
      await writeFile(join(configDir, "opencode.json"), JSON.stringify(before));
      for (let n = 0; n < 2; n++) {
        const run = await collect(startScript("scripts/opencode-setup.ts", [configDir, "--v2"], {}));
        expect(run.code, run.stderr).toBe(0);
        expect(run.stdout).toContain("Configuring OpenCode V2 (@opencode/cli 2.1.2)");
        expect(run.stdout).toContain(n === 0 ? "optchat added to" : "optchat is already in");
      }
      const written = JSON.parse(await readFile(join(configDir, "opencode.json"), "utf8"));
      expect(written.plugins).toEqual(["/somewhere/other-v2", V2_PLUGIN_DIR]);
      expect(V2_PLUGIN_DIR).toMatch(/\/plugin\/v2$/);
      expect(written.plugin).toEqual(["v1-other"]);
      expect(written.model).toBe("fake/fake");
      // V2 installs nothing for a local plugin directory: nothing is linked (V1's set-up links @opencode-ai/plugin).
      expect(existsSync(join(configDir, "node_modules"))).toBe(false);
      const removed = await collect(startScript("scripts/opencode-setup.ts", [configDir, "--v2", "--remove"], {}));
      expect(removed.stdout).toContain("optchat (OpenCode V2) removed from");
      const after = JSON.parse(await readFile(join(configDir, "opencode.json"), "utf8"));
      expect(after).toEqual(before);
      const v1 = await collect(startScript("scripts/opencode-setup.ts", [configDir, "--no-plugin"], {}));
      expect(v1.stdout).toContain("Configuring OpenCode V1 (opencode-ai 1.18.33)");
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
