import { describe, expect, it } from "vitest";
import { resolvePluginConfig } from "../../plugin/base/config.js";
import { unknownVariables } from "../../src/cli/environment.js";
import { editDistance, nearest } from "../../src/core/suggest.js";
import { resolveConfig } from "../../src/memory/config.js";

// "Did you mean" for what a person types (issue 40 item 3).

describe("nearest", () => {
  it("counts a transposed pair as one slip", () => {
    expect(editDistance("statsu", "status")).toBe(1);
    expect(editDistance("kitten", "sitting")).toBe(3);
    expect(nearest("statsu", ["status", "scopes", "search"])).toBe("status");
  });

  it("suggests nothing for a word far from every name", () => {
    expect(nearest("banana", ["status", "scopes", "search"])).toBeUndefined();
    expect(nearest("x", ["status"])).toBeUndefined();
  });
});

describe("settings", () => {
  it("reports each unknown OPTCHAT_* variable with the nearest setting, and none of the known ones", () => {
    const lines = unknownVariables({
      OPTCHAT_SUMARIZER: "fake",
      OPTCHAT_VIEW_BYTE: "1000",
      OPTCHAT_SUMMARIZER: "fake",
      OPTCHAT_MODE: "replace",
      OPTCHAT_DEBUG: "1",
      OPTCHAT_BENCH_SECONDS: "3",
      PATH: "/bin",
    });
    expect(lines).toHaveLength(2);
    expect(lines[0]).toContain(
      "OPTCHAT_SUMARIZER is not a setting optchat knows, and is ignored. Did you mean OPTCHAT_SUMMARIZER?",
    );
    expect(lines[1]).toContain("Did you mean OPTCHAT_VIEW_BYTES?");
  });

  it("names the nearest summarizer for a misspelt one", () => {
    expect(() => resolveConfig({ env: { OPTCHAT_SUMMARIZER: "antropic" } })).toThrow(
      /not a known summarizer \(did you mean anthropic\?\)/,
    );
  });

  it("names the nearest plugin option for an unknown one", () => {
    expect(() => resolvePluginConfig({ viewByte: 2048 }, {})).toThrow(
      /unknown option\(s\) viewByte \(did you mean viewBytes\?\)/,
    );
  });
});
