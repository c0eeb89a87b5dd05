import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { PLUGIN_SETTINGS } from "../../plugin/base/settings.js";
import { configurationReference, REFERENCE_PATH } from "../../scripts/config-reference.js";
import { SETTINGS } from "../../src/memory/config.js";

describe("docs/configuration.md", () => {
  it("is what `npm run docs:config` writes from the settings tables (run it after changing a setting)", () => {
    expect(readFileSync(REFERENCE_PATH, "utf8")).toBe(configurationReference());
  });

  it("lists every setting of both tables with its default", () => {
    const page = configurationReference();
    for (const [name, spec] of Object.entries({ ...SETTINGS, ...PLUGIN_SETTINGS })) {
      expect(page).toContain(`| \`${spec.env}\` | \`${name}\` |`);
    }
  });
});
