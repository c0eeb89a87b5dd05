/**
 * OpenCode 1.18.33 message and part shapes, as the runtime delivers them (v2-shaped: see docs/opencode-notes.md), and
 * the pure mappings from them to optchat records, turn outcomes and the replaced request. Only the fields read here
 * are declared; everything else passes through untouched.
 */

export interface HostMessageInfo {
  readonly id: string;
  readonly sessionID: string;
  readonly role: string;
  readonly time?: { readonly created?: number; readonly completed?: number };
  readonly parentID?: string;
  readonly finish?: string;
  readonly error?: { readonly name?: string; readonly data?: { readonly message?: string } };
  readonly summary?: unknown;
  readonly mode?: string;
  readonly agent?: string;
  readonly model?: { readonly providerID?: string; readonly modelID?: string };
  readonly providerID?: string;
  readonly modelID?: string;
}

export interface HostToolState {
  readonly status: string;
  readonly input?: unknown;
  readonly output?: string;
  readonly error?: string;
  readonly metadata?: Readonly<Record<string, unknown>>;
}

export interface HostPart {
  readonly id: string;
  readonly messageID: string;
  readonly sessionID: string;
  readonly type: string;
  readonly text?: string;
  readonly synthetic?: boolean;
  readonly ignored?: boolean;
  readonly time?: { readonly start?: number; readonly end?: number };
  readonly tool?: string;
  readonly callID?: string;
  readonly state?: HostToolState;
  readonly filename?: string;
  readonly mime?: string;
  readonly url?: string;
}

export interface HostMessage {
  info: HostMessageInfo;
  parts: HostPart[];
}

/** One record to seal, before the adapter adds the session, turn and host coordinates. */
export interface RecordDraft {
  readonly kind: "user" | "assistant" | "tool_call" | "tool_result" | "note";
  readonly partId: string;
  readonly content: string;
  readonly toolCallId?: string;
  readonly toolName?: string;
  readonly hostTruncated?: boolean;
}

/** Text the harness injects as user-role content; never the user's request (seed 004, defect 3). */
const HARNESS_TEXT = [
  /<system-reminder>[\s\S]*?<\/system-reminder>/g,
  /^The server restarted while you were working.*$/gm,
  /^Continue if you have next steps, or stop and ask for clarification.*$/gm,
];

/** The user's own words in a user message: synthetic and ignored parts and harness notices removed. */
export function requestQuery(parts: readonly HostPart[]): string {
  let text = parts
    .filter((part) => part.type === "text" && !part.synthetic && !part.ignored)
    .map((part) => part.text ?? "")
    .join("\n\n");
  for (const pattern of HARNESS_TEXT) text = text.replace(pattern, " ");
  return text
    .replace(/[ \t]+\n/g, "\n")
    .trim()
    .slice(0, 100_000);
}

/** True when every text part of the message was added by the harness, not typed by the user. */
export function isSyntheticUserMessage(message: HostMessage): boolean {
  const texts = message.parts.filter((part) => part.type === "text");
  return texts.length > 0 && texts.every((part) => part.synthetic === true);
}

/** The whole user message, verbatim (synthetic parts included: they were sent to the model). */
export function userRecordDrafts(message: { readonly id: string }, parts: readonly HostPart[]): RecordDraft[] {
  const pieces: string[] = [];
  for (const part of parts) {
    if (part.type === "text" && part.text) pieces.push(part.text);
    else if (part.type === "file") pieces.push(`[file ${part.filename ?? part.url ?? "?"} ${part.mime ?? ""}]`.trim());
    else if (part.type === "compaction") pieces.push("[OpenCode native compaction requested]");
  }
  return pieces.length > 0 ? [{ kind: "user", partId: `${message.id}:user`, content: pieces.join("\n\n") }] : [];
}

/**
 * The records of a finished assistant message, in part order: text parts, then for each finished tool part its call
 * and its result (so a pair is never split), and a note when the request failed. Reasoning, step markers and
 * snapshots are not stored (hidden reasoning is never kept).
 */
