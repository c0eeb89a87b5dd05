import {
  ANTHROPIC_DEFAULT_MODEL,
  AUTO,
  type Config,
  createSummarizer,
  OPENAI_DEFAULT_MODEL,
  OptchatError,
  type Summarizer,
  type SummarizerSettings,
  summarizerSettingsOf,
} from "../../src/memory/index.js";

/**
 * The compactor's model inside OpenCode (issue 13 item 2). With OPTCHAT_SUMMARIZER=auto (the default) it is the model
 * the user already has, with OpenCode's own credentials:
 *
 * 1. `small_model` from OpenCode's configuration (OpenCode uses it for titles), when its provider is one optchat can
 *    call;
 * 2. else a documented cheap model of the main model's provider: Anthropic claude-haiku-4-5, OpenAI gpt-4.1-mini; for
 *    an OpenAI-compatible provider (a local server, a gateway), the cheapest of its models that OpenCode lists with a
 *    price below the main model's, else the main model itself, which is then said (issue 39: never silently).
 *
 * What OpenCode 1.18.33 gives a plugin (verified with the harness, docs/opencode-notes.md "What a plugin can read of the
 * configuration"): `client.config.get()` is the merged configuration (`model`, `small_model`, the `provider` section
 * as written); `client.config.providers()` lists the connected providers with the credential OpenCode found
 * (`key`, from the environment variable or `opencode auth login`), their `options` (`apiKey`, `baseURL` from
 * opencode.json) and every model with its AI SDK package (`api.npm`), provider-side id (`api.id`) and `limit`.
 *
 * A lookup that fails (timeout, server not ready) is tried again a few seconds later and never remembered; only a
 * definite answer ("nothing usable") is kept, and then every prompt is refused with the settings to set (strict: never
 * a silent fallback to the fake). None of this blocks a request: the embedded worker starts when the model is known.
 */

/** What the plugin reads from OpenCode: the two SDK calls, each answering `{ data }` (undefined on timeout). */
export interface OpencodeConfigSource {
  configGet(): Promise<unknown>;
  configProviders(): Promise<unknown>;
}

interface ProviderInfo {
  readonly id: string;
  readonly key?: string;
  readonly options?: { apiKey?: unknown; baseURL?: unknown };
  readonly models?: Record<
    string,
    { api?: { id?: string; url?: string; npm?: string }; limit?: { context?: number }; cost?: { input?: number } }
  >;
}

/** The AI SDK packages OpenCode names, and the summarizer provider that speaks the same API. */
const FAMILIES: Readonly<Record<string, "anthropic" | "openai" | "openai-compatible">> = {
  "@ai-sdk/anthropic": "anthropic",
  "@ai-sdk/openai": "openai",
  "@ai-sdk/openai-compatible": "openai-compatible",
};

const CHEAP_DEFAULTS: Readonly<Record<string, string>> = {
  anthropic: ANTHROPIC_DEFAULT_MODEL,
  openai: OPENAI_DEFAULT_MODEL,
};

/** Seconds between lookups while OpenCode does not answer. */
const LOOKUP_RETRY_MS = 5_000;

export const NO_MODEL_HINT =
  "set small_model in opencode.json to an Anthropic, OpenAI or OpenAI-compatible model, or set OPTCHAT_SUMMARIZER=anthropic|openai|openai-compatible with OPTCHAT_SUMMARIZER_MODEL (and OPTCHAT_SUMMARIZER_URL, OPTCHAT_SUMMARIZER_API_KEY) in the environment OpenCode runs with, or OPTCHAT_EMBEDDED_WORKER=off when an `optchat worker` with its own model runs elsewhere";

/** The outcome of reading OpenCode's configuration once. */
export type Resolution =
  | {
      readonly type: "found";
      readonly settings: SummarizerSettings;
      readonly from: string;
      /** The compactor is the main model itself (nothing cheaper is known): logged as a warning, never silent. */
      readonly mainModel?: boolean;
    }
  | { readonly type: "none"; readonly reason: string }
  | { readonly type: "unanswered" };

