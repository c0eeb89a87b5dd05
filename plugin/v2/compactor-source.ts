/**
 * The compactor's model under V2 with `OPTCHAT_SUMMARIZER=auto` (the default): what V2 tells a plugin of its providers
 * and models (`ctx.provider.list()`, `ctx.model.list()`; docs/opencode-v2-notes.md), put in the shape of V1's two
 * lookups so that the one choice of plugin/opencode/compactor-model.ts applies (small_model, else the provider's cheap
 * default, else a cheaper listed model, else the main model, said; V2 has no small_model). The main model is the one V2's first request
 * uses (the `context` hook's `model`): the worker's summarizer waits for it.
 */
import type { OpencodeConfigSource } from "../opencode/compactor-model.js";
import type { V2Context } from "./v2-api.js";

/** V2's provider packages and the AI SDK packages V1 names for the same wire. */
const PACKAGES: Readonly<Record<string, string>> = {
  anthropic: "@ai-sdk/anthropic",
  openai: "@ai-sdk/openai",
  "openai-compatible": "@ai-sdk/openai-compatible",
};

/** The environment variable a provider's key is read from when V2's settings do not hold it. */
const STANDARD_KEYS: Readonly<Record<string, string>> = {
  anthropic: "ANTHROPIC_API_KEY",
  openai: "OPENAI_API_KEY",
};

interface V2Provider {
  id?: string;
  package?: string;
  settings?: { apiKey?: unknown; baseURL?: unknown };
}

interface V2Model {
  id?: string;
  modelID?: string;
  providerID?: string;
  package?: string;
  settings?: { apiKey?: unknown; baseURL?: unknown };
  limit?: { context?: number };
  cost?: unknown;
}

export function v2ConfigSource(
  ctx: V2Context,
  mainModel: Promise<{ id: string; providerID: string }>,
  env: NodeJS.ProcessEnv = process.env,
): OpencodeConfigSource {
  const api = ctx as unknown as {
    provider?: { list(): Promise<{ data?: V2Provider[] }> };
    model?: { list(): Promise<{ data?: V2Model[] }> };
  };
  return {
    async configGet() {
      const main = await mainModel;
      return { data: { model: `${main.providerID}/${main.id}` } };
    },
    async configProviders() {
      const [providers, models] = await Promise.all([api.provider?.list(), api.model?.list()]);
      if (!providers?.data || !models?.data) return undefined;
      return { data: { providers: providers.data.map((p) => asV1Provider(p, models.data ?? [], env)), default: {} } };
    },
  };
}

function familyOf(pkg: string | undefined): string | undefined {
  const last = pkg?.split("/").at(-1);
  return last && PACKAGES[last] ? last : undefined;
}

function asV1Provider(provider: V2Provider, models: readonly V2Model[], env: NodeJS.ProcessEnv) {
  const family = familyOf(provider.package);
  const standard = family ? STANDARD_KEYS[family] : undefined;
  const key = typeof provider.settings?.apiKey === "string" ? provider.settings.apiKey : standard ? env[standard] : "";
  const entries = models
    .filter((model) => model.providerID === provider.id && model.id)
    .map((model) => {
      const npm = PACKAGES[familyOf(model.package ?? provider.package) ?? ""] ?? String(model.package);
      const input = Array.isArray(model.cost) ? (model.cost[0] as { input?: number } | undefined)?.input : undefined;
      return [
        model.id as string,
        {
          api: { id: model.modelID ?? model.id, npm },
          limit: model.limit,
          ...(typeof input === "number" ? { cost: { input } } : {}),
        },
      ] as const;
    });
  return {
    id: provider.id ?? "",
    key: key ?? "",
    options: { baseURL: provider.settings?.baseURL, apiKey: provider.settings?.apiKey },
    models: Object.fromEntries(entries),
  };
}
