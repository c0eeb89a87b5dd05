/**
 * Where a V2 session comes from, asked of V2 when the session is first opened in memory (docs/opencode-v2-notes.md
 * "Fork and subagents"): a subagent's session names its parent (`parentID`: stored with it, never published), and a
 * fork (`opencode run --session <id> --fork`) holds copies of its parent's messages with new ids. The copies are mapped
 * to ingest events exactly as the live events are (records.ts), so the memory service matches them to the parent's
 * records by content (`memory.inheritHistory`) and the fork's history starts with the parent's, by reference.
 */
import type { IngestEvent } from "../../src/memory/index.js";
import { toolResultText } from "./records.js";
import type { V2Context, V2StoredMessage, V2ToolPart } from "./v2-api.js";

export interface V2Lineage {
  /** V2's id of the parent session (a subagent's). */
  parentHostSessionId?: string;
  /** The fork's copied messages (empty for any other session). */
  copies: V2StoredMessage[];
}

/** Asks V2 about the session; a V2 without these calls, or a failing one, gives a plain session. */
export async function lineageOf(ctx: V2Context, hostSessionId: string): Promise<V2Lineage> {
  const info = await ctx.session.get?.({ sessionID: hostSessionId });
  const copies = info?.fork?.sessionID ? ((await ctx.session.context?.({ sessionID: hostSessionId })) ?? []) : [];
  return { ...(info?.parentID ? { parentHostSessionId: info.parentID } : {}), copies };
}

/**
 * The copies as the live path would have recorded them: each user message opens a turn (its id), an assistant
 * message gives its tool calls and results and its texts (part keys as records.ts: `call-`, `result-`, `text-N`).
 * Unfinished tool calls and empty texts are left out; the prompt being admitted is not among the copies yet.
 */
export function copiedEvents(
  sessionId: string,
  hostSessionId: string,
  copies: readonly V2StoredMessage[],
  at: Date,
): IngestEvent[] {
  const events: IngestEvent[] = [];
  let turnId: string | undefined;
  for (const message of copies) {
    if (!message.id) continue;
    const messageId = message.id;
    const base = (partId: string, createdAt?: number) => ({
      sessionId,
      turnId: turnId ?? messageId,
      occurredAt: new Date(createdAt ?? at.getTime()).toISOString(),
      finalization: { hostSessionId, messageId, partId },
    });
    if (message.type === "user" && "text" in message && typeof message.text === "string") {
      turnId = messageId;
      events.push({ ...base("text", message.time?.created), kind: "user", content: message.text });
      continue;
    }
    if (message.type !== "assistant" || !("content" in message) || turnId === undefined) continue;
    let ordinal = 0;
    for (const part of message.content ?? []) {
      if (part.type === "text" && "text" in part) {
        const text = part.text;
        if (text.length > 0)
          events.push({ ...base(`text-${ordinal}`, message.time?.created), kind: "assistant", content: text });
        ordinal += 1;
      }
      if (part.type === "tool")
        events.push(...toolEvents(part as V2ToolPart, (key) => base(key, message.time?.created)));
    }
  }
  return events;
}

function toolEvents(part: V2ToolPart, base: (partId: string) => Omit<IngestEvent, "kind" | "content">): IngestEvent[] {
  const status = part.state?.status;
  if (status !== "completed" && status !== "error") return [];
  const call = {
    ...base(`call-${part.id}`),
    kind: "tool_call",
    toolCallId: part.id,
    toolName: part.name,
    content: JSON.stringify(part.state?.input ?? {}),
  } as IngestEvent;
  const result = {
    ...base(`result-${part.id}`),
    kind: "tool_result",
    toolCallId: part.id,
    toolName: part.name,
    content: toolResultText({ content: part.state?.content, error: part.state?.error }),
    ...(status === "error" ? { attributes: { error: true } } : {}),
  } as IngestEvent;
  return [call, result];
}
