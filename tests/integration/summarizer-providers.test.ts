import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../../scripts/model-server.js";
import { breakpointBlocks } from "../../src/compactor/providers/anthropic.js";
import { fakeAnswer } from "../../src/compactor/providers/fake.js";
import type { SummarizerSettings } from "../../src/compactor/providers/provider.js";
import { createSummarizer, resolveAuto } from "../../src/compactor/registry.js";
import { summarizeLeaf } from "../../src/compactor/summarize.js";
import { type Summarizer, SummarizerError } from "../../src/compactor/summarizer.js";
import { retryDelaySeconds, treeCacheKey } from "../../src/compactor/worker.js";
import { buildSummaryPrompt, COMPACT_SYSTEM_PROMPT, utf8Bytes } from "../../src/core/summary.js";

// biome-ignore lint/suspicious/noExplicitAny: wire JSON as the SDK sent it
type Json = any;

let server: ModelServer;

beforeAll(async () => {
  server = await startModelServer();
});

afterAll(async () => {
  await server.close();
});

beforeEach(() => server.clear());

function settings(summarizer: string, extra: Partial<SummarizerSettings> = {}): SummarizerSettings {
  return {
    summarizer,
    model: "optchat-compactor",
    url: server.url,
    apiKey: "test-key",
    standardKeys: {},
    timeoutMs: 10_000,
    windowTokens: 0,
    ...extra,
  };
}

/** A view of `lines` realistic lines (no ids anywhere, as the worker sends them). */
function viewLines(lines: number, topic = "importer"): string[] {
  return Array.from(
    { length: lines },
    (_, i) =>
      `user: step ${i} of the ${topic}: move the consumer to the durable broker queue, keep retries at three; tool_result: read config ${i}`,
  );
}

const step = {
  type: "compress",
  kind: "tool_result",
  text: `build log\n${"compiled module ok\n".repeat(80)}`,
} as const;

function lastCompactorRequest(): { body: Json; cache?: { inputTokens: number; cacheReadTokens: number } } {
  const request = server
    .requests()
    .filter((r) => r.kind === "compactor")
    .at(-1);
  if (!request) throw new Error("no compactor request reached the model server");
  return request;
}

async function failure(promise: Promise<unknown>): Promise<SummarizerError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(SummarizerError);
    return error as SummarizerError;
  }
  throw new Error("expected the call to fail");
}

