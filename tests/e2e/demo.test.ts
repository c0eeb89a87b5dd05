import { describe, expect, inject, it } from "vitest";
import { collect, startScript } from "../helpers.js";

describe("npm run demo", () => {
  it("runs two real OpenCode processes: B's first request holds A's decision, B zooms to A's exact words", async () => {
    const result = await collect(startScript("scripts/demo.ts", [], { DATABASE_URL: inject("adminUrl") }));
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/B's first model request \(#\d+\) carried, before any tool call:/);
    expect(result.stdout).toContain(
      "| pub:0+1|user: We need a persistent queue for the importer. Decision: no Redis; use Postgres LISTEN/NOTIFY",
    );
    expect(result.stdout).toMatch(/memory_zoom (mem_\w+:0:0\+1) -> <original_message ref="\1" kind="user"/);
    expect(result.stdout).toContain("Done: B saw A's decision without asking, and reached A's exact words in 3 zooms.");
    expect(result.stdout).toMatch(/Every request the model received: .*\.demo\/.*\/requests\.jsonl/);
  }, 180_000);

  it("--v2: the same story on OpenCode V2 (@opencode/cli 2.1.2) with plugin/v2, no process left", async () => {
    const result = await collect(startScript("scripts/demo.ts", ["--v2"], { DATABASE_URL: inject("adminUrl") }));
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain("optchat demo on OpenCode V2 (@opencode/cli 2.1.2)");
    expect(result.stdout).toMatch(/B's first model request \(#\d+\) carried, before any tool call:/);
    expect(result.stdout).toContain(
      "| pub:0+1|user: We need a persistent queue for the importer. Decision: no Redis; use Postgres LISTEN/NOTIFY",
    );
    expect(result.stdout).toMatch(/memory_zoom (mem_\w+:0:0\+1) -> <original_message ref="\1" kind="user"/);
    expect(result.stdout).toMatch(/Done: B saw A's decision without asking, and reached A's exact words in \d zooms\./);
    expect(result.stdout).not.toContain("processes left");
  }, 240_000);
});
