import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../../scripts/model-server.js";
import { createFakeSummarizer } from "../../src/compactor/providers/fake.js";
import { buildSummaryPrompt, promptMessages } from "../../src/core/summary.js";

// biome-ignore lint/suspicious/noExplicitAny: OpenAI wire JSON, read field by field
type Json = any;

const TOOLS = [
  { type: "function", function: { name: "bash", description: "run", parameters: { type: "object" } } },
  { type: "function", function: { name: "read", description: "read", parameters: { type: "object" } } },
];
const SYSTEM = { role: "system", content: "You are opencode, a coding agent." };

let server: ModelServer;
let dir: string;
let logFile: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "model-server-"));
  logFile = join(dir, "requests.jsonl");
  server = await startModelServer({ logFile });
});

afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => server.clear());

async function post(body: unknown, signal?: AbortSignal): Promise<Response> {
  return await fetch(`${server.url}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

/** The data lines of an SSE answer: parsed chunks, and whether it ended with [DONE]. */
function parseSse(text: string): { chunks: Json[]; done: boolean } {
  const data = text
    .split("\n")
    .filter((line) => line.startsWith("data: "))
    .map((line) => line.slice("data: ".length));
  return { chunks: data.filter((d) => d !== "[DONE]").map((d) => JSON.parse(d)), done: data.at(-1) === "[DONE]" };
}

function streamedText(chunks: readonly Json[]): string {
  return chunks.map((c) => c.choices?.[0]?.delta?.content ?? "").join("");
}

async function json(res: Response): Promise<Json> {
  return await res.json();
}

/** A non-streaming main request with the given history; returns the assistant message. */
async function step(messages: readonly unknown[]): Promise<Json> {
  const res = await post({ model: "scripted", messages, tools: TOOLS });
  expect(res.status).toBe(200);
  return (await json(res)).choices[0];
}

describe("model server", () => {
  it("streams a text reply ending with finish_reason, usage and [DONE]", async () => {
    const res = await post({
      model: "scripted",
      stream: true,
      stream_options: { include_usage: true },
      tools: TOOLS,
      messages: [
        SYSTEM,
        { role: "user", content: "REPLY=older message, ignored" },
        { role: "user", content: [{ type: "text", text: "hello\nthere USAGE=1234" }] },
      ],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const { chunks, done } = parseSse(await res.text());
    expect(done).toBe(true);
    expect(chunks[0].object).toBe("chat.completion.chunk");
    expect(chunks[0].choices[0].delta.role).toBe("assistant");
    expect(streamedText(chunks)).toBe("ACK: hello there USAGE=1234");
    const last = chunks.at(-1);
    expect(last.choices[0].finish_reason).toBe("stop");
    expect(last.usage.prompt_tokens).toBe(1234);
    expect(last.usage.total_tokens).toBe(1234 + last.usage.completion_tokens);
  });

  it("replies REPLY= text exactly and estimates prompt tokens from the request size", async () => {
    const body = { model: "m", messages: [SYSTEM, { role: "user", content: "x REPLY=exactly this \nnext line" }] };
    const res = await post(body);
    const answer = await json(res);
    expect(answer.object).toBe("chat.completion");
    expect(answer.choices[0].message.content).toBe("exactly this ");
    expect(answer.usage.prompt_tokens).toBe(Math.ceil(Buffer.byteLength(JSON.stringify(body)) / 4));
  });

  it("answers TOOLS one call per step, then DONE-AFTER-TOOLS with each tool result", async () => {
    const user = {
      role: "user",
      content:
        'do it: TOOLS=[{"name":"bash","args":{"command":"echo hi"}},{"name":"read","args":{"path":"a.txt"}}] END',
    };
    const history: unknown[] = [SYSTEM, { role: "user", content: "memory block TOOLS=[] END" }, user];

    const first = await step(history);
    expect(first.finish_reason).toBe("tool_calls");
    expect(first.message.tool_calls).toHaveLength(1);
    const call1 = first.message.tool_calls[0];
    expect(call1).toMatchObject({ type: "function", function: { name: "bash" } });
    expect(JSON.parse(call1.function.arguments)).toEqual({ command: "echo hi" });
    history.push(
      { role: "assistant", content: "", tool_calls: [call1] },
      { role: "tool", tool_call_id: call1.id, content: "hi\n" },
    );

    const second = await step(history);
    const call2 = second.message.tool_calls[0];
    expect(call2.function.name).toBe("read");
    expect(JSON.parse(call2.function.arguments)).toEqual({ path: "a.txt" });
    expect(call2.id).not.toBe(call1.id);
    history.push(
      { role: "assistant", content: "", tool_calls: [call2] },
      { role: "tool", tool_call_id: call2.id, content: [{ type: "text", text: `${"x".repeat(300)}` }] },
    );

    const third = await step(history);
    expect(third.finish_reason).toBe("stop");
    expect(third.message.content).toBe(`DONE-AFTER-TOOLS\nhi\n${"x".repeat(200)}`);
    expect(server.requests().map((r) => r.reply)).toEqual([
      "tool_calls:bash",
      "tool_calls:read",
      expect.stringMatching(/^text:DONE-AFTER-TOOLS hi x+$/),
    ]);
  });

  it("streams PARALLEL calls in one step, then DONE-AFTER-TOOLS", async () => {
    const user = {
      role: "user",
      content: 'PARALLEL=[{"name":"bash","args":{"command":"a"}},{"name":"read","args":{}}] END',
    };
    const res = await post({ model: "m", stream: true, tools: TOOLS, messages: [SYSTEM, user] });
    const { chunks } = parseSse(await res.text());
    const calls = chunks.flatMap((c) => c.choices[0].delta.tool_calls ?? []);
    expect(calls.map((c: Json) => [c.index, c.function.name, c.function.arguments])).toEqual([
      [0, "bash", '{"command":"a"}'],
      [1, "read", "{}"],
    ]);
    expect(new Set(calls.map((c: Json) => c.id)).size).toBe(2);
    expect(chunks.at(-1).choices[0].finish_reason).toBe("tool_calls");

    const done = await step([
      SYSTEM,
      user,
      { role: "assistant", content: "", tool_calls: calls.map(({ index: _, ...c }: Json) => c) },
      { role: "tool", tool_call_id: calls[0].id, content: "out-a" },
      { role: "tool", tool_call_id: calls[1].id, content: "out-b" },
    ]);
    expect(done.message.content).toBe("DONE-AFTER-TOOLS\nout-a\nout-b");
  });

  it.each([
    ["ERROR400", 400, "scripted bad request", null],
    ["ERROR500", 500, "scripted provider failure", null],
    ["OVERFLOW400", 400, /context length/, "context_length_exceeded"],
  ])("answers %s with HTTP %i", async (directive, status, message, code) => {
    const res = await post({
      model: "m",
      stream: true,
      tools: TOOLS,
      messages: [SYSTEM, { role: "user", content: `now ${directive}` }],
    });
    expect(res.status).toBe(status);
    const { error } = await json(res);
    expect(error.message).toMatch(message);
    expect(error.code).toBe(code);
    expect(server.requests()[0]).toMatchObject({ kind: "main", reply: `error:${status}` });
  });

  it("recognises title, native compaction and compactor requests", async () => {
    const title = await step([
      { role: "system", content: "You are a title generator. You output ONLY a thread title." },
      { role: "user", content: "ERROR400 would fail a main request" },
    ]);
    expect(title.message.content).toBe("Scripted session");

    const summaryRes = await post({
      model: "m",
      messages: [
        { role: "system", content: "You are a context summarization agent." },
        {
          role: "user",
          content: "Here is the conversation so far:\n<conversation>\n[User]: fix the bug\n</conversation>",
        },
      ],
    });
    const summary = (await json(summaryRes)).choices[0].message.content as string;
    expect(summary.startsWith("NATIVE-COMPACTION-SUMMARY")).toBe(true);
    expect(summary).toContain("fix the bug");

    const prompt = buildSummaryPrompt(["user: earlier"], { type: "compress", kind: "user", text: "y ".repeat(400) });
    const compactorRes = await post({ model: "optchat-compactor", messages: promptMessages(prompt), temperature: 0 });
    const expected = await createFakeSummarizer().complete(prompt);
    expect((await json(compactorRes)).choices[0].message.content).toBe(expected.text);

    expect(server.requests().map((r) => r.kind)).toEqual(["title", "summary", "compactor"]);
  });

  it("streams SLOW replies over time and stops when the client goes away", async () => {
    const started = performance.now();
    const res = await post({
      model: "m",
      stream: true,
      messages: [{ role: "user", content: "SLOW=0.5 REPLY=abcdef" }],
    });
    const { chunks, done } = parseSse(await res.text());
    expect(performance.now() - started).toBeGreaterThanOrEqual(400);
    expect(done).toBe(true);
    expect(streamedText(chunks)).toBe("abcdef");
    expect(server.requests()[0]?.replyMs).toBeGreaterThanOrEqual(400);

    const abort = new AbortController();
    const slow = await post(
      { model: "m", stream: true, messages: [{ role: "user", content: "SLOW=30 x" }] },
      abort.signal,
    );
    const reader = slow.body?.getReader();
    const first = await reader?.read();
    expect(new TextDecoder().decode(first?.value)).toContain("data: ");
    expect(server.requests()[1]?.reply).toBe("pending");
    abort.abort();
    await expect.poll(() => server.requests()[1]?.reply, { timeout: 5000 }).toMatch(/\[client disconnected\]$/);
    expect(server.requests()[1]?.replyMs).toBeLessThan(10_000);
  });

  it("rejects bad JSON and unknown paths, and lists models", async () => {
    const bad = await post("{not json");
    expect(bad.status).toBe(400);
    expect((await json(bad)).error.message).toMatch(/not JSON/);
    expect(server.requests()[0]).toMatchObject({ reply: "error:400", body: "{not json" });

    const noMessages = await post({ model: "m" });
    expect(noMessages.status).toBe(400);
    expect((await json(noMessages)).error.message).toMatch(/messages/);

    const missing = await fetch(`${server.url}/completions`, { method: "POST", body: "{}" });
    expect(missing.status).toBe(404);
    const models = await json(await fetch(`${server.url}/models`));
    expect(models.object).toBe("list");
    expect(models.data.length).toBeGreaterThan(0);
  });

  it("captures every request in requests() and in the log file, with indexes that survive clear()", async () => {
    const before = server.requests().length;
    expect(before).toBe(0);
    await step([SYSTEM, { role: "user", content: "first" }]);
    await post({ model: "m", messages: [SYSTEM, { role: "user", content: "ERROR500" }] });
    const captured = server.requests();
    expect(captured.map((r) => [r.kind, r.reply])).toEqual([
      ["main", "text:ACK: first"],
      ["main", "error:500"],
    ]);
    expect(captured[1]?.index).toBe((captured[0]?.index ?? 0) + 1);
    expect(captured[0]?.body.messages[1].content).toBe("first");
    expect(Date.parse(captured[0]?.at ?? "")).not.toBeNaN();

    const logged = readFileSync(logFile, "utf8")
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line));
    expect(logged.slice(-2)).toEqual(captured);

    server.clear();
    expect(server.requests()).toEqual([]);
    await step([SYSTEM, { role: "user", content: "again" }]);
    expect(server.requests()[0]?.index).toBe((captured[1]?.index ?? 0) + 1);
  });
});

describe("model server: Anthropic Messages endpoint with the prompt-cache simulator", () => {
  const MARK = { cache_control: { type: "ephemeral" } };
  const SYSTEM_BLOCKS = [{ type: "text", text: `You are a coding agent. ${"Rules. ".repeat(800)}`, ...MARK }];
  const ANTHROPIC_TOOLS = [{ name: "bash", description: "run", input_schema: { type: "object" } }];

  async function postMessages(body: unknown): Promise<Response> {
    return await fetch(`${server.url}/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": "x", "anthropic-version": "2023-06-01" },
      body: JSON.stringify(body),
    });
  }

  /** The SSE events of an Anthropic stream, in order. */
  function events(text: string): Json[] {
    return text
      .split("\n")
      .filter((line) => line.startsWith("data: "))
      .map((line) => JSON.parse(line.slice("data: ".length)));
  }

  it("streams message_start … message_stop with the simulated cache usage, and reads what it wrote", async () => {
    const body = (prompt: string) => ({
      model: "claude-sim",
      stream: true,
      max_tokens: 100,
      system: SYSTEM_BLOCKS,
      tools: ANTHROPIC_TOOLS,
      messages: [{ role: "user", content: [{ type: "text", text: `${prompt} REPLY=fine`, ...MARK }] }],
    });
    const first = events(await (await postMessages(body("one"))).text());
    expect([...new Set(first.map((e) => e.type))]).toEqual([
      "message_start",
      "content_block_start",
      "content_block_delta",
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    expect(
      first
        .filter((e) => e.type === "content_block_delta")
        .map((e) => e.delta.text)
        .join(""),
    ).toBe("fine");
    const written = first[0].message.usage;
    expect(written.cache_read_input_tokens).toBe(0);
    expect(written.cache_creation_input_tokens).toBeGreaterThan(1024);
    const second = events(await (await postMessages(body("two"))).text())[0].message.usage;
    // The system block's entry is read; the changed user block is written anew.
    expect(second.cache_read_input_tokens).toBeGreaterThan(1024);
    expect(second.cache_read_input_tokens).toBeLessThan(written.cache_creation_input_tokens);
    const captured = server.requests();
    expect(captured.map((r) => r.api)).toEqual(["anthropic", "anthropic"]);
    expect(captured[1]?.cache?.cacheReadTokens).toBe(second.cache_read_input_tokens);
  });

  it("scripts tool loops over tool_use / tool_result blocks", async () => {
    const user = { role: "user", content: 'go TOOLS=[{"name":"bash","args":{"command":"echo hi"}}] END' };
    const first = events(
      await (
        await postMessages({
          model: "m",
          stream: true,
          system: SYSTEM_BLOCKS,
          tools: ANTHROPIC_TOOLS,
          messages: [user],
        })
      ).text(),
    );
    const start = first.find((e) => e.type === "content_block_start");
    expect(start.content_block).toMatchObject({ type: "tool_use", name: "bash" });
    expect(JSON.parse(first.find((e) => e.type === "content_block_delta").delta.partial_json)).toEqual({
      command: "echo hi",
    });
    expect(first.find((e) => e.type === "message_delta").delta.stop_reason).toBe("tool_use");
    const id = start.content_block.id;
    const answer = await json(
      await postMessages({
        model: "m",
        system: SYSTEM_BLOCKS,
        tools: ANTHROPIC_TOOLS,
        messages: [
          user,
          { role: "assistant", content: [{ type: "tool_use", id, name: "bash", input: { command: "echo hi" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: "hi-out" }] },
        ],
      }),
    );
    expect(answer.stop_reason).toBe("end_turn");
    expect(answer.content[0].text).toBe("DONE-AFTER-TOOLS\nhi-out");
  });

  it("answers more than 4 breakpoints with Anthropic's 400 error shape", async () => {
    const five = Array.from({ length: 5 }, (_, i) => ({ type: "text", text: `s${i}`, ...MARK }));
    const res = await postMessages({ model: "m", system: five, messages: [{ role: "user", content: "hi" }] });
    expect(res.status).toBe(400);
    const error = await json(res);
    expect(error.type).toBe("error");
    expect(error.error.type).toBe("invalid_request_error");
    expect(error.error.message).toContain("maximum of 4");
  });

  it("reports OpenAI-compatible prefix hits as prompt_tokens_details.cached_tokens", async () => {
    const long = { role: "system", content: "Long stable system prompt. ".repeat(400) };
    await post({ model: "m", messages: [long, { role: "user", content: "one" }] });
    const answer = await json(await post({ model: "m", messages: [long, { role: "user", content: "two" }] }));
    expect(answer.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(1024);
    expect(server.requests()[1]?.cache?.cacheReadTokens).toBeGreaterThanOrEqual(1024);
  });
});
