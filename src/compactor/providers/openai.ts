import { promptMessages } from "../../core/summary.js";
import type { Summarizer } from "../summarizer.js";
import { callAiSdk } from "./ai-sdk-call.js";
import { apiKeyFrom, needsKey, type SummarizerProvider, windowBytesOf } from "./provider.js";

/** The documented cheap default when no model is named: a small model without reasoning (none is needed for one line). */
export const OPENAI_DEFAULT_MODEL = "gpt-4.1-mini";
/** A window every current OpenAI chat model has; OPTCHAT_SUMMARIZER_WINDOW_TOKENS raises it. */
const OPENAI_WINDOW_TOKENS = 128_000;

/**
 * OPTCHAT_SUMMARIZER=openai: OpenAI's chat completions through @ai-sdk/openai. OpenAI caches prompt prefixes by itself
 * (from 1,024 tokens); `prompt_cache_key` is the tree, so the calls of one tree go where their prefix is cached.
 */
export const openaiProvider: SummarizerProvider = {
  name: "openai",
  summary: `OpenAI's chat completions (@ai-sdk/openai); default model ${OPENAI_DEFAULT_MODEL}; key from OPENAI_API_KEY or OPTCHAT_SUMMARIZER_API_KEY`,
  check: needsKey("openai", "OPENAI_API_KEY"),
  async create(settings): Promise<Summarizer> {
    const { createOpenAI } = await import("@ai-sdk/openai");
    const model = settings.model || OPENAI_DEFAULT_MODEL;
    const provider = createOpenAI({
      apiKey: apiKeyFrom(settings, "OPENAI_API_KEY"),
      ...(settings.url ? { baseURL: settings.url } : {}),
    });
    const identity = `openai:${model}`;
    return {
      identity,
      provider: "openai",
      model,
      windowBytes: windowBytesOf(settings.windowTokens || OPENAI_WINDOW_TOKENS),
      complete: (prompt, options) =>
        callAiSdk({
          model: provider.chat(model),
          identity,
          prompt,
          // One text: OpenAI has no marks, and its cache matches the longest common prefix of the prompt.
          userParts: [{ type: "text", text: promptMessages(prompt)[1]?.content ?? "" }],
          ...(options?.cacheKey ? { providerOptions: { openai: { promptCacheKey: options.cacheKey } } } : {}),
          timeoutMs: settings.timeoutMs,
          signal: options?.signal,
          onResponse: options?.onResponse,
          settingsHint:
            "Check OPENAI_API_KEY / OPTCHAT_SUMMARIZER_API_KEY, OPTCHAT_SUMMARIZER_MODEL and OPTCHAT_SUMMARIZER_URL.",
        }),
    };
  },
};
