/**
 * V2's prompts and bus events as ingest events (pure but for the clock passed in). Finalization keys: V2's session id,
 * its message id (the user message, or the step's assistant message), and a part key per text ordinal or tool call, so
 * that a replayed event writes nothing twice.
 */
import type { IngestEvent } from "../../src/memory/index.js";
import type { V2Event, V2PromptInput } from "./v2-api.js";

export function v2Records(now: () => Date = () => new Date()) {
  /** Tool names by call id: V2 names the tool in `session.tool.input.started`, not in `session.tool.called`. */
  const toolNames = new Map<string, string>();
  const base = (sessionId: string, turnId: string, hostSessionId: string, messageId: string, partId?: string) => ({
    sessionId,
    turnId,
    occurredAt: now().toISOString(),
    finalization: { hostSessionId, messageId, ...(partId ? { partId } : {}) },
  });
  return {
    user(sessionId: string, input: V2PromptInput): IngestEvent {
      return {
        ...base(sessionId, input.messageID, input.sessionID, input.messageID, "text"),
        kind: "user",
        content: input.prompt.text,
      };
    },
    fromEvent(sessionId: string, turnId: string, event: V2Event): IngestEvent | undefined {
      const data = event.data ?? {};
      const host = String(data.sessionID);
      const message = String(data.assistantMessageID ?? "");
      const callId = typeof data.id === "string" ? data.id : undefined;
      if (event.type === "session.tool.input.started" && callId) {
        toolNames.set(callId, String(data.name ?? "tool"));
        return undefined;
      }
      if (!message) return undefined;
      if (event.type === "session.text.ended" && typeof data.text === "string" && data.text.length > 0) {
        return {
          ...base(sessionId, turnId, host, message, `text-${data.ordinal ?? 0}`),
          kind: "assistant",
          content: data.text,
        };
      }
      if (event.type === "session.tool.called" && callId) {
        return {
          ...base(sessionId, turnId, host, message, `call-${callId}`),
          kind: "tool_call",
          toolCallId: callId,
          toolName: toolNames.get(callId) ?? "tool",
          content: JSON.stringify(data.input ?? {}),
        };
      }
      if ((event.type === "session.tool.success" || event.type === "session.tool.failed") && callId) {
        return {
          ...base(sessionId, turnId, host, message, `result-${callId}`),
          kind: "tool_result",
          toolCallId: callId,
          toolName: toolNames.get(callId) ?? "tool",
          content: toolResultText(data),
          ...(event.type === "session.tool.failed" ? { attributes: { error: true } } : {}),
        };
      }
      return undefined;
    },
  };
}

/** A tool's answer as stored: its text parts joined, else its error (the same for live events and fork copies). */
export function toolResultText(data: Record<string, unknown>): string {
  const content = data.content;
  if (Array.isArray(content)) {
    return content
      .map((part) =>
        part && typeof part === "object" && "text" in part
          ? String((part as { text: unknown }).text)
          : JSON.stringify(part),
      )
      .join("\n");
  }
  if (typeof data.error === "string") return data.error;
  return JSON.stringify(content ?? data.error ?? "");
}
