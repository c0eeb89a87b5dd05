import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import { runCli } from "../helpers.js";

/**
 * `optchat uninstall` (issue 44, the "out" half): it stops the embedded server, and deletes the data directory only
 * when asked (--delete-data) and confirmed (--yes); asked without --yes it is a dry run that says what would go.
 */

const dir = `/tmp/optchat-it-${process.pid}-uninstall`;
const env = {
  DATABASE_URL: "",
  OPTCHAT_LEGACY_DATABASE_URL: "",
  OPTCHAT_DATA_DIR: dir,
  OPTCHAT_SOCKET_DIR: "",
  OPTCHAT_EMBEDDED_IDLE_SECONDS: "60",
};

/** Processes of this data directory's server (postmaster, backends, supervisor). */
function serverProcesses(): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      if (cmdline.some((arg) => arg === `${dir}/postgres` || arg === dir)) found.push(Number(entry));
    } catch {}
  }
  return found;
}

afterAll(async () => {
  await runCli(["db", "stop"], env);
  rmSync(dir, { recursive: true, force: true });
});

describe("optchat uninstall", () => {
  it("stops the embedded server; deletes its data directory only with --delete-data and --yes", async () => {
    rmSync(dir, { recursive: true, force: true });
    expect((await runCli(["db", "start"], env)).code).toBe(0);
    expect(serverProcesses().length).toBeGreaterThan(0);

    const plain = await runCli(["uninstall"], env);
    expect(plain.code, plain.stderr).toBe(0);
    expect(plain.stdout).toContain("embedded PostgreSQL stopped");
    expect(plain.stdout).toContain(`the memory stays in ${dir}`);
    // The supervisor follows the postmaster out a moment later.
    for (let tries = 0; serverProcesses().length > 0 && tries < 100; tries++)
      await new Promise((resolve) => setTimeout(resolve, 100));
    expect(serverProcesses()).toEqual([]);
    expect(existsSync(`${dir}/postgres`)).toBe(true);

    const asked = await runCli(["uninstall", "--delete-data", "--json"], env);
    expect(asked.code).toBe(2);
    expect(JSON.parse(asked.stdout)).toMatchObject({ ok: true, dataDir: dir, deleted: false, dryRun: true });
    expect(existsSync(`${dir}/postgres`)).toBe(true);

    const confirmed = await runCli(["uninstall", "--delete-data", "--yes"], env);
    expect(confirmed.code, confirmed.stderr).toBe(0);
    expect(confirmed.stdout).toContain(`deleted ${dir}`);
    expect(existsSync(dir)).toBe(false);
  }, 120_000);
});
