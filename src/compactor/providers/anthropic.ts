import type { TextPart } from "ai";
import type { SummaryPrompt } from "../../core/summary.js";
import type { Summarizer } from "../summarizer.js";
import { callAiSdk } from "./ai-sdk-call.js";
import { apiKeyFrom, needsKey, type SummarizerProvider, windowBytesOf } from "./provider.js";

/** The documented cheap default when no model is named: the newest Haiku when this was written. */
export const ANTHROPIC_DEFAULT_MODEL = "claude-haiku-4-5";
/** Claude models' context window. */
const ANTHROPIC_WINDOW_TOKENS = 200_000;
/** Anthropic honours at most 4 cache breakpoints per request. */
const MAX_BREAKPOINTS = 4;
/** How far back from a breakpoint Anthropic looks for an earlier entry, in blocks. */
const LOOKBACK_BLOCKS = 20;

/** OPTCHAT_SUMMARIZER=anthropic: the Messages API through @ai-sdk/anthropic, with cache marks on the context. */
export const anthropicProvider: SummarizerProvider = {
  name: "anthropic",
  summary: `Anthropic's Messages API (@ai-sdk/anthropic); default model ${ANTHROPIC_DEFAULT_MODEL}; key from ANTHROPIC_API_KEY or OPTCHAT_SUMMARIZER_API_KEY`,
  check: needsKey("anthropic", "ANTHROPIC_API_KEY"),
  async create(settings): Promise<Summarizer> {
    const { createAnthropic } = await import("@ai-sdk/anthropic");
    const model = settings.model || ANTHROPIC_DEFAULT_MODEL;
    const provider = createAnthropic({
      apiKey: apiKeyFrom(settings, "ANTHROPIC_API_KEY"),
      ...(settings.url ? { baseURL: settings.url } : {}),
    });
    const identity = `anthropic:${model}`;
    return {
      identity,
      provider: "anthropic",
      model,
      windowBytes: windowBytesOf(settings.windowTokens || ANTHROPIC_WINDOW_TOKENS),
      complete: (prompt, options) =>
        callAiSdk({
          model: provider(model),
          identity,
          prompt,
          userParts: markedParts(prompt),
          systemOptions: SYSTEM_MARKED,
          timeoutMs: settings.timeoutMs,
          signal: options?.signal,
          onResponse: options?.onResponse,
          settingsHint:
            "Check ANTHROPIC_API_KEY / OPTCHAT_SUMMARIZER_API_KEY, OPTCHAT_SUMMARIZER_MODEL and OPTCHAT_SUMMARIZER_URL.",
        }),
    };
  },
};

/**
 * The context blocks with cache_control marks, then the step (unmarked: it differs on every call). Marks go on the
 * last closed block (the last boundary that stays put while lines are appended: the next call of the tree finds it),
 * then every LOOKBACK_BLOCKS further back, so that after a change deep in the view the lookback still reaches an earlier
 * entry. An open last block is not marked: the next call sees it with more lines, so its entry (written at 1.25×) would
 * be read only by a call with this very context. The system prompt carries its own mark ({@link SYSTEM_MARKED}).
 */
export function markedParts(prompt: SummaryPrompt): TextPart[] {
  const marks = breakpointBlocks(prompt.context);
  return [
    ...prompt.context.map(
      (block, k): TextPart => ({
        type: "text",
        text: block.text,
        ...(marks.has(k) ? { providerOptions: EPHEMERAL } : {}),
      }),
    ),
    { type: "text", text: prompt.step },
  ];
}

const EPHEMERAL = { anthropic: { cacheControl: { type: "ephemeral" } } };

/**
 * The system prompt is the same in every call of every tree: one mark on it makes every call read it from the cache,
 * whatever its context (a new session's first leaf, a publication's changed shared view). It takes one of the 4 marks.
 */
export const SYSTEM_MARKED = EPHEMERAL;

/** Indices of the context blocks that carry a breakpoint (at most MAX_BREAKPOINTS - 1: the system prompt has one). */
export function breakpointBlocks(blocks: readonly { readonly closed: boolean }[]): Set<number> {
  const marks = new Set<number>();
  const last = blocks.length > 0 && blocks[blocks.length - 1]?.closed ? blocks.length - 1 : blocks.length - 2;
  for (let k = last; k >= 0 && marks.size < MAX_BREAKPOINTS - 1; k -= LOOKBACK_BLOCKS) marks.add(k);
  return marks;
}