describe("Anthropic through @ai-sdk/anthropic (Messages API, streaming)", () => {
  let summarizer: Summarizer;
  beforeAll(async () => {
    summarizer = await createSummarizer(settings("anthropic"));
  });

  it("sends the context first in blocks with at most 4 cache marks, the step last, no ids; answers the line", async () => {
    const prompt = buildSummaryPrompt(viewLines(120), step);
    expect(prompt.context.length).toBeGreaterThan(4);
    const answer = await summarizer.complete(prompt, { cacheKey: treeCacheKey(7) });
    expect(answer.text).toBe(fakeAnswer(prompt));
    const { body } = lastCompactorRequest();
    expect(body.stream).toBe(true);
    expect(body.temperature).toBe(0);
    expect(JSON.stringify(body.system)).toContain("one-line summaries");
    const [user] = body.messages as Json[];
    const blocks = user.content as Json[];
    // The context blocks, in order, then the step; nothing else in the message.
    expect(blocks.map((b) => b.text).join("")).toBe(`${prompt.context.map((c) => c.text).join("")}${prompt.step}`);
    expect(blocks[0].text.startsWith("<chat>\n")).toBe(true);
    expect(blocks.at(-1).text).toBe(prompt.step);
    const marked = blocks.flatMap((b, k) => (b.cache_control ? [k] : []));
    expect(marked).toEqual([...breakpointBlocks(prompt.context)].sort((a, b) => a - b));
    expect(marked.length).toBeLessThanOrEqual(3);
    expect(marked).toContain(prompt.context.findLastIndex((block) => block.closed));
    // The fourth mark is the system prompt's, the same in every call.
    expect(body.system).toEqual([expect.objectContaining({ cache_control: { type: "ephemeral" } })]);
    expect(blocks.at(-1).cache_control).toBeUndefined();
    // No ids or refs anywhere in what the compactor sends (seed 002 §4.2).
    expect(JSON.stringify(body)).not.toMatch(/\d+\+\d+\|/);
  });

  it("reads the shared context from the provider's cache on the next call of the tree", async () => {
    const lines = viewLines(200, "exporter");
    const first = await summarizer.complete(buildSummaryPrompt(lines, step));
    // The first call of the tree reads at most the system prompt (marked, the same in every call; earlier tests here
    // wrote it), nothing of the context.
    expect(first.usage.cacheReadTokens).toBeLessThanOrEqual(
      Math.ceil((utf8Bytes(JSON.stringify(COMPACT_SYSTEM_PROMPT)) + 64) / 3.5),
    );
    expect(first.usage.cacheWriteTokens).toBeGreaterThan(0);
    // The next leaf: two more lines at the end of the same view.
    const next = buildSummaryPrompt([...lines, "user: yes, do it", "assistant: done"], step);
    const second = await summarizer.complete(next);
    const contextTokens = Math.floor(next.context.reduce((sum, b) => sum + b.bytes, 0) / 3.5);
    expect(second.usage.cacheReadTokens).toBeGreaterThan(0.8 * contextTokens);
    expect(second.usage.inputTokens).toBe(lastCompactorRequest().cache?.inputTokens);
    expect(second.usage.cacheReadTokens).toBe(lastCompactorRequest().cache?.cacheReadTokens);
  });

  it("turns 429, 529 and 5xx into failures that carry the provider's Retry-After", async () => {
    const prompt = buildSummaryPrompt(viewLines(3), step);
    server.failNext(1, { status: 429, headers: { "retry-after": "7" } });
    const limited = await failure(summarizer.complete(prompt));
    expect(limited).toMatchObject({ kind: "rate_limited", status: 429, retryAfterMs: 7000 });
    // The node then waits for the longer of the fixed delay and Retry-After (seed 002 §4.1: no backoff).
    expect(retryDelaySeconds({ failureRetrySeconds: 10 }, limited)).toBe(10);
    server.failNext(1, { status: 529, headers: { "retry-after": "30" } });
    const overloaded = await failure(summarizer.complete(prompt));
    expect(overloaded).toMatchObject({ kind: "overloaded", retryAfterMs: 30_000 });
    expect(retryDelaySeconds({ failureRetrySeconds: 10 }, overloaded)).toBe(30);
    server.failNext(1, { status: 503 });
    expect(await failure(summarizer.complete(prompt))).toMatchObject({ kind: "server", retryAfterMs: undefined });
    // One request per call: the SDK's own retries are off.
    expect(server.requests().filter((r) => r.kind === "compactor")).toHaveLength(3);
    // And the provider works again.
    expect((await summarizer.complete(prompt)).text).toBe(fakeAnswer(prompt));
  });

  it("runs a whole chunked leaf through the provider with the same answers as the fake", async () => {
    const huge = `${"x".repeat(50)}\n`.repeat(400);
    const small = await createSummarizer(settings("anthropic", { windowTokens: 8192 }));
    const fake = await createSummarizer(settings("fake"));
    const fakeSmall: Summarizer = { ...fake, windowBytes: small.windowBytes };
    const viaProvider = await summarizeLeaf({ summarizer: small, purpose: "leaf" }, viewLines(5), "tool_result", huge);
    const viaFake = await summarizeLeaf({ summarizer: fakeSmall, purpose: "leaf" }, viewLines(5), "tool_result", huge);
    expect(viaProvider.chunks.length).toBeGreaterThan(1);
    expect(viaProvider.text).toBe(viaFake.text);
  });
});

