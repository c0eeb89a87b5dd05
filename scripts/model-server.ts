/**
 * The project's scripted OpenAI-compatible model, for end-to-end tests, the demo and benchmarks. OpenCode 1.18.33
 * talks to it through @ai-sdk/openai-compatible; the compactor talks to it through any of its AI SDK providers.
 *
 * Main requests are scripted by directives in the LAST text part of the LAST user message (the memory plugin may
 * prepend its own user messages, and its own text part to the person's message; only the person's latest words count;
 * OpenCode V2's `<conversation-checkpoint>` message is history, never read for directives, as it tells the model):
 *
 *   TOOLS=[{"name":"bash","args":{...}},...] END   one tool call per step, then DONE-AFTER-TOOLS + each tool result
 *   PARALLEL=[...] END                             all calls in one step, then DONE-AFTER-TOOLS + each tool result
 *   ERROR400 | ERROR500 | OVERFLOW400              that HTTP error (OVERFLOW400: code context_length_exceeded)
 *   SLOW=n                                         stream the reply over n seconds, a chunk every ~100 ms
 *   USAGE=n                                        report prompt_tokens = n (else request bytes / 4)
 *   REPLY=<text to end of line>                    reply exactly that text
 *   (anything else)                                "ACK: " + the first 200 characters of the message, on one line
 *
 * Title requests, OpenCode's native compaction and optchat's own compactor calls are recognised and answered without
 * directives; compactor calls get exactly what the in-process fake summarizer would answer.
 *
 * Two wire APIs, one script: `POST /v1/chat/completions` (OpenAI-compatible) and `POST /v1/messages` (Anthropic
 * Messages, streaming as @ai-sdk/anthropic uses it; its tool_use/tool_result blocks are read as the same directives).
 * Each applies a provider prompt-cache simulator (scripts/prompt-cache.ts, docs/caching.md): Anthropic's
 * cache_control breakpoint rules on /messages, automatic longest-common-prefix caching on /chat/completions. Every
 * captured main request carries the simulated `cache` usage; the wire reports it as Anthropic's
 * `cache_read_input_tokens`/`cache_creation_input_tokens` and OpenAI's `prompt_tokens_details.cached_tokens`.
 *
 * CLI: node --import tsx scripts/model-server.ts [--port 18080] [--log requests.jsonl]
 */
import { appendFileSync, realpathSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as delay } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { fakeAnswer } from "../src/compactor/providers/fake.js";
import { SummarizerError } from "../src/compactor/summarizer.js";
import { type ChatMessage, COMPACT_SYSTEM_PROMPT, STEP_MARKERS } from "../src/core/summary.js";
import { anthropicJson, fromAnthropic, streamAnthropic } from "./anthropic-wire.js";
import { diligentMove, progressSummary } from "./diligent-agent.js";
import { AnthropicCache, CacheRuleError, type CacheUsage, OpenAiPrefixCache } from "./prompt-cache.js";

export type RequestKind = "title" | "summary" | "compactor" | "main";
export type WireApi = "openai" | "anthropic";

export interface CapturedRequest {
  readonly index: number;
  readonly at: string;
  readonly kind: RequestKind;
  // biome-ignore lint/suspicious/noExplicitAny: the client's JSON as sent; tests read whatever fields they need
  readonly body: any;
  /** Time the server spent answering, including deliberate slowness (so far, while the reply is still pending). */
  readonly replyMs: number;
  /** "text:...", "tool_calls:bash,read", "error:400"; "pending" while answering; " [client disconnected]" appended. */
  readonly reply: string;
  /** Which endpoint it came to. */
  readonly api: WireApi;
  /** The prompt-cache simulator's accounting of this request (absent when it was refused before that). */
  readonly cache?: CacheUsage;
  /** Output tokens the reply reported (both wires: UTF-8 bytes / 4 of its text and tool calls); absent for an error. */
  readonly outputTokens?: number;
}

export interface ModelServer {
  readonly url: string;
  readonly port: number;
  requests(): readonly CapturedRequest[];
  clear(): void;
  close(): Promise<void>;
  /**
   * The next `count` requests of `kind` (default: compactor calls) fail with this HTTP status, on either wire, with
   * the given response headers (e.g. `retry-after`): how tests make the provider rate-limit, overload or fail.
   */
  failNext(count: number, fault: ScriptedFault): void;
}

