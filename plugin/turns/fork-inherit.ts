/**
 * Forks in OpenCode 1.18.33 (docs/opencode-notes.md "Fork"): `POST /session/:id/fork` (or `opencode run --fork`)
 * creates a session without a parentID, titled "<title> (fork #N)", holding copies of the parent's messages with new
 * message and part ids, their times, finishes and errors kept; `chat.message` never runs for the copies. The copies are
 * therefore recognised by their content: at the child's first prompt, the messages before it are mapped to records
 * exactly as the live path maps messages (plugin/opencode/history.ts, plugin/opencode/messages.ts), and the memory service matches them
 * to the session whose first records they are (`memory.inheritHistory`). The child's history then starts with the
 * parent's, by reference; its copies are held by memory like any earlier message, so the transform replaces them.
 */
import type { IngestEvent } from "../../src/memory/index.js";
import { sessionHistory } from "../opencode/history.js";
import type { HostMessage } from "../opencode/messages.js";
import { recordEvents } from "../opencode/record-events.js";

/** OpenCode's title for a fork ("<title> (fork #1)"): the cheap sign that a session created here may hold copies. */
const FORK_TITLE = /\(fork #\d+\)$/;

export function looksLikeFork(title: string | undefined): boolean {
  return title !== undefined && FORK_TITLE.test(title);
}

export interface ForkCoordinates {
  readonly sessionId: string;
  readonly hostSessionId: string;
  readonly projectId: string;
  /** When a message carries no time (never seen in 1.18.33): the time the records are stamped with instead. */
  readonly fallbackAt: number;
}

/**
 * The ingest events of the messages OpenCode holds before the prompt `promptMessageId` (the copies, when the session
 * is a fork), as the plugin would have recorded them: finished messages only, each turn's records with its own ids.
 * Empty when the prompt is the session's first message.
 */
export function copiedHistoryEvents(
  transcript: readonly HostMessage[],
  promptMessageId: string,
  where: ForkCoordinates,
): IngestEvent[] {
  const at = transcript.findIndex((message) => message.info.id === promptMessageId);
  const before = transcript.slice(0, at < 0 ? transcript.length : at).filter((m) => m.info.id !== promptMessageId);
  if (before.length === 0) return [];
  return sessionHistory(before).turns.flatMap((turn) =>
    turn.messages.flatMap((message) =>
      recordEvents({ ...where, turnId: turn.turnId, messageId: message.messageId, at: message.at }, message.drafts),
    ),
  );
}
