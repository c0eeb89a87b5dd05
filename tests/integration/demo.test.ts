import { describe, expect, inject, it } from "vitest";
import { collect, startScript } from "../helpers.js";

describe("npm run demo", () => {
  it("shows B receiving A's decision without a tool call and zooming to A's exact words, then cleans up", async () => {
    const result = await collect(startScript("scripts/demo.ts", [], { DATABASE_URL: inject("adminUrl") }));
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain("pub:0+1|[turn completed] user: We need a persistent queue for the importer.");
    expect(result.stdout).toMatch(
      /memory_zoom ses_\w+:0:0\+1 -> user: We need a persistent queue for the importer\. Let's not use Redis/,
    );
    expect(result.stdout).toContain("Done: B saw A's decision without asking");
  }, 90_000);
});