export interface ScriptedFault {
  readonly status: number;
  readonly headers?: Readonly<Record<string, string>>;
  readonly kind?: RequestKind;
}

export interface ModelServerOptions {
  /** 0 (the default) picks any free port. */
  readonly port?: number;
  /** Every finished request is appended here as one JSON line. */
  readonly logFile?: string;
  /** The prompt caches' clock (tests move it to expire entries); default Date.now. */
  readonly now?: () => number;
  /**
   * The model's context window: a main or summary request the simulator counts above it is refused as a provider
   * refuses it (Anthropic's 400 "prompt is too long", OpenAI's context_length_exceeded). Default: no limit.
   */
  readonly windowTokens?: number;
}

export const TITLE_REPLY = "Scripted session";
export const DONE_AFTER_TOOLS = "DONE-AFTER-TOOLS";
export const NATIVE_SUMMARY_PREFIX = "NATIVE-COMPACTION-SUMMARY";

const MAX_BODY_BYTES = 64 * 1024 * 1024;
const TICK_MS = 100;
const EXCERPT_CHARS = 200;

interface ScriptedCall {
  readonly id: string;
  readonly name: string;
  readonly arguments: string;
}

type Plan =
  | {
      readonly type: "answer";
      readonly text: string;
      readonly toolCalls: readonly ScriptedCall[];
      readonly promptTokens: number;
      readonly slowMs: number;
    }
  | {
      readonly type: "error";
      readonly status: number;
      readonly error: OpenAiError;
      readonly slowMs: number;
      readonly headers?: Readonly<Record<string, string>>;
    };

interface OpenAiError {
  readonly message: string;
  readonly type: string;
  readonly param: string | null;
  readonly code: string | null;
}

interface PendingRequest {
  index: number;
  at: string;
  kind: RequestKind;
  body: unknown;
  started: number;
  replyMs: number | undefined;
  reply: string;
  api: WireApi;
  cache: CacheUsage | undefined;
  outputTokens: number | undefined;
}

class BadRequest extends Error {}
class BodyTooLarge extends Error {}

