import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { jsonSchemaArgs, parseToolArgs } from "../../plugin/tools/args.js";
import { memoryTools } from "../../plugin/tools/tools.js";

const ROOT = new URL("../..", import.meta.url).pathname;

const SPECS = {
  query: { type: "string", minLength: 1, maxLength: 10, description: "words" },
  match: { type: "enum", values: ["all", "any"], optional: true, description: "how" },
  limit: { type: "integer", minimum: 1, maximum: 50, optional: true, description: "hits" },
} as const;

describe("memory tool arguments as JSON Schema (plugin/tools/args.ts)", () => {
  it("describes every argument as JSON Schema, an optional one as nullable, its bounds checked but not sent", () => {
    expect(jsonSchemaArgs(SPECS)).toEqual({
      query: { type: "string", description: "words" },
      match: { type: ["string", "null"], enum: ["all", "any", null], description: "how" },
      limit: { type: ["integer", "null"], description: "hits" },
    });
  });

  it("takes null or a missing argument as not given, and ignores names it does not know", () => {
    expect(parseToolArgs("t", SPECS, { query: "a b", match: null, other: 1 })).toEqual({ query: "a b" });
    expect(parseToolArgs("t", SPECS, { query: "a", match: "all", limit: 5 })).toEqual({
      query: "a",
      match: "all",
      limit: 5,
    });
  });

  it("names every bad argument, with the bounds the zod schemas had", () => {
    expect(() => parseToolArgs("memory_search", SPECS, { match: "some", limit: 0 })).toThrow(
      'invalid arguments for memory_search: query is required; match must be one of "all", "any"; limit must be from 1 to 50',
    );
    expect(() => parseToolArgs("t", SPECS, { query: "" })).toThrow("query must have at least 1 character(s)");
    expect(() => parseToolArgs("t", SPECS, { query: "x".repeat(11) })).toThrow("query must have at most 10 characters");
    expect(() => parseToolArgs("t", SPECS, { query: "a", limit: 2.5 })).toThrow("limit must be an integer");
    expect(() => parseToolArgs("t", SPECS, "not an object")).toThrow("query is required");
  });

  it("gives OpenCode plain JSON Schema for every tool, and a bad call's error as the tool's result", async () => {
    let asked = 0;
    const tools = memoryTools(async () => {
      asked += 1;
      throw new Error("not reached");
    }, "thread");
    expect(Object.keys(tools).sort()).toEqual([
      "memory_date",
      "memory_inspect",
      "memory_search",
      "memory_sessions",
      "memory_zoom",
    ]);
    for (const tool of Object.values(tools)) {
      // OpenCode 1.18.33 converts an argument with `_zod` through its own zod; plain objects go to the model as they are.
      for (const schema of Object.values(tool.args)) expect(schema).not.toHaveProperty("_zod");
    }
    const context = { sessionID: "s", messageID: "m" } as Parameters<(typeof tools)["memory_zoom"]["execute"]>[1];
    await expect(tools.memory_zoom?.execute({ cursor: "c" }, context)).rejects.toThrow(
      "memory_zoom failed: invalid arguments for memory_zoom: ref is required",
    );
    await expect(tools.memory_sessions?.execute({ limit: 99 }, context)).rejects.toThrow(
      "memory_sessions failed: invalid arguments for memory_sessions: limit must be from 1 to 50",
    );
    expect(asked).toBe(0);
  });

  it("never imports @opencode-ai/plugin at run time (its zod 4 was ~75 ms of every OpenCode start)", () => {
    const files = readdirSync(join(ROOT, "plugin"), { recursive: true, encoding: "utf8" })
      .filter((f) => f.endsWith(".ts"))
      .map((f) => join(ROOT, "plugin", f));
    const valueImports = files.filter((file) =>
      /^import\s+(?!type\s)[^;]*from\s+"@opencode-ai\/plugin[^"]*";/m.test(readFileSync(file, "utf8")),
    );
    expect(valueImports).toEqual([]);
  });
});