/** The summarizer settings for `model` of `provider` (OpenCode's own base URL and key for it) in `family`. */
function settingsFor(family: string, model: string, provider: ProviderInfo, core: Config): SummarizerSettings {
  const entry = provider.models?.[model];
  const url = stringOr(provider.options?.baseURL) || entry?.api?.url || "";
  return {
    summarizer: family,
    model: entry?.api?.id || model,
    url: url.replace(/\/+$/, ""),
    apiKey: stringOr(provider.options?.apiKey) || provider.key || "",
    standardKeys: {},
    timeoutMs: core.summarizerTimeoutMs,
    windowTokens: core.summarizerWindowTokens || entry?.limit?.context || 0,
  };
}

/** Why these settings cannot be called (no base URL, no key), or undefined. */
function unusable(settings: SummarizerSettings): string | undefined {
  if (settings.summarizer === "openai-compatible" && !settings.url) return "it has no baseURL";
  if (settings.summarizer !== "openai-compatible" && !settings.apiKey) return "OpenCode has no key for it";
  return undefined;
}

/**
 * Reads OpenCode's configuration once and picks the compactor model. Pure apart from the two lookups.
 */
export async function resolveFromOpencode(source: OpencodeConfigSource, core: Config): Promise<Resolution> {
  const [configAnswer, providersAnswer] = await Promise.all([
    source.configGet().catch(() => undefined),
    source.configProviders().catch(() => undefined),
  ]);
  const config = (configAnswer as { data?: { model?: string; small_model?: string } } | undefined)?.data;
  const listed = (providersAnswer as { data?: { providers?: ProviderInfo[]; default?: Record<string, string> } })?.data;
  if (!config || !listed?.providers) return { type: "unanswered" };
  const providers = listed.providers;
  const base = (family: string, model: string, provider: ProviderInfo) => settingsFor(family, model, provider, core);
  const reasons: string[] = [];

  const small = splitModel(config.small_model);
  if (small) {
    const provider = providers.find((p) => p.id === small.provider);
    const family = provider ? familyOf(provider, small.model) : undefined;
    if (!provider) reasons.push(`small_model ${config.small_model}: provider ${small.provider} is not connected`);
    else if (!family)
      reasons.push(`small_model ${config.small_model}: optchat cannot call ${packageOf(provider, small.model)}`);
    else {
      const settings = base(family, small.model, provider);
      const problem = unusable(settings);
      if (!problem) return { type: "found", settings, from: `small_model ${config.small_model}` };
      reasons.push(`small_model ${config.small_model}: ${problem}`);
    }
  }

  const main = splitModel(config.model) ?? defaultMainModel(providers, listed.default ?? {});
  if (main) {
    const provider = providers.find((p) => p.id === main.provider);
    const family = provider ? familyOf(provider, main.model) : undefined;
    if (!provider) reasons.push(`model ${main.provider}/${main.model}: provider ${main.provider} is not connected`);
    else if (!family)
      reasons.push(`model ${main.provider}/${main.model}: optchat cannot call ${packageOf(provider, main.model)}`);
    else {
      const model = CHEAP_DEFAULTS[family] ?? cheaperListed(provider, main.model) ?? main.model;
      const settings = base(family, model, provider);
      const problem = unusable(settings);
      const from =
        model === main.model
          ? `the main model ${main.provider}/${model} (the provider lists no cheaper model; set small_model in opencode.json or OPTCHAT_SUMMARIZER_MODEL to summarize with a cheaper one)`
          : `the cheap default of ${main.provider} (${model})`;
      if (!problem) return { type: "found", settings, from, mainModel: model === main.model };
      reasons.push(`provider ${main.provider}: ${problem}`);
    }
  } else reasons.push("no main model is configured");
  return { type: "none", reason: reasons.join("; ") };
}

/**
 * The embedded worker's summarizer, resolved once per process. OPTCHAT_SUMMARIZER other than auto: built from the
 * settings as in `optchat worker`. `problem()` is set once no usable model is known for sure.
 */