export async function startModelServer(options: ModelServerOptions = {}): Promise<ModelServer> {
  let nextIndex = 1;
  let captured: PendingRequest[] = [];
  const faults: (ScriptedFault & { kind: RequestKind })[] = [];
  // One cache per wire API for the server's lifetime, as one provider account would have.
  const anthropicCache = new AnthropicCache(options.now);
  const openAiCache = new OpenAiPrefixCache(options.now);

  const snapshot = (entry: PendingRequest): CapturedRequest => ({
    index: entry.index,
    at: entry.at,
    kind: entry.kind,
    body: entry.body,
    replyMs: entry.replyMs ?? Math.round(performance.now() - entry.started),
    reply: entry.reply,
    api: entry.api,
    ...(entry.cache ? { cache: entry.cache } : {}),
    ...(entry.outputTokens !== undefined ? { outputTokens: entry.outputTokens } : {}),
  });

  const finish = (entry: PendingRequest, reply: string, disconnected: boolean): void => {
    entry.replyMs = Math.round(performance.now() - entry.started);
    entry.reply = disconnected ? `${reply} [client disconnected]` : reply;
    // Synchronous, so a line is on disk by the time its client has the answer and can go and read the log.
    if (options.logFile) appendFileSync(options.logFile, `${JSON.stringify(snapshot(entry))}\n`);
  };

  const handleCompletion = async (
    req: IncomingMessage,
    res: ServerResponse,
    started: number,
    api: WireApi,
  ): Promise<void> => {
    const sendError = api === "anthropic" ? sendAnthropicError : sendOpenAiError;
    const entry: PendingRequest = {
      index: nextIndex++,
      at: new Date().toISOString(),
      kind: "main",
      body: null,
      started,
      replyMs: undefined,
      reply: "pending",
      api,
      cache: undefined,
      outputTokens: undefined,
    };
    captured.push(entry);
    // Aborted when the client goes away before the reply is complete, so slow replies stop instead of writing on.
    const gone = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) gone.abort();
    });

    let raw: Buffer;
    try {
      raw = await readBody(req);
    } catch (error) {
      if (!(error instanceof BodyTooLarge)) {
        finish(entry, "error:body-unread", true);
        return;
      }
      sendError(res, 413, apiError(error.message, "invalid_request_error"));
      finish(entry, "error:413", false);
      return;
    }
    let body: unknown;
    try {
      body = JSON.parse(raw.toString("utf8"));
    } catch (error) {
      entry.body = raw.toString("utf8").slice(0, 4096);
      const message = `model server: the request body is not JSON (${(error as Error).message})`;
      sendError(res, 400, apiError(message, "invalid_request_error"));
      finish(entry, "error:400", false);
      return;
    }
    entry.body = body;
    let plan: Plan;
    try {
      if (!isRecord(body) || !Array.isArray(body.messages)) {
        throw new BadRequest("model server: the request body needs a 'messages' array");
      }
      const request = api === "anthropic" ? fromAnthropic(body) : (body as Body);
      entry.kind = classify(request);
      // A scripted fault is answered before the cache is touched: a refused request reads and writes nothing.
      const fault = faults[0]?.kind === entry.kind ? faults.shift() : undefined;
      if (!fault) {
        try {
          entry.cache = api === "anthropic" ? anthropicCache.apply(body) : openAiCache.apply(body);
        } catch (error) {
          if (error instanceof CacheRuleError) throw new BadRequest(error.message);
          throw error;
        }
      }
      const over =
        options.windowTokens !== undefined && entry.kind !== "compactor" && entry.cache
          ? entry.cache.inputTokens - options.windowTokens
          : 0;
      plan =
        over > 0
          ? overflowPlan(api, (entry.cache as CacheUsage).inputTokens, options.windowTokens as number)
          : fault
            ? {
                type: "error",
                status: fault.status,
                error: apiError(
                  `scripted HTTP ${fault.status}`,
                  fault.status >= 500 ? "server_error" : "rate_limit_error",
                ),
                slowMs: 0,
                ...(fault.headers ? { headers: fault.headers } : {}),
              }
            : planReply(entry.kind, request, entry.index, raw.length);
      // A compactor call is measured by the simulator alone, so its usage adds up (nothing steers it with USAGE=n).
      if (entry.kind === "compactor" && plan.type === "answer" && entry.cache)
        plan = { ...plan, promptTokens: entry.cache.inputTokens };
    } catch (error) {
      const status = error instanceof BadRequest ? 400 : 500;
      const type = status === 400 ? "invalid_request_error" : "server_error";
      sendError(res, status, apiError((error as Error).message, type));
      finish(entry, `error:${status}`, false);
      return;
    }

    const stream = isRecord(body) && body.stream === true;
    const model = isRecord(body) && typeof body.model === "string" ? body.model : "scripted";
    try {
      if (plan.type === "error") {
        if (plan.slowMs > 0) await delay(plan.slowMs, undefined, { signal: gone.signal });
        sendError(res, plan.status, plan.error, plan.headers);
        finish(entry, `error:${plan.status}`, false);
        return;
      }
      const cache = entry.cache as CacheUsage;
      entry.outputTokens = completionTokens(plan);
      if (stream && api === "anthropic") await streamAnthropic(res, plan, model, entry.index, cache, gone.signal);
      else if (stream) await streamAnswer(res, plan, model, entry.index, cache, gone.signal);
      else {
        if (plan.slowMs > 0) await delay(plan.slowMs, undefined, { signal: gone.signal });
        sendJson(
          res,
          200,
          api === "anthropic"
            ? anthropicJson(plan, model, entry.index, cache)
            : completionJson(plan, model, entry.index, cache),
        );
      }
      finish(entry, describePlan(plan), false);
    } catch (error) {
      if (gone.signal.aborted) {
        finish(entry, describePlan(plan), true);
        return;
      }
      finish(entry, "error:500", false);
      throw error;
    }
  };

  const server = createServer((req, res) => {
    const started = performance.now();
    const path = (req.url ?? "/").split("?")[0]?.replace(/\/+$/, "") ?? "";
    const route = async (): Promise<void> => {
      if (path === "/v1/chat/completions" && req.method === "POST")
        return await handleCompletion(req, res, started, "openai");
      if (path === "/v1/messages" && req.method === "POST")
        return await handleCompletion(req, res, started, "anthropic");
      if (path === "/v1/models" && req.method === "GET") {
        req.resume();
        const created = Math.floor(Date.now() / 1000);
        const data = ["scripted", "optchat-compactor"].map((id) => ({
          id,
          object: "model",
          created,
          owned_by: "optchat",
        }));
        return sendJson(res, 200, { object: "list", data });
      }
      req.resume();
      const known = path === "/v1/chat/completions" || path === "/v1/messages" || path === "/v1/models";
      sendOpenAiError(
        res,
        known ? 405 : 404,
        apiError(
          `model server: ${known ? "method not allowed" : "no such endpoint"}: ${req.method} ${req.url}; use POST /v1/chat/completions, POST /v1/messages or GET /v1/models`,
          "invalid_request_error",
        ),
      );
    };
    route().catch((error: unknown) => {
      if (!res.headersSent) {
        sendOpenAiError(res, 500, apiError(`model server internal error: ${(error as Error).message}`, "server_error"));
      } else res.destroy(error as Error);
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    requests: () => captured.map(snapshot),
    failNext: (count, fault) => {
      for (let k = 0; k < count; k++) faults.push({ ...fault, kind: fault.kind ?? "compactor" });
    },
    clear: () => {
      // The index keeps counting: tool call ids must stay unique for the server's whole life.
      captured = [];
    },
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // OpenCode keeps connections alive; without this close() would wait for them to idle out.
      server.closeAllConnections();
      await closed;
    },
  };
}

// ---- classification ---------------------------------------------------------------------------------------------

type Body = Record<string, unknown> & { messages: unknown[] };

function classify(body: Body): RequestKind {
  const system = body.messages
    .filter((m) => isRecord(m) && (m.role === "system" || m.role === "developer"))
    .map((m) => contentText((m as Record<string, unknown>).content))
    .join("\n");
  const hasTools = Array.isArray(body.tools) && body.tools.length > 0;
  if (/title generator/i.test(system)) return "title";
  if (!hasTools && isCompactorRequest(system, body.messages)) return "compactor";
  // Checked after the compactor: our compactor prompt talks about summaries too, and has no tools either.
  if (!hasTools && /summar/i.test(system)) return "summary";
  return "main";
}

/** Recognised by what src/core/summary.ts builds: our system prompt, or a step marker opening the task's line. */
function isCompactorRequest(system: string, messages: readonly unknown[]): boolean {
  if (system.includes(COMPACT_SYSTEM_PROMPT)) return true;
  const firstUser = messages.find((m) => isRecord(m) && m.role === "user") as Record<string, unknown> | undefined;
  const text = contentText(firstUser?.content);
  return Object.values(STEP_MARKERS).some((marker) => text.includes(`\n${marker} `));
}

// ---- planning a reply -------------------------------------------------------------------------------------------

function planReply(kind: RequestKind, body: Body, index: number, bodyBytes: number): Plan {
  const roughTokens = Math.ceil(bodyBytes / 4);
  const answer = (text: string, toolCalls: ScriptedCall[] = [], promptTokens = roughTokens, slowMs = 0): Plan => ({
    type: "answer",
    text,
    toolCalls,
    promptTokens,
    slowMs,
  });
  if (kind === "title") return answer(TITLE_REPLY);
  if (kind === "summary") return answer(nativeSummary(body.messages));
  if (kind === "compactor") {
    // The compactor's blocks joined as they were cut (contentText would put newlines between them).
    const messages: ChatMessage[] = body.messages.flatMap((m) => {
      if (!isRecord(m) || (m.role !== "system" && m.role !== "user" && m.role !== "assistant")) return [];
      return [{ role: m.role, content: contentText(m.content, "") }];
    });
    const [system, first, ...followUps] = messages;
    try {
      // Stateless: the same answer as any other fake for the same prompt.
      return answer(fakeAnswer({ system: system?.content ?? "", context: [], step: first?.content ?? "", followUps }));
    } catch (error) {
      if (error instanceof SummarizerError) throw new BadRequest(`model server (compactor): ${error.message}`);
      throw error;
    }
  }

  const lastUser = findLastIndex(
    body.messages,
    (m) => isRecord(m) && m.role === "user" && !contentText(m.content).trimStart().startsWith(V2_CHECKPOINT),
  );
  const text = lastUser < 0 ? "" : promptText((body.messages[lastUser] as Record<string, unknown>).content);
  const after = lastUser < 0 ? [] : body.messages.slice(lastUser + 1);
  const toolResults = after
    .filter((m) => isRecord(m) && m.role === "tool")
    .map((m) => contentText((m as Record<string, unknown>).content));

  const slowMs = Math.round(Number(/\bSLOW=(\d+(?:\.\d+)?)/.exec(text)?.[1] ?? 0) * 1000);
  const usage = /\bUSAGE=(\d+)/.exec(text)?.[1];
  const promptTokens = usage === undefined ? roughTokens : Number(usage);

  if (text.includes("OVERFLOW400")) {
    const message = `This model's maximum context length is 128000 tokens. However, your messages resulted in ${Math.max(promptTokens, 128001)} tokens. (scripted context_length_exceeded)`;
    return {
      type: "error",
      status: 400,
      error: apiError(message, "invalid_request_error", "context_length_exceeded", "messages"),
      slowMs,
    };
  }
  if (text.includes("ERROR400")) {
    return { type: "error", status: 400, error: apiError("scripted bad request", "invalid_request_error"), slowMs };
  }
  if (text.includes("ERROR500")) {
    return { type: "error", status: 500, error: apiError("scripted provider failure", "server_error"), slowMs };
  }

  const done = (): Plan =>
    answer([DONE_AFTER_TOOLS, ...toolResults.map((r) => excerpt(r))].join("\n"), [], promptTokens, slowMs);
  const sequential = parseCalls(text, "TOOLS");
  if (sequential) {
    const next = toolResults.length;
    const call = sequential[next];
    if (!call) return done();
    return answer("", [{ id: `call_${index}_${next}`, ...call }], promptTokens, slowMs);
  }
  const parallel = parseCalls(text, "PARALLEL");
  if (parallel) {
    if (toolResults.length > 0 || parallel.length === 0) return done();
    return answer(
      "",
      parallel.map((call, i) => ({ id: `call_${index}_${i}`, ...call })),
      promptTokens,
      slowMs,
    );
  }
  const reply = /REPLY=(.*)$/m.exec(text)?.[1];
  if (reply !== undefined) return answer(reply, [], promptTokens, slowMs);
  // The diligent agent of a long task (scripts/diligent-agent.ts): it reads the whole request, not only the last words.
  const move = diligentMove(body.messages.map((m) => (isRecord(m) ? contentText(m.content) : "")).join("\n"));
  if (move?.type === "done") return answer(move.text, [], promptTokens, slowMs);
  if (move?.type === "call") {
    const args = JSON.stringify({ command: move.command, description: `step ${move.step}` });
    return answer("", [{ id: `call_${index}_0`, name: "bash", arguments: args }], promptTokens, slowMs);
  }
  return answer(`ACK: ${excerpt(text)}`, [], promptTokens, slowMs);
}

/** `TOOLS=[...] END` / `PARALLEL=[...] END` as calls with their arguments JSON-encoded; undefined when absent. */
/** How OpenCode V2 opens the message that stands for the history it compacted (docs/opencode-v2-notes.md). */
const V2_CHECKPOINT = "<conversation-checkpoint>";

function parseCalls(text: string, directive: "TOOLS" | "PARALLEL"): { name: string; arguments: string }[] | undefined {
  const match = new RegExp(`\\b${directive}=(\\[[\\s\\S]*?\\])\\s*END\\b`).exec(text);
  if (!match) {
    if (new RegExp(`\\b${directive}=`).test(text)) {
      throw new BadRequest(`model server: ${directive}= must be followed by a JSON array and END`);
    }
    return undefined;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(match[1] as string);
  } catch (error) {
    throw new BadRequest(`model server: ${directive}=[...] END is not JSON: ${(error as Error).message}`);
  }
  if (!Array.isArray(parsed) || !parsed.every((c) => isRecord(c) && typeof c.name === "string")) {
    throw new BadRequest(`model server: ${directive}=[...] END must be an array of {"name": string, "args": object}`);
  }
  return parsed.map((c: Record<string, unknown>) => ({
    name: c.name as string,
    arguments: JSON.stringify(c.args ?? {}),
  }));
}

/** Deterministic, and says what it summarised, so tests can tell the summary from the history it replaced. */
function nativeSummary(messages: readonly unknown[]): string {
  const dump = messages
    .filter((m) => isRecord(m) && m.role === "user")
    .map((m) => contentText((m as Record<string, unknown>).content))
    .join("\n");
  const userLines = dump.split("\n").filter((line) => line.startsWith("[User]: "));
  const last = userLines.at(-1)?.slice("[User]: ".length) ?? "";
  const progress = progressSummary(dump);
  return [
    ...(progress ? [progress] : []),
    NATIVE_SUMMARY_PREFIX,
    "## Objective",
    "Scripted conversation summarised by the model server.",
    `## Last request\n${excerpt(last)}`,
  ].join("\n");
}

// ---- writing replies --------------------------------------------------------------------------------------------

async function streamAnswer(
  res: ServerResponse,
  plan: Extract<Plan, { type: "answer" }>,
  model: string,
  index: number,
  cache: CacheUsage,
  signal: AbortSignal,
): Promise<void> {
  const id = `chatcmpl-${index}`;
  const created = Math.floor(Date.now() / 1000);
  const send = (delta: Record<string, unknown>, extra: Record<string, unknown> = {}): void => {
    const chunk = {
      id,
      object: "chat.completion.chunk",
      created,
      model,
      choices: [{ index: 0, delta, finish_reason: null }],
      ...extra,
    };
    res.write(`data: ${JSON.stringify(chunk)}\n\n`);
  };
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  send({ role: "assistant" });

  const chars = Array.from(plan.text);
  const ticks = plan.slowMs > 0 ? Math.max(1, Math.round(plan.slowMs / TICK_MS)) : Math.min(8, chars.length);
  for (let k = 0; k < ticks; k++) {
    // Rounded up so the first characters arrive at once: an aborted slow reply still has partial text.
    const piece = chars.slice(Math.ceil((k * chars.length) / ticks), Math.ceil(((k + 1) * chars.length) / ticks));
    if (piece.length > 0) send({ content: piece.join("") });
    else res.write(": tick\n\n");
    if (plan.slowMs > 0) await delay(plan.slowMs / ticks, undefined, { signal });
  }
  plan.toolCalls.forEach((call, i) => {
    send({
      tool_calls: [
        { index: i, id: call.id, type: "function", function: { name: call.name, arguments: call.arguments } },
      ],
    });
  });
  const final = {
    id,
    object: "chat.completion.chunk",
    created,
    model,
    choices: [{ index: 0, delta: {}, finish_reason: finishReason(plan) }],
    usage: usageOf(plan, cache),
  };
  res.write(`data: ${JSON.stringify(final)}\n\n`);
  res.write("data: [DONE]\n\n");
  // Not awaited: 'finish' never comes when the client has just gone, and there is nothing left to send anyway.
  res.end();
}

function completionJson(
  plan: Extract<Plan, { type: "answer" }>,
  model: string,
  index: number,
  cache: CacheUsage,
): unknown {
  const toolCalls = plan.toolCalls.map((call) => ({
    id: call.id,
    type: "function",
    function: { name: call.name, arguments: call.arguments },
  }));
  return {
    id: `chatcmpl-${index}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: plan.toolCalls.length > 0 && plan.text === "" ? null : plan.text,
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        },
        finish_reason: finishReason(plan),
      },
    ],
    usage: usageOf(plan, cache),
  };
}

function finishReason(plan: Extract<Plan, { type: "answer" }>): string {
  return plan.toolCalls.length > 0 ? "tool_calls" : "stop";
}

function completionTokens(plan: Extract<Plan, { type: "answer" }>): number {
  const output = plan.text + plan.toolCalls.map((c) => c.name + c.arguments).join("");
  return Math.ceil(Buffer.byteLength(output, "utf8") / 4);
}

function usageOf(plan: Extract<Plan, { type: "answer" }>, cache: CacheUsage): Record<string, unknown> {
  const completion = completionTokens(plan);
  return {
    prompt_tokens: plan.promptTokens,
    completion_tokens: completion,
    total_tokens: plan.promptTokens + completion,
    // prompt_tokens keeps its own rule (bytes / 4, or USAGE=n) for the scripts that steer OpenCode's compaction; the
    // simulator counts bytes / 3.5, so its cached figure is capped to stay a part of it.
    prompt_tokens_details: { cached_tokens: Math.min(cache.cacheReadTokens, plan.promptTokens) },
  };
}

/** A provider's refusal of a request over the model's window, in its own words. */
function overflowPlan(api: WireApi, tokens: number, window: number): Plan {
  const message =
    api === "anthropic"
      ? `prompt is too long: ${tokens} tokens > ${window} maximum`
      : `This model's maximum context length is ${window} tokens. However, your messages resulted in ${tokens} tokens.`;
  const code = api === "anthropic" ? null : "context_length_exceeded";
  return { type: "error", status: 400, error: apiError(message, "invalid_request_error", code, null), slowMs: 0 };
}

function describePlan(plan: Plan): string {
  if (plan.type === "error") return `error:${plan.status}`;
  if (plan.toolCalls.length > 0) return `tool_calls:${plan.toolCalls.map((c) => c.name).join(",")}`;
  return `text:${excerpt(plan.text).slice(0, 80)}`;
}

function apiError(message: string, type: string, code: string | null = null, param: string | null = null): OpenAiError {
  return { message, type, param, code };
}

type Headers = Readonly<Record<string, string>>;

function sendOpenAiError(res: ServerResponse, status: number, error: OpenAiError, headers?: Headers): void {
  sendJson(res, status, { error }, headers);
}

function sendAnthropicError(res: ServerResponse, status: number, error: OpenAiError, headers?: Headers): void {
  const type =
    status === 413
      ? "request_too_large"
      : status === 429
        ? "rate_limit_error"
        : status === 529
          ? "overloaded_error"
          : status >= 500
            ? "api_error"
            : "invalid_request_error";
  sendJson(res, status, { type: "error", error: { type, message: error.message } }, headers);
}

function sendJson(res: ServerResponse, status: number, value: unknown, headers: Headers = {}): void {
  const text = JSON.stringify(value);
  res.writeHead(status, { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

// ---- helpers ----------------------------------------------------------------------------------------------------

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new BodyTooLarge(`model server: request body over ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/** A message's text: a string, or the text parts of an array of content parts, joined by `separator`. */
function contentText(content: unknown, separator = "\n"): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (isRecord(part) && typeof part.text === "string" ? part.text : ""))
      .filter((t) => t.length > 0)
      .join(separator);
  }
  return "";
}

/** The person's words in a user message: the whole string, or its last text part (earlier ones may be optchat's). */
function promptText(content: unknown): string {
  if (!Array.isArray(content)) return contentText(content);
  const texts = content.filter((part) => isRecord(part) && typeof part.text === "string" && part.text !== "");
  return texts.length > 0 ? ((texts.at(-1) as Record<string, unknown>).text as string) : "";
}

/** One line, at most EXCERPT_CHARS characters (code points, so no surrogate is cut in half). */
function excerpt(text: string): string {
  return Array.from(text.replace(/\s*[\r\n]+\s*/g, " ").trim())
    .slice(0, EXCERPT_CHARS)
    .join("");
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function findLastIndex<T>(items: readonly T[], test: (item: T) => boolean): number {
  for (let i = items.length - 1; i >= 0; i--) if (test(items[i] as T)) return i;
  return -1;
}

// ---- CLI --------------------------------------------------------------------------------------------------------

function invokedDirectly(): boolean {
  const script = process.argv[1];
  if (!script) return false;
  try {
    return realpathSync(script) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { port: { type: "string", default: "0" }, log: { type: "string" }, help: { type: "boolean" } },
  });
  if (values.help) {
    process.stdout.write("usage: node --import tsx scripts/model-server.ts [--port N] [--log requests.jsonl]\n");
    return;
  }
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(`--port: '${values.port}' is not a port number (0-65535; 0 picks a free one)\n`);
    process.exitCode = 2;
    return;
  }
  const server = await startModelServer({ port, ...(values.log ? { logFile: values.log } : {}) });
  process.stdout.write(`model server listening on ${server.url}\n`);
  const stop = (): void => {
    server.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
}

if (invokedDirectly()) {
  main().catch((error: unknown) => {
    process.stderr.write(`model server: ${(error as Error).message}\n`);
    process.exit(1);
  });
}
