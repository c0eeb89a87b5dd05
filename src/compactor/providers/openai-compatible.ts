import { promptMessages } from "../../core/summary.js";
import type { Summarizer } from "../summarizer.js";
import { callAiSdk } from "./ai-sdk-call.js";
import { type SummarizerProvider, windowBytesOf } from "./provider.js";

/** Local servers are often run with small contexts; OPTCHAT_SUMMARIZER_WINDOW_TOKENS says what the server allows. */
const COMPATIBLE_WINDOW_TOKENS = 32_768;

/**
 * OPTCHAT_SUMMARIZER=openai-compatible: any OpenAI-compatible chat completions server (Ollama, vLLM, llama.cpp, a
 * hosted gateway) through @ai-sdk/openai-compatible. Such servers cache the longest common prefix on their side, if
 * at all; the context comes first and stays the same from call to call.
 */
export const openaiCompatibleProvider: SummarizerProvider = {
  name: "openai-compatible",
  summary:
    "any OpenAI-compatible chat completions server (@ai-sdk/openai-compatible) at OPTCHAT_SUMMARIZER_URL, model OPTCHAT_SUMMARIZER_MODEL",
  check(settings) {
    const problems: string[] = [];
    if (!settings.url)
      problems.push(
        "OPTCHAT_SUMMARIZER=openai-compatible needs OPTCHAT_SUMMARIZER_URL (the server's base URL ending in /v1, e.g. http://127.0.0.1:11434/v1)",
      );
    if (!settings.model)
      problems.push(
        "OPTCHAT_SUMMARIZER=openai-compatible needs OPTCHAT_SUMMARIZER_MODEL (the model name the server knows, e.g. llama3.1:8b)",
      );
    return problems;
  },
  async create(settings): Promise<Summarizer> {
    const { createOpenAICompatible } = await import("@ai-sdk/openai-compatible");
    const host = new URL(settings.url).host;
    const provider = createOpenAICompatible({
      name: "optchat-compactor",
      baseURL: settings.url,
      includeUsage: true,
      ...(settings.apiKey ? { apiKey: settings.apiKey } : {}),
    });
    const identity = `openai-compatible:${settings.model}@${host}`;
    return {
      identity,
      provider: "openai-compatible",
      model: settings.model,
      windowBytes: windowBytesOf(settings.windowTokens || COMPATIBLE_WINDOW_TOKENS),
      complete: (prompt, options) =>
        callAiSdk({
          model: provider.chatModel(settings.model),
          identity,
          prompt,
          userParts: [{ type: "text", text: promptMessages(prompt)[1]?.content ?? "" }],
          timeoutMs: settings.timeoutMs,
          signal: options?.signal,
          onResponse: options?.onResponse,
          settingsHint:
            "Check OPTCHAT_SUMMARIZER_URL (the base URL ending in /v1), OPTCHAT_SUMMARIZER_MODEL and OPTCHAT_SUMMARIZER_API_KEY.",
        }),
    };
  },
};
