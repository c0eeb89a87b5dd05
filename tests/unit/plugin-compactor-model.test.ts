import { describe, expect, it } from "vitest";
import { compactorModel, resolveFromOpencode } from "../../plugin/opencode/compactor-model.js";
import { resolveConfig } from "../../src/memory/config.js";

/** Shaped like what OpenCode 1.18.33 answered in the harness (docs/opencode-notes.md). */
function opencode(config: Record<string, unknown>, providers: unknown[], defaults: Record<string, string> = {}) {
  return {
    configGet: async () => ({ data: config }),
    configProviders: async () => ({ data: { providers, default: defaults } }),
  };
}

const anthropic = {
  id: "anthropic",
  source: "env",
  env: ["ANTHROPIC_API_KEY"],
  key: "sk-ant-from-env",
  options: { headers: {} },
  models: {
    "claude-sonnet-4-5": {
      api: { id: "claude-sonnet-4-5", url: "", npm: "@ai-sdk/anthropic" },
      limit: { context: 1_000_000 },
    },
    "claude-haiku-4-5": {
      api: { id: "claude-haiku-4-5", url: "", npm: "@ai-sdk/anthropic" },
      limit: { context: 200_000 },
    },
  },
};
const google = {
  id: "google",
  key: "g",
  options: {},
  models: { "gemini-flash": { api: { id: "gemini-flash", npm: "@ai-sdk/google" } } },
};
const local = {
  id: "ollama",
  options: { baseURL: "http://127.0.0.1:11434/v1/" },
  models: { "llama3.1:8b": { api: { id: "llama3.1:8b", npm: "@ai-sdk/openai-compatible" }, limit: { context: 8192 } } },
};
const core = resolveConfig({ overrides: { summarizer: "auto" } });

describe("the compactor model from OpenCode's configuration", () => {
  it("takes small_model with the key OpenCode found", async () => {
    const found = await resolveFromOpencode(
      opencode({ model: "anthropic/claude-sonnet-4-5", small_model: "anthropic/claude-haiku-4-5" }, [anthropic]),
      core,
    );
    expect(found).toMatchObject({
      type: "found",
      from: "small_model anthropic/claude-haiku-4-5",
      settings: {
        summarizer: "anthropic",
        model: "claude-haiku-4-5",
        apiKey: "sk-ant-from-env",
        windowTokens: 200_000,
      },
    });
  });

  it("else the cheap default of the main model's provider; a local server's own model and baseURL", async () => {
    const viaMain = await resolveFromOpencode(opencode({ model: "anthropic/claude-sonnet-4-5" }, [anthropic]), core);
    expect(viaMain).toMatchObject({ type: "found", settings: { summarizer: "anthropic", model: "claude-haiku-4-5" } });
    const viaLocal = await resolveFromOpencode(opencode({ model: "ollama/llama3.1:8b" }, [local]), core);
    expect(viaLocal).toMatchObject({
      type: "found",
      settings: { summarizer: "openai-compatible", model: "llama3.1:8b", url: "http://127.0.0.1:11434/v1", apiKey: "" },
    });
    // No model in the configuration: OpenCode's default for a provider optchat can call.
    const viaDefault = await resolveFromOpencode(
      opencode({}, [google, anthropic], { anthropic: "claude-sonnet-4-5" }),
      core,
    );
    expect(viaDefault).toMatchObject({ type: "found", settings: { model: "claude-haiku-4-5" } });
  });

  it("never silently the main model: a gateway's cheaper listed model, else the main model said to be one", async () => {
    const gateway = {
      id: "gateway",
      key: "k",
      options: { baseURL: "http://127.0.0.1:4000/v1" },
      models: {
        big: { api: { id: "big", npm: "@ai-sdk/openai-compatible" }, cost: { input: 3 } },
        small: { api: { id: "small", npm: "@ai-sdk/openai-compatible" }, cost: { input: 0.2 } },
        dearer: { api: { id: "dearer", npm: "@ai-sdk/openai-compatible" }, cost: { input: 10 } },
      },
    };
    const cheaper = await resolveFromOpencode(opencode({ model: "gateway/big" }, [gateway]), core);
    expect(cheaper).toMatchObject({ type: "found", settings: { model: "small" } });
    expect(cheaper.type === "found" && cheaper.mainModel).toBeFalsy();
    const only = await resolveFromOpencode(opencode({ model: "ollama/llama3.1:8b" }, [local]), core);
    expect(only).toMatchObject({ type: "found", mainModel: true, settings: { model: "llama3.1:8b" } });
    expect(only.type === "found" && only.from).toContain("the main model ollama/llama3.1:8b");
    const logged: string[] = [];
    const model = compactorModel(opencode({ model: "ollama/llama3.1:8b" }, [local]), core, (level, message) =>
      logged.push(`${level} ${message}`),
    );
    await model.summarizer();
    expect(logged.find((line) => line.startsWith("warn "))).toContain("the main model");
  });

  it("passes over a small_model it cannot call, and says why when nothing is usable", async () => {
    const passed = await resolveFromOpencode(
      opencode({ model: "anthropic/claude-sonnet-4-5", small_model: "google/gemini-flash" }, [anthropic, google]),
      core,
    );
    expect(passed).toMatchObject({ type: "found", settings: { summarizer: "anthropic" } });
    const none = await resolveFromOpencode(
      opencode({ model: "google/gemini-flash", small_model: "google/gemini-flash" }, [google]),
      core,
    );
    expect(none).toEqual({
      type: "none",
      reason:
        "small_model google/gemini-flash: optchat cannot call @ai-sdk/google; model google/gemini-flash: optchat cannot call @ai-sdk/google",
    });
    const keyless = await resolveFromOpencode(
      opencode({ model: "anthropic/claude-sonnet-4-5" }, [{ ...anthropic, key: undefined }]),
      core,
    );
    expect(keyless).toMatchObject({ type: "none", reason: "provider anthropic: OpenCode has no key for it" });
  });

  it("refuses with the settings to set once nothing is usable, and never keeps a lookup that got no answer", async () => {
    const logs: string[] = [];
    let asked = 0;
    const flaky = {
      // The first answer times out (undefined), the second is definite.
      configGet: async () => (asked++ === 0 ? undefined : { data: { model: "google/gemini-flash" } }),
      configProviders: async () => ({ data: { providers: [google], default: {} } }),
    };
    const model = compactorModel(flaky, core, (_level, message) => logs.push(message), 10);
    expect(model.problem()).toBeUndefined();
    await expect(model.summarizer()).rejects.toThrow(/no compactor model.*OPTCHAT_SUMMARIZER/);
    expect(asked).toBe(2);
    expect(model.problem()).toMatch(/small_model in opencode\.json.*OPTCHAT_EMBEDDED_WORKER=off/);
  });

  it("asks nothing of OpenCode when OPTCHAT_SUMMARIZER names a provider", async () => {
    let asked = false;
    const source = {
      configGet: async () => {
        asked = true;
        return undefined;
      },
      configProviders: async () => undefined,
    };
    const summarizer = await compactorModel(
      source,
      resolveConfig({ overrides: { summarizer: "fake" } }),
      () => {},
    ).summarizer();
    expect(summarizer.identity).toBe("fake-extractive/1");
    expect(asked).toBe(false);
  });
});