export function compactorModel(
  source: OpencodeConfigSource,
  core: Config,
  log: (level: "info" | "warn" | "error", message: string) => void,
  retryMs = LOOKUP_RETRY_MS,
) {
  let problem: string | undefined;
  let pending: Promise<SummarizerSettings> | undefined;
  let summarizer: Promise<Summarizer> | undefined;
  const resolve = async (): Promise<SummarizerSettings> => {
    if (core.summarizer !== AUTO) return summarizerSettingsOf(core);
    for (;;) {
      const found = await resolveFromOpencode(source, core);
      if (found.type === "found") {
        log(
          found.mainModel ? "warn" : "info",
          `optchat: compactor model from OpenCode: ${found.from} (${found.settings.summarizer})`,
        );
        return found.settings;
      }
      if (found.type === "none") {
        problem = `optchat: no compactor model: ${found.reason}. To summarize memory, ${NO_MODEL_HINT}.`;
        log("error", problem);
        throw new OptchatError("CONFIG_INVALID", problem, { settings: ["OPTCHAT_SUMMARIZER"] });
      }
      // Not answered (yet): ask again later; nothing of this attempt is kept. Unref'd: a wait must not keep OpenCode
      // from exiting.
      await new Promise((done) => setTimeout(done, retryMs).unref?.());
    }
  };
  const settings = (): Promise<SummarizerSettings> => {
    pending ??= resolve();
    return pending;
  };
  return {
    /**
     * The model's settings (plain data: the local server's worker is started from them, plugin/transport/local-server/workers.ts);
     * rejects with CONFIG_INVALID when there is none.
     */
    settings,
    /** The summarizer (the embedded worker awaits it); rejects with CONFIG_INVALID when there is none. */
    summarizer: (): Promise<Summarizer> => {
      summarizer ??= settings().then((found) => createSummarizer(found));
      return summarizer;
    },
    /** The reason prompts are refused, once it is known that no model can be used. */
    problem: (): string | undefined => problem,
  };
}

/** What the adapter's compactor needs of `compactorModel`. */
export type CompactorModel = Pick<ReturnType<typeof compactorModel>, "settings" | "summarizer">;

function splitModel(value: string | undefined): { provider: string; model: string } | undefined {
  if (!value) return undefined;
  const slash = value.indexOf("/");
  return slash > 0 ? { provider: value.slice(0, slash), model: value.slice(slash + 1) } : undefined;
}

/** OpenCode's own default when `model` is not set: the first connected provider with a default model we can call. */
function defaultMainModel(
  providers: readonly ProviderInfo[],
  defaults: Readonly<Record<string, string>>,
): { provider: string; model: string } | undefined {
  for (const provider of providers) {
    const model = defaults[provider.id];
    if (model && familyOf(provider, model)) return { provider: provider.id, model };
  }
  return undefined;
}

function packageOf(provider: ProviderInfo, model: string): string {
  const entry = provider.models?.[model] ?? Object.values(provider.models ?? {})[0];
  return entry?.api?.npm ?? "an unknown SDK package";
}

function familyOf(provider: ProviderInfo, model: string): string | undefined {
  return FAMILIES[packageOf(provider, model)];
}

function stringOr(value: unknown): string {
  return typeof value === "string" ? value : "";
}

/** The cheapest model the provider lists with a price below the main model's (OpenCode's `cost.input`), if any. */
function cheaperListed(provider: ProviderInfo, mainModel: string): string | undefined {
  const priced = Object.entries(provider.models ?? {}).filter(
    ([, entry]) => typeof entry.cost?.input === "number" && Number.isFinite(entry.cost.input),
  );
  const mainPrice = provider.models?.[mainModel]?.cost?.input;
  let best: { id: string; input: number } | undefined;
  for (const [id, entry] of priced) {
    const input = entry.cost?.input as number;
    if (mainPrice !== undefined && input >= mainPrice) continue;
    if (!best || input < best.input) best = { id, input };
  }
  return best?.id;
}