describe("OpenAI through @ai-sdk/openai (chat completions, streaming)", () => {
  it("sends one stable prompt with the tree's prompt_cache_key and reads cached_tokens back", async () => {
    const summarizer = await createSummarizer(settings("openai"));
    expect(summarizer.identity).toBe("openai:optchat-compactor");
    const lines = viewLines(200);
    const prompt = buildSummaryPrompt(lines, step);
    const answer = await summarizer.complete(prompt, { cacheKey: treeCacheKey(42) });
    expect(answer.text).toBe(fakeAnswer(prompt));
    const { body } = lastCompactorRequest();
    expect(body.stream).toBe(true);
    expect(body.prompt_cache_key).toBe("optchat-tree-42");
    expect(body.messages[0]).toMatchObject({ role: "system" });
    expect(JSON.stringify(body.messages[1].content)).toContain("<chat>\\n");
    expect(JSON.stringify(body)).not.toMatch(/\d+\+\d+\|/);
    const again = await summarizer.complete(buildSummaryPrompt([...lines, "user: next"], step), {
      cacheKey: treeCacheKey(42),
    });
    expect(again.usage.cacheReadTokens).toBeGreaterThan(0.8 * again.usage.inputTokens);
  });

  it("honours retry-after-ms", async () => {
    const summarizer = await createSummarizer(settings("openai"));
    server.failNext(1, { status: 429, headers: { "retry-after-ms": "1500" } });
    const error = await failure(summarizer.complete(buildSummaryPrompt([], step)));
    expect(error).toMatchObject({ kind: "rate_limited", retryAfterMs: 1500 });
  });
});

describe("any OpenAI-compatible server through @ai-sdk/openai-compatible", () => {
  it("answers like the fake and reports usage", async () => {
    const summarizer = await createSummarizer(settings("openai-compatible", { apiKey: "" }));
    expect(summarizer.identity).toBe(`openai-compatible:optchat-compactor@127.0.0.1:${server.port}`);
    const prompt = buildSummaryPrompt(viewLines(10), step);
    const answer = await summarizer.complete(prompt);
    expect(answer.text).toBe(fakeAnswer(prompt));
    expect(answer.usage.inputTokens).toBeGreaterThan(0);
    expect(lastCompactorRequest().body.stream_options).toEqual({ include_usage: true });
  });

  it("stops a call when its job is aborted", async () => {
    const silent: Server = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}/v1`;
      const summarizer = await createSummarizer(settings("openai-compatible", { url, timeoutMs: 60_000 }));
      const controller = new AbortController();
      const pending = failure(summarizer.complete(buildSummaryPrompt([], step), { signal: controller.signal }));
      // Aborted once the request has reached the server (not after a fixed delay, which load could outrun).
      await new Promise<void>((resolve) => silent.once("request", () => resolve()));
      controller.abort();
      expect((await pending).kind).toBe("aborted");
      const before = await failure(summarizer.complete(buildSummaryPrompt([], step), { signal: AbortSignal.abort() }));
      expect(before.kind).toBe("aborted");
    } finally {
      silent.closeAllConnections();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  it("says which setting to check when nothing listens, and times out a server that never answers", async () => {
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const port = (probe.address() as AddressInfo).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const closed = await createSummarizer(settings("openai-compatible", { url: `http://127.0.0.1:${port}/v1` }));
    const refused = await failure(closed.complete(buildSummaryPrompt([], step)));
    expect(refused.kind).toBe("network");
    expect(refused.message).toMatch(/ECONNREFUSED/);
    expect(refused.message).toMatch(/OPTCHAT_SUMMARIZER_URL/);

    const silent: Server = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}/v1`;
      const slow = await createSummarizer(settings("openai-compatible", { url, timeoutMs: 300 }));
      const timedOut = await failure(slow.complete(buildSummaryPrompt([], step)));
      expect(timedOut.kind).toBe("timeout");
      expect(timedOut.message).toMatch(/OPTCHAT_SUMMARIZER_TIMEOUT_MS/);
    } finally {
      silent.closeAllConnections();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});

describe("the registry", () => {
  it("resolves auto outside OpenCode from the standard keys, and refuses to guess without one", () => {
    const base = settings("auto", { apiKey: "" });
    expect(resolveAuto({ ...base, standardKeys: { ANTHROPIC_API_KEY: "a", OPENAI_API_KEY: "o" } }).summarizer).toBe(
      "anthropic",
    );
    expect(resolveAuto({ ...base, standardKeys: { OPENAI_API_KEY: "o" } }).summarizer).toBe("openai");
    expect(() => resolveAuto({ ...base, standardKeys: {} })).toThrow(
      /No compactor model.*ANTHROPIC_API_KEY.*OPENAI_API_KEY.*OPTCHAT_SUMMARIZER/,
    );
  });

  it("builds the fake only when it is named", async () => {
    expect((await createSummarizer(settings("fake:overshoot=10"))).identity).toBe("fake-extractive/1");
    await expect(createSummarizer(settings("auto", { standardKeys: {} }))).rejects.toThrow(/No compactor model/);
  });
});
