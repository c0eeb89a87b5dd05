import type { CapturedRequest } from "../../scripts/model-server.js";

/** Reading the requests OpenCode sent to the scripted model: the evidence every e2e assertion is made on. */

export interface ChatMessage {
  readonly role: string;
  readonly content?: unknown;
  readonly tool_calls?: readonly { id: string; function: { name: string; arguments: string } }[];
  readonly tool_call_id?: string;
}

export function messagesOf(request: CapturedRequest): ChatMessage[] {
  return ((request.body as { messages?: ChatMessage[] }).messages ?? []) as ChatMessage[];
}

/** A message's text parts, in order (a string content is one part). */
export function textPartsOf(message: ChatMessage): string[] {
  const content = message.content;
  if (typeof content === "string") return [content];
  if (Array.isArray(content)) {
    return content.map((part) => (typeof part === "object" && part && "text" in part ? String(part.text) : ""));
  }
  return [];
}

export function textOf(message: ChatMessage): string {
  return textPartsOf(message).join("");
}

/** optchat's volatile memory part (plugin/request/memory-message.ts): it leads the first kept user message. */
const CONTINUED = "optchat memory, continued:";

function isMemory(message: ChatMessage): boolean {
  return message.role === "user" && textOf(message).startsWith("optchat memory.");
}

/** The text of a user message without optchat's volatile memory part. */
function ownText(message: ChatMessage): string {
  return textPartsOf(message)
    .filter((part) => !part.startsWith(CONTINUED))
    .join("");
}

/** The last user message of a request, without optchat's memory part: the person's words the model answers. */
export function lastUserText(request: CapturedRequest): string {
  const users = messagesOf(request).filter((m) => m.role === "user");
  return users.length > 0 ? ownText(users[users.length - 1] as ChatMessage) : "";
}

/** Main (agent) requests whose last user message contains `marker`, in order. */
export function requestsFor(requests: readonly CapturedRequest[], marker: string): CapturedRequest[] {
  return requests.filter((r) => r.kind === "main" && lastUserText(r).includes(marker));
}

/** The stable memory message's text parts (head, shared block's opening and lines), or undefined. */
export function stableMemoryParts(request: CapturedRequest): string[] | undefined {
  const message = messagesOf(request).find(isMemory);
  return message ? textPartsOf(message) : undefined;
}

/** optchat's volatile memory part of a request (counters, session block, previous exchange), or undefined. */
export function volatileMemoryText(request: CapturedRequest): string | undefined {
  for (const message of messagesOf(request)) {
    if (message.role !== "user") continue;
    const part = textPartsOf(message).find((p) => p.startsWith(CONTINUED));
    if (part !== undefined) return part;
  }
  return undefined;
}

/**
 * optchat's text parts leading user messages, in order: the volatile part of the cache epoch's first turn, then the
 * shared updates of its later turns (docs/caching.md).
 */
export function continuedMemoryTexts(request: CapturedRequest): string[] {
  return messagesOf(request)
    .filter((m) => m.role === "user")
    .flatMap((m) => textPartsOf(m).filter((p) => p.startsWith(CONTINUED)));
}

/** The whole of optchat's injected memory in a request (stable message + the parts leading user messages), or undefined. */
export function memoryText(request: CapturedRequest): string | undefined {
  const stable = stableMemoryParts(request);
  if (!stable) return undefined;
  return stable.join("") + continuedMemoryTexts(request).join("");
}

/** The whole `<name …>…</name>` block in a text, or undefined. */
export function block(text: string | undefined, name: string): string | undefined {
  if (!text) return undefined;
  const start = text.indexOf(`<${name}`);
  const end = text.indexOf(`</${name}>`, start);
  return start >= 0 && end > start ? text.slice(start, end + name.length + 3) : undefined;
}

/** The session's own history in a memory text: its session block and its previous exchange. */
export function ownMemory(text: string | undefined): string {
  return `${block(text, "session_memory") ?? ""}${block(text, "previous_exchange") ?? ""}`;
}

/** Every text a request carries outside optchat's memory (system prompt excluded). */
export function textOutsideMemory(request: CapturedRequest): string {
  return messagesOf(request)
    .filter((m) => m.role !== "system" && !isMemory(m))
    .map((m) => `${ownText(m)}\n${(m.tool_calls ?? []).map((c) => c.function.arguments).join("\n")}`)
    .join("\n");
}

/** The tool results of a request, by tool call id. */
export function toolResults(request: CapturedRequest): Map<string, string> {
  const out = new Map<string, string>();
  for (const message of messagesOf(request)) {
    if (message.role === "tool" && message.tool_call_id) out.set(message.tool_call_id, textOf(message));
  }
  return out;
}

/**
 * The provider protocol (OpenAI chat completions): every assistant tool call is answered by a tool message with its
 * id before the next assistant or user message, and every tool message answers a call made just before it.
 * Returns the violations (empty when the request is valid).
 */
export function toolProtocolViolations(request: CapturedRequest): string[] {
  const problems: string[] = [];
  const messages = messagesOf(request);
  let open = new Set<string>();
  for (const [index, message] of messages.entries()) {
    if (message.role === "tool") {
      if (!message.tool_call_id || !open.has(message.tool_call_id)) {
        problems.push(
          `request ${request.index} message ${index}: tool result ${message.tool_call_id} has no open call`,
        );
      } else {
        open.delete(message.tool_call_id);
      }
      continue;
    }
    if (open.size > 0)
      problems.push(`request ${request.index} message ${index}: calls ${[...open].join(",")} unanswered`);
    open = new Set((message.tool_calls ?? []).map((call) => call.id));
  }
  // Calls of the last assistant message are what the model answers next only if it made them in this request.
  if (open.size > 0) problems.push(`request ${request.index}: calls ${[...open].join(",")} unanswered at the end`);
  return problems;
}
