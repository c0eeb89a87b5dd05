import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import {
  configSourceFromFiles,
  findOptchatPlugin,
  PLUGIN_ENTRY,
  readOpencodeConfigs,
  stripJsonc,
} from "../../plugin/opencode/config-files.js";

/** The opencode.json files `optchat doctor` reads as OpenCode does: which ones, in what order, and what they say. */

const roots: string[] = [];
afterEach(() => {
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true });
});

function tree(): { root: string; env: Record<string, string>; project: string } {
  const root = mkdtempSync(join(tmpdir(), "optchat-occ-"));
  roots.push(root);
  const project = join(root, "repo", "sub");
  mkdirSync(join(root, "repo", ".git"), { recursive: true });
  mkdirSync(join(project, ".opencode"), { recursive: true });
  mkdirSync(join(root, "config", "opencode"), { recursive: true });
  return { root, project, env: { XDG_CONFIG_HOME: join(root, "config"), HOME: join(root, "home") } };
}

describe("opencode.json files", () => {
  it("reads JSONC: comments outside strings and trailing commas", () => {
    const text = '{\n  // a comment\n  "url": "http://x//y", /* block */ "list": [1, 2,],\n}';
    expect(JSON.parse(stripJsonc(text))).toEqual({ url: "http://x//y", list: [1, 2] });
    expect(JSON.parse(stripJsonc('{"a": "quote \\" // not a comment"}'))).toEqual({ a: 'quote " // not a comment' });
  });

  it("reads the global file first and the project's nearest last, up to the git root only", () => {
    const { root, env, project } = tree();
    writeFileSync(join(root, "opencode.json"), "{}"); // above the git root: not read
    writeFileSync(join(root, "config", "opencode", "opencode.json"), JSON.stringify({ model: "global/m" }));
    writeFileSync(join(root, "repo", "opencode.json"), JSON.stringify({ model: "repo/m" }));
    writeFileSync(join(project, ".opencode", "opencode.jsonc"), "{ // near\n }");
    writeFileSync(join(project, "opencode.json"), "{ not json");
    const configs = readOpencodeConfigs(project, env);
    expect(configs.files.map((f) => f.path)).toEqual([
      join(root, "config", "opencode", "opencode.json"),
      join(root, "repo", "opencode.json"),
      join(project, ".opencode", "opencode.jsonc"),
    ]);
    expect(configs.unreadable).toEqual([{ path: join(project, "opencode.json"), error: expect.any(String) }]);
  });

  it("finds the entry that loads optchat in the nearest file that lists one, by path or file URL", async () => {
    const { root, env, project } = tree();
    writeFileSync(
      join(root, "config", "opencode", "opencode.json"),
      JSON.stringify({ plugin: [[PLUGIN_ENTRY, { databaseUrl: "postgres://x/global" }]] }),
    );
    writeFileSync(
      join(project, "opencode.json"),
      JSON.stringify({ plugin: ["other-plugin", [pathToFileURL(PLUGIN_ENTRY).href, { mode: "augment" }]] }),
    );
    const entry = findOptchatPlugin(readOpencodeConfigs(project, env));
    expect(entry).toMatchObject({ file: join(project, "opencode.json"), options: { mode: "augment" }, exists: true });
    expect(entry?.thisCheckout).toBe(true);

    writeFileSync(join(project, "opencode.json"), JSON.stringify({ plugin: ["/gone/optchat/plugin/index.ts"] }));
    expect(findOptchatPlugin(readOpencodeConfigs(project, env))).toMatchObject({ exists: false, thisCheckout: false });

    // Installed by name (issue 44): OpenCode installs the package itself, so the entry counts as present.
    writeFileSync(join(project, "opencode.json"), JSON.stringify({ plugin: [["optchat", { scope: "project" }]] }));
    expect(findOptchatPlugin(readOpencodeConfigs(project, env))).toMatchObject({
      module: "optchat",
      options: { scope: "project" },
      exists: true,
      thisCheckout: false,
    });
    writeFileSync(join(project, "opencode.json"), JSON.stringify({ plugin: ["./optchat.ts"] }));
    expect(findOptchatPlugin(readOpencodeConfigs(project, env))).toMatchObject({ exists: false });
  });

  it("tells the model resolver what OpenCode would: merged models, declared providers, built-ins with a key", async () => {
    const { root, env, project } = tree();
    writeFileSync(
      join(root, "config", "opencode", "opencode.json"),
      JSON.stringify({
        model: "anthropic/claude-sonnet-4-5",
        provider: { local: { npm: "@ai-sdk/openai-compatible", options: { baseURL: "http://h/v1" } } },
      }),
    );
    writeFileSync(join(project, "opencode.json"), JSON.stringify({ small_model: "local/tiny" }));
    const source = configSourceFromFiles(readOpencodeConfigs(project, env), { ...env, ANTHROPIC_API_KEY: "k" });
    expect(await source.configGet()).toEqual({
      data: { model: "anthropic/claude-sonnet-4-5", small_model: "local/tiny" },
    });
    const { data } = (await source.configProviders()) as { data: { providers: Record<string, unknown>[] } };
    expect(data.providers).toEqual([
      {
        id: "local",
        options: { baseURL: "http://h/v1" },
        models: { tiny: { api: { npm: "@ai-sdk/openai-compatible", id: "tiny" } } },
      },
      {
        id: "anthropic",
        key: "k",
        options: {},
        models: { "claude-sonnet-4-5": { api: { npm: "@ai-sdk/anthropic", id: "claude-sonnet-4-5" } } },
      },
    ]);
  });
});
