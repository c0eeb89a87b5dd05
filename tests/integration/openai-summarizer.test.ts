import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../../scripts/model-server.js";
import { createOpenAiCompatibleSummarizer } from "../../src/compactor/openai-summarizer.js";
import { summarizeLeaf, summarizeParent } from "../../src/compactor/summarize.js";
import { createFakeSummarizer, SummarizerError } from "../../src/compactor/summarizer.js";
import { summarizerFromSetting } from "../../src/compactor/worker.js";
import { buildSummaryRequest, type ChatMessage, overLimitFeedback } from "../../src/core/summary.js";
import { eventually } from "../helpers.js";

let server: ModelServer;

beforeAll(async () => {
  server = await startModelServer();
});

afterAll(async () => {
  await server.close();
});

/** A port nothing listens on: bound by us, then released. */
async function closedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error("expected a rejection");
}

describe("OpenAI-compatible summarizer against the scripted model server", () => {
  const context = ["user: move the importer to the broker", "assistant: read config/broker.yaml; queue is durable"];
  const long = "The importer reads every file, validates the rows and writes them in batches of 500. ".repeat(40);

  it("answers exactly what the in-process fake answers, request by request", async () => {
    const summarizer = createOpenAiCompatibleSummarizer({ baseUrl: server.url, model: "optchat-compactor" });
    const fake = createFakeSummarizer();
    const compress = buildSummaryRequest(context, { type: "compress", kind: "tool_result", text: long });
    const requests: ChatMessage[][] = [
      compress,
      buildSummaryRequest(context, { type: "compress_part", kind: "user", text: `ünïcode ${long}`, part: 2, parts: 3 }),
      buildSummaryRequest(context, {
        type: "merge",
        left: `user: ${long.slice(0, 400)}`,
        right: `tool_result: ${long}`,
      }),
      // A size retry: the same conversation continued with the previous answer and the feedback.
      [...compress, { role: "assistant", content: long }, { role: "user", content: overLimitFeedback(long) }],
    ];
    server.clear();
    for (const messages of requests) {
      expect(await summarizer.complete(messages)).toBe(await fake.complete(messages));
    }
    const captured = server.requests();
    expect(captured.map((r) => r.kind)).toEqual(["compactor", "compactor", "compactor", "compactor"]);
    expect(captured[0]?.body).toEqual({ model: "optchat-compactor", messages: requests[0], temperature: 0 });
  });

  it("gives the same leaf and parent outcomes as the fake through size enforcement and chunking", async () => {
    const summarizer = createOpenAiCompatibleSummarizer({
      baseUrl: `${server.url}/`,
      model: "optchat-compactor",
      windowBytes: 4096,
    });
    const fake = createFakeSummarizer({ windowBytes: 4096 });
    const huge = `${long}\n${long}\n${long}`;
    const leaf = await summarizeLeaf(summarizer, context, "tool_result", huge);
    expect(leaf).toEqual(await summarizeLeaf(fake, context, "tool_result", huge));
    expect(leaf.chunks.length).toBeGreaterThan(3);
    const left = `user: ${long.slice(0, 500)}`;
    const right = `assistant: ${long.slice(500, 1000)}`;
    expect(await summarizeParent(summarizer, context, left, right)).toEqual(
      await summarizeParent(fake, context, left, right),
    );
    expect(summarizer.identity).toBe(`openai-compatible:optchat-compactor@127.0.0.1:${server.port}`);
  });

  it("is what OPTCHAT_SUMMARIZER=openai-compatible builds", () => {
    const summarizer = summarizerFromSetting("openai-compatible", { url: server.url, model: "m1", apiKey: "k" });
    expect(summarizer.identity).toBe(`openai-compatible:m1@127.0.0.1:${server.port}`);
    expect(() => summarizerFromSetting("openai-compatible")).toThrow(/OPTCHAT_SUMMARIZER_URL/);
  });

  it("names the URL and the settings to fix when the provider cannot be reached", async () => {
    const baseUrl = `http://127.0.0.1:${await closedPort()}/v1`;
    const summarizer = createOpenAiCompatibleSummarizer({ baseUrl, model: "optchat-compactor" });
    const error = await rejection(
      summarizer.complete(buildSummaryRequest([], { type: "compress", kind: "user", text: long })),
    );
    expect(error).toBeInstanceOf(SummarizerError);
    expect(error.message).toContain(`${baseUrl}/chat/completions`);
    expect(error.message).toContain("ECONNREFUSED");
    expect(error.message).toContain("OPTCHAT_SUMMARIZER_URL");
  });

  it("reports the HTTP status and the body of a refused request", async () => {
    const summarizer = createOpenAiCompatibleSummarizer({ baseUrl: server.url, model: "optchat-compactor" });
    const error = await rejection(summarizer.complete([{ role: "user", content: "please ERROR400" }]));
    expect(error).toBeInstanceOf(SummarizerError);
    expect(error.message).toContain(`${server.url}/chat/completions answered HTTP 400`);
    expect(error.message).toContain("scripted bad request");
    expect(error.message).toContain("OPTCHAT_SUMMARIZER_MODEL");
  });

  it("honours the abort signal and its own timeout", async () => {
    const summarizer = createOpenAiCompatibleSummarizer({ baseUrl: server.url, model: "m", timeoutMs: 300 });
    const started = performance.now();
    const timedOut = await rejection(summarizer.complete([{ role: "user", content: "SLOW=5 REPLY=late" }]));
    expect(timedOut).toBeInstanceOf(SummarizerError);
    expect(timedOut.message).toMatch(/no answer from .* within 300 ms/);
    expect(performance.now() - started).toBeLessThan(3000);

    const patient = createOpenAiCompatibleSummarizer({ baseUrl: server.url, model: "m" });
    const controller = new AbortController();
    const asked = server.requests().length;
    const pending = rejection(patient.complete([{ role: "user", content: "SLOW=5 REPLY=late" }], controller.signal));
    // Aborted while the request is at the model, not after a guessed delay.
    await eventually(async () => (server.requests().length > asked ? true : undefined), 10_000, "the request");
    controller.abort();
    const aborted = await pending;
    expect(aborted).toBeInstanceOf(SummarizerError);
    expect(aborted.message).toMatch(/aborted/);
    await expect(patient.complete([{ role: "user", content: "x" }], AbortSignal.abort())).rejects.toThrow(/aborted/);
  });
});
