import type { Summarizer } from "../summarizer.js";

/**
 * What a provider file exports: its OPTCHAT_SUMMARIZER name, how it checks the settings it needs (each problem names
 * the setting to change), and how it builds a summarizer. Adding a provider is one file and one line in registry.ts.
 */
export interface SummarizerProvider {
  /** The OPTCHAT_SUMMARIZER value (before any `:options`). */
  readonly name: string;
  /** One line for help texts and errors. */
  readonly summary: string;
  /** Problems that stop it from working, each naming the setting; empty when it can be created. */
  check(settings: SummarizerSettings): string[];
  /** Loads its SDK lazily (the CLI's other commands do not pay for it). */
  create(settings: SummarizerSettings): Promise<Summarizer>;
}

/** The summarizer settings, resolved once (src/memory/config.ts, or the plugin from OpenCode's configuration). */
export interface SummarizerSettings {
  /** OPTCHAT_SUMMARIZER: a provider name, optionally with options (`fake:fail`); `auto` is resolved before this. */
  readonly summarizer: string;
  /** OPTCHAT_SUMMARIZER_MODEL; empty: the provider's documented default. */
  readonly model: string;
  /** OPTCHAT_SUMMARIZER_URL: a base URL ending in /v1; empty: the provider's own. */
  readonly url: string;
  /** OPTCHAT_SUMMARIZER_API_KEY; empty: the provider's standard variable (standardKeys). */
  readonly apiKey: string;
  /** The standard credential variables as found (ANTHROPIC_API_KEY, OPENAI_API_KEY), '' when unset. */
  readonly standardKeys: Readonly<Record<string, string>>;
  /** OPTCHAT_SUMMARIZER_TIMEOUT_MS: one call, answer included. */
  readonly timeoutMs: number;
  /** OPTCHAT_SUMMARIZER_WINDOW_TOKENS; 0: the provider's default for the model. */
  readonly windowTokens: number;
}

/**
 * Bytes of prompt per token assumed when turning a model's window (tokens) into the summarizer's byte window: 3 is
 * below what English text and code measure (~3.5-4), so a full window does not overflow the model.
 */
export const WINDOW_BYTES_PER_TOKEN = 3;
/** Tokens of a window kept for the answer and retries' feedback. */
export const WINDOW_RESERVED_TOKENS = 4096;

export function windowBytesOf(tokens: number): number {
  return Math.max(4096, (tokens - WINDOW_RESERVED_TOKENS) * WINDOW_BYTES_PER_TOKEN);
}

/**
 * A hosted provider's key: OPTCHAT_SUMMARIZER_API_KEY, else its standard variable (`standardKeys`, as resolved once by
 * the configuration).
 */
export function apiKeyFrom(
  settings: Pick<SummarizerSettings, "apiKey" | "standardKeys">,
  variable: "ANTHROPIC_API_KEY" | "OPENAI_API_KEY",
): string {
  return settings.apiKey || settings.standardKeys[variable] || "";
}

/** The settings check of a provider that needs a key: a problem naming both variables when there is none. */
export function needsKey(provider: string, variable: "ANTHROPIC_API_KEY" | "OPENAI_API_KEY") {
  return (settings: SummarizerSettings): string[] =>
    apiKeyFrom(settings, variable) === ""
      ? [
          `OPTCHAT_SUMMARIZER=${provider} needs an API key: set ${variable} (or OPTCHAT_SUMMARIZER_API_KEY) in the environment OpenCode and \`optchat worker\` run with`,
        ]
      : [];
}
