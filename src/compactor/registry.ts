import { OptchatError } from "../core/errors.js";
import { anthropicProvider } from "./providers/anthropic.js";
import { fakeProvider } from "./providers/fake.js";
import { openaiProvider } from "./providers/openai.js";
import { openaiCompatibleProvider } from "./providers/openai-compatible.js";
import type { SummarizerProvider, SummarizerSettings } from "./providers/provider.js";
import type { Summarizer } from "./summarizer.js";

export type { SummarizerProvider, SummarizerSettings };

/** Every summarizer provider; OPTCHAT_SUMMARIZER names one of them (or `auto`). A new provider is one file and a line. */
export const PROVIDERS: readonly SummarizerProvider[] = [
  anthropicProvider,
  openaiProvider,
  openaiCompatibleProvider,
  fakeProvider,
];

/** `auto`: the model the user already has (the plugin asks OpenCode; `optchat worker` looks at the standard keys). */
export const AUTO = "auto";

/** The accepted OPTCHAT_SUMMARIZER values, for the settings table and its validation. */
export const SUMMARIZER_NAMES: readonly string[] = [AUTO, ...PROVIDERS.map((p) => p.name)];

export function providerNamed(setting: string): SummarizerProvider | undefined {
  const name = setting.split(":")[0];
  return PROVIDERS.find((p) => p.name === name);
}

/** What is wrong with the settings (each problem names a setting); `auto` is checked when it is resolved. */
export function summarizerProblems(settings: SummarizerSettings): string[] {
  if (settings.summarizer === AUTO) return [];
  const provider = providerNamed(settings.summarizer);
  if (!provider) return [`OPTCHAT_SUMMARIZER: '${settings.summarizer}' is not one of ${SUMMARIZER_NAMES.join(", ")}`];
  if (settings.summarizer.includes(":") && provider.name !== "fake")
    return [`OPTCHAT_SUMMARIZER: '${provider.name}' takes no options`];
  return provider.check(settings);
}

/** Standard credential variables in the order `auto` tries them outside OpenCode. */
const AUTO_ORDER: readonly { provider: string; key: string }[] = [
  { provider: "anthropic", key: "ANTHROPIC_API_KEY" },
  { provider: "openai", key: "OPENAI_API_KEY" },
];

/** How to set a compactor model, for the error when none is found. */
export const MODEL_SETTINGS_HINT =
  "set ANTHROPIC_API_KEY or OPENAI_API_KEY (the compactor then uses that provider's cheap default model), or OPTCHAT_SUMMARIZER=anthropic|openai|openai-compatible with OPTCHAT_SUMMARIZER_MODEL (and OPTCHAT_SUMMARIZER_URL, OPTCHAT_SUMMARIZER_API_KEY); OPTCHAT_SUMMARIZER=fake only trims text (tests and demos)";

/**
 * `auto` outside OpenCode (`optchat worker`, the CLI): the first provider whose standard key is set. Throws when none
 * is, naming the settings: the compactor never falls back to the fake silently.
 */
export function resolveAuto(settings: SummarizerSettings): SummarizerSettings {
  if (settings.summarizer !== AUTO) return settings;
  const found = AUTO_ORDER.find(({ key }) => (settings.standardKeys[key] ?? "") !== "");
  if (!found) {
    throw new OptchatError(
      "CONFIG_INVALID",
      `No compactor model: OPTCHAT_SUMMARIZER is auto and neither ANTHROPIC_API_KEY nor OPENAI_API_KEY is set. To summarize, ${MODEL_SETTINGS_HINT}.`,
      { settings: ["OPTCHAT_SUMMARIZER", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"] },
    );
  }
  return { ...settings, summarizer: found.provider };
}

/** Builds the summarizer the settings name (`auto` resolved as above); CONFIG_INVALID when it cannot work. */
export async function createSummarizer(settings: SummarizerSettings): Promise<Summarizer> {
  const resolved = resolveAuto(settings);
  const problems = summarizerProblems(resolved);
  const provider = providerNamed(resolved.summarizer);
  if (problems.length > 0 || !provider) {
    throw new OptchatError("CONFIG_INVALID", `Invalid compactor settings: ${problems.join("; ")}`, {
      settings: ["OPTCHAT_SUMMARIZER"],
    });
  }
  return await provider.create(resolved);
}
