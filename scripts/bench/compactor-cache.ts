/**
 * `bench tree`, case compactor-cache (issue 13 item 3): the tree benchmark's live workload summarized through the real
 * AI SDK providers against the scripted model (scripts/model-server.ts), whose prompt-cache simulator
 * (scripts/prompt-cache.ts) applies Anthropic's breakpoint rules on /v1/messages and longest-common-prefix caching on
 * /v1/chat/completions. Reported per provider: the share of compactor input tokens read from the cache (target
 * >= 0.85), calls and tokens per message, and what that costs at the price table's rates.
 *
 * Environment:
 *   OPTCHAT_BENCH_TREE_CACHE_PROVIDERS   comma-separated providers (default anthropic,openai; empty skips)
 *   OPTCHAT_BENCH_TREE_CACHE_MESSAGES    messages per provider (default: OPTCHAT_BENCH_TREE_COMPACTOR_MESSAGES)
 */

import { costOf } from "../../src/compactor/prices.js";
import { createSummarizer } from "../../src/compactor/registry.js";
import type { Memory } from "../../src/memory/service.js";
import { type ModelServer, startModelServer } from "../model-server.js";
import { listPrice } from "./cache-dollars.js";
import { type BenchContext, emit, envNumber, note, ratio, round } from "./common.js";
import type { PhaseResult, runPhase } from "./tree/phase.js";
import type { Settings } from "./tree/settings.js";

const BENCH = "tree";
const DEFAULT_MODELS: Record<string, string> = { anthropic: "claude-haiku-4-5", openai: "gpt-4.1-mini" };

export async function compactorCacheCases(input: {
  readonly context: BenchContext;
  readonly memory: Memory;
  readonly settings: Settings;
  readonly filler: string;
  readonly databaseUrl: string;
  readonly run: typeof runPhase;
}): Promise<void> {
  const providers = (process.env.OPTCHAT_BENCH_TREE_CACHE_PROVIDERS ?? "anthropic,openai")
    .split(",")
    .map((p) => p.trim())
    .filter(Boolean);
  const messages = envNumber("OPTCHAT_BENCH_TREE_CACHE_MESSAGES", input.settings.compactorMessages, { integer: true });
  if (providers.length === 0 || messages === 0) {
    emit(BENCH, "compactor-cache", { skipped: "OPTCHAT_BENCH_TREE_CACHE_PROVIDERS or _MESSAGES is empty" });
    return;
  }
  for (const provider of providers) {
    if (input.context.signal.aborted) return;
    // A fresh server per provider: a fresh cache, as a new account would have.
    const server = await startModelServer();
    try {
      const summarizer = await createSummarizer({
        summarizer: provider,
        model: DEFAULT_MODELS[provider] ?? "optchat-compactor",
        url: server.url,
        apiKey: "bench",
        standardKeys: {},
        timeoutMs: 60_000,
        windowTokens: 0,
      });
      note(`tree: compactor-cache: ${messages} messages through ${summarizer.identity} at the scripted model`);
      const result = await input.run(
        input.memory,
        "live",
        input.settings,
        messages,
        input.filler,
        input.databaseUrl,
        input.context.signal,
        summarizer,
        `cache-${provider}`,
      );
      if (result) emit(BENCH, "compactor-cache", cacheFields(provider, summarizer.identity, result, server));
    } finally {
      await server.close();
    }
  }
}

function cacheFields(provider: string, identity: string, result: PhaseResult, server: ModelServer) {
  const { stats, messages } = result;
  // The server's own accounting of the same requests, as a cross-check of what the SDK reported back.
  const seen = server.requests().filter((r) => r.kind === "compactor" && r.cache);
  const served = seen.reduce(
    (sum, r) => ({
      input: sum.input + (r.cache?.inputTokens ?? 0),
      read: sum.read + (r.cache?.cacheReadTokens ?? 0),
      write: sum.write + (r.cache?.cacheWriteTokens ?? 0),
    }),
    { input: 0, read: 0, write: 0 },
  );
  const per = (n: number) => round(n / Math.max(1, messages), 1);
  return {
    provider,
    summarizer: identity,
    simulator:
      provider === "anthropic"
        ? "Anthropic rules: cache_control breakpoints, 20-block lookback, 1,024-token minimum, 5-minute entries"
        : "longest common prefix with any live earlier prompt, from 1,024 tokens in 128-token steps",
    messages,
    complete: result.counts.nodes > 0 && result.events.failure === 0,
    calls: stats.calls,
    callsPerMessage: ratio(stats.calls, messages),
    // Every message is one stored record here (issue 39's target: <= 0.3).
    callsPerStoredRecord: ratio(stats.calls, messages),
    retryCalls: stats.retryCalls,
    inputTokens: stats.inputTokens,
    cacheReadTokens: stats.cacheReadTokens,
    cacheWriteTokens: stats.cacheWriteTokens,
    outputTokens: stats.outputTokens,
    cacheReadShare: ratio(stats.cacheReadTokens, stats.inputTokens),
    cacheWriteShare: ratio(stats.cacheWriteTokens, stats.inputTokens),
    targetCacheReadShare: 0.85,
    inputTokensPerMessage: per(stats.inputTokens),
    uncachedInputTokensPerMessage: per(stats.inputTokens - stats.cacheReadTokens - stats.cacheWriteTokens),
    cacheReadTokensPerMessage: per(stats.cacheReadTokens),
    cacheWriteTokensPerMessage: per(stats.cacheWriteTokens),
    outputTokensPerMessage: per(stats.outputTokens),
    inputTokensPerCall: stats.calls > 0 ? round(stats.inputTokens / stats.calls, 0) : null,
    outputTokensPerCall: stats.calls > 0 ? round(stats.outputTokens / stats.calls, 1) : null,
    ...dollarFields(provider, stats, messages),
    serverSawRequests: seen.length,
    serverCacheReadShare: ratio(served.read, served.input),
    failures: result.events.failure,
    ...(result.firstProblem ? { firstProblem: result.firstProblem } : {}),
  };
}

/** The calls at the list price of the provider's default compactor model (src/compactor/prices.ts). */
function dollarFields(provider: string, stats: PhaseResult["stats"], messages: number) {
  const model = DEFAULT_MODELS[provider];
  if (!model) return { dollars: null, dollarsPerMessage: null };
  const dollars = costOf(listPrice(`${provider}:${model}`), stats);
  return { dollars: round(dollars, 4), dollarsPerMessage: round(dollars / Math.max(1, messages), 6) };
}
