/**
 * The Anthropic Messages API side of the scripted model (scripts/model-server.ts): a request read as the
 * OpenAI-shaped messages the script understands, and answers written the way @ai-sdk/anthropic reads them
 * (server-sent events message_start … message_stop, or one JSON message).
 */
import type { ServerResponse } from "node:http";
import { setTimeout as delay } from "node:timers/promises";
import type { CacheUsage } from "./prompt-cache.js";

// biome-ignore lint/suspicious/noExplicitAny: wire JSON as the client sent it
type Json = any;

export interface AnswerToWrite {
  readonly text: string;
  readonly toolCalls: readonly { readonly id: string; readonly name: string; readonly arguments: string }[];
  readonly slowMs: number;
}

const TICK_MS = 100;

/**
 * An Anthropic request as OpenAI-shaped messages: `system` becomes a system message, a user message's tool_result
 * blocks become `tool` messages (and its text blocks a user message), an assistant's tool_use blocks `tool_calls`.
 */
export function fromAnthropic(body: Json): Record<string, unknown> & { messages: unknown[] } {
  const messages: unknown[] = [];
  const system =
    typeof body.system === "string"
      ? body.system
      : (Array.isArray(body.system) ? body.system : []).map((b: Json) => b?.text ?? "").join("\n");
  if (system) messages.push({ role: "system", content: system });
  for (const message of body.messages as Json[]) {
    const blocks: Json[] =
      typeof message?.content === "string" ? [{ type: "text", text: message.content }] : (message?.content ?? []);
    const texts = blocks.filter((b) => b?.type === "text").map((b) => ({ type: "text", text: String(b.text ?? "") }));
    if (message?.role === "assistant") {
      const calls = blocks
        .filter((b) => b?.type === "tool_use")
        .map((b) => ({ id: b.id, type: "function", function: { name: b.name, arguments: JSON.stringify(b.input) } }));
      messages.push({
        role: "assistant",
        content: texts.map((t) => t.text).join(""),
        ...(calls.length > 0 ? { tool_calls: calls } : {}),
      });
      continue;
    }
    for (const result of blocks.filter((b) => b?.type === "tool_result")) {
      const content =
        typeof result.content === "string"
          ? result.content
          : (Array.isArray(result.content) ? result.content : []).map((c: Json) => c?.text ?? "").join("\n");
      messages.push({ role: "tool", tool_call_id: result.tool_use_id, content });
    }
    if (texts.length > 0) messages.push({ role: "user", content: texts });
  }
  return { ...body, system: undefined, messages, tools: body.tools };
}

function usage(cache: CacheUsage, output: number): Record<string, number> {
  return {
    input_tokens: cache.inputTokens - cache.cacheReadTokens - cache.cacheWriteTokens,
    cache_creation_input_tokens: cache.cacheWriteTokens,
    cache_read_input_tokens: cache.cacheReadTokens,
    output_tokens: output,
  };
}

function outputTokens(answer: AnswerToWrite): number {
  const output = answer.text + answer.toolCalls.map((c) => c.name + c.arguments).join("");
  return Math.ceil(Buffer.byteLength(output, "utf8") / 4);
}

function stopReason(answer: AnswerToWrite): string {
  return answer.toolCalls.length > 0 ? "tool_use" : "end_turn";
}

function toolInput(call: AnswerToWrite["toolCalls"][number]): unknown {
  return JSON.parse(call.arguments || "{}");
}

export function anthropicJson(answer: AnswerToWrite, model: string, index: number, cache: CacheUsage): unknown {
  return {
    id: `msg_${index}`,
    type: "message",
    role: "assistant",
    model,
    content: [
      ...(answer.text ? [{ type: "text", text: answer.text }] : []),
      ...answer.toolCalls.map((c) => ({ type: "tool_use", id: c.id, name: c.name, input: toolInput(c) })),
    ],
    stop_reason: stopReason(answer),
    stop_sequence: null,
    usage: usage(cache, outputTokens(answer)),
  };
}

export async function streamAnthropic(
  res: ServerResponse,
  answer: AnswerToWrite,
  model: string,
  index: number,
  cache: CacheUsage,
  signal: AbortSignal,
): Promise<void> {
  const send = (event: string, data: Record<string, unknown>): void => {
    res.write(`event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`);
  };
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  send("message_start", {
    message: {
      id: `msg_${index}`,
      type: "message",
      role: "assistant",
      model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: usage(cache, 1),
    },
  });
  let block = 0;
  if (answer.text !== "" || answer.toolCalls.length === 0) {
    send("content_block_start", { index: block, content_block: { type: "text", text: "" } });
    const chars = Array.from(answer.text);
    const ticks = answer.slowMs > 0 ? Math.max(1, Math.round(answer.slowMs / TICK_MS)) : Math.min(8, chars.length);
    for (let k = 0; k < ticks; k++) {
      const piece = chars.slice(Math.ceil((k * chars.length) / ticks), Math.ceil(((k + 1) * chars.length) / ticks));
      if (piece.length > 0)
        send("content_block_delta", { index: block, delta: { type: "text_delta", text: piece.join("") } });
      else send("ping", {});
      if (answer.slowMs > 0) await delay(answer.slowMs / ticks, undefined, { signal });
    }
    send("content_block_stop", { index: block });
    block += 1;
  }
  for (const call of answer.toolCalls) {
    send("content_block_start", {
      index: block,
      content_block: { type: "tool_use", id: call.id, name: call.name, input: {} },
    });
    send("content_block_delta", { index: block, delta: { type: "input_json_delta", partial_json: call.arguments } });
    send("content_block_stop", { index: block });
    block += 1;
  }
  send("message_delta", {
    delta: { stop_reason: stopReason(answer), stop_sequence: null },
    usage: { output_tokens: outputTokens(answer) },
  });
  send("message_stop", {});
  res.end();
}