export function assistantRecordDrafts(info: HostMessageInfo, parts: readonly HostPart[]): RecordDraft[] {
  const nativeSummary = isNativeSummary(info);
  const drafts: RecordDraft[] = [];
  for (const part of parts) {
    if (part.type === "text" && part.text && part.text.length > 0) {
      drafts.push(
        nativeSummary
          ? { kind: "note", partId: part.id, content: `[OpenCode native compaction summary]\n${part.text}` }
          : { kind: "assistant", partId: part.id, content: part.text },
      );
    } else if (
      part.type === "tool" &&
      part.state &&
      (part.state.status === "completed" || part.state.status === "error")
    ) {
      const callId = part.callID ?? part.id;
      const tool = part.tool ?? "unknown";
      drafts.push({
        kind: "tool_call",
        partId: `${part.id}:call`,
        content: JSON.stringify({ tool, input: part.state.input ?? null }),
        toolCallId: callId,
        toolName: tool,
      });
      const truncated = part.state.metadata?.truncated === true;
      drafts.push({
        kind: "tool_result",
        partId: `${part.id}:result`,
        content:
          part.state.status === "error" ? `error: ${part.state.error ?? "(no message)"}` : (part.state.output ?? ""),
        toolCallId: callId,
        toolName: tool,
        ...(truncated ? { hostTruncated: true } : {}),
      });
    }
  }
  if (info.error) {
    drafts.push({
      kind: "note",
      partId: `${info.id}:error`,
      content: `The model request failed: ${info.error.name ?? "error"}${info.error.data?.message ? `: ${info.error.data.message}` : ""}`,
    });
  }
  return drafts;
}

export type StepOutcome =
  /** The message is not final yet. */
  | { readonly final: false }
  /** Final, and the turn goes on (tool calls, or an overflow that OpenCode answers by compacting and continuing). */
  | { readonly final: true; readonly terminal: false }
  | { readonly final: true; readonly terminal: true; readonly outcome: "completed" | "interrupted" | "failed" };

/**
 * What a finished assistant message says about its turn (OpenCode 1.18.33 facts §1 "Which event means final"):
 * `time.completed` marks it final; an abort is interrupted, any other error failed; a finish other than tool-calls
 * ends the turn; no finish and no error (a context overflow) continues.
 */
export function stepOutcome(info: HostMessageInfo): StepOutcome {
  if (info.time?.completed === undefined) return { final: false };
  // A native compaction summary finishes with "stop" but the turn goes on (OpenCode continues after it).
  if (isNativeSummary(info)) return { final: true, terminal: false };
  if (info.error) {
    const aborted = info.error.name === "MessageAbortedError";
    return { final: true, terminal: true, outcome: aborted ? "interrupted" : "failed" };
  }
  // 1.18.33's loop goes on after "tool-calls" and "unknown" (a provider that sends no finish reason).
  if (info.finish && info.finish !== "tool-calls" && info.finish !== "unknown") {
    return { final: true, terminal: true, outcome: "completed" };
  }
  return { final: true, terminal: false };
}

export function isNativeSummary(info: HostMessageInfo): boolean {
  return info.summary === true || info.mode === "compaction" || info.agent === "compaction";
}

/**
 * True when a message holds nothing optchat stores (an assistant step with only reasoning or step markers, the empty
 * message a killed process leaves behind, a user message made only of subtask parts): memory covers it trivially.
 */
export function holdsNothingToStore(message: HostMessage): boolean {
  if (message.info.role === "user") return userRecordDrafts(message.info, message.parts).length === 0;
  return assistantRecordDrafts(message.info, message.parts).length === 0;
}

/** The text the model sees of a message, for the token estimate of the active transcript. */
export function messageText(message: HostMessage): string {
  let text = "";
  for (const part of message.parts) {
    if (part.type === "text" || part.type === "reasoning") text += `${part.text ?? ""}\n`;
    else if (part.type === "tool") {
      text += `${part.tool ?? ""} ${JSON.stringify(part.state?.input ?? null)}\n`;
      text += `${part.state?.output ?? part.state?.error ?? ""}\n`;
    }
  }
  return text;
}

/**
 * How many leading messages the memory blocks may replace: the longest prefix whose every message is sealed entirely
 * below the turn's own boundary (its records are what the session memory summarizes). A message the memory does not
 * hold (a fork's copies, one ingested by nobody, the current turn) ends the prefix, so nothing is ever dropped that the
 * blocks do not cover. A message with nothing to store is covered whatever its position.
 */
export function replaceablePrefix(
  messages: readonly HostMessage[],
  sealedSeq: (messageId: string) => number | undefined,
  boundary: number,
): number {
  let count = 0;
  for (const message of messages) {
    const seq = sealedSeq(message.info.id);
    if (seq !== undefined ? seq < boundary : holdsNothingToStore(message)) count += 1;
    else break;
  }
  return count;
}

/** The index of the last user message typed by the user (not a harness continuation), or -1. */
export function lastRequestIndex(messages: readonly HostMessage[]): number {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i] as HostMessage;
    if (message.info.role === "user" && !isSyntheticUserMessage(message)) return i;
  }
  return -1;
}

// The retry triggers live in their own module: the plugin's main thread (thread-bridge.ts) strips them too.
export { withoutRetryTriggers, wouldBeRetried } from "../base/retry-triggers.js";
