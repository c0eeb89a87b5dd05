/**
 * The ingest events of one OpenCode message's records: its finalization keys (host session, message, part, revision
 * 0), time, tool fields and host attributes. The plugin's live ingestion (plugin/turns/session-memory.ts, ingestDrafts) and
 * `optchat import --opencode` (plugin/opencode/import.ts) must produce the very same keys, so that whichever comes
 * second finds every record already stored and duplicates nothing.
 */
import type { IngestEvent } from "../../src/memory/index.js";
import type { RecordDraft } from "./messages.js";

export interface MessageCoordinates {
  /** optchat's session id. */
  readonly sessionId: string;
  /** OpenCode's session id. */
  readonly hostSessionId: string;
  readonly turnId: string;
  /** The OpenCode message the drafts were made from. */
  readonly messageId: string;
  /** Epoch ms: the user message's creation, or the step's completion; `fallbackAt` when OpenCode gave none. */
  readonly at: number | undefined;
  readonly fallbackAt: number;
  /** The project scope id (projectScopeId). */
  readonly projectId: string;
}

export function recordEvents(where: MessageCoordinates, drafts: readonly RecordDraft[]): IngestEvent[] {
  const occurredAt = new Date(where.at ?? where.fallbackAt).toISOString();
  return drafts.map((draft) => ({
    sessionId: where.sessionId,
    turnId: where.turnId,
    kind: draft.kind,
    finalization: { hostSessionId: where.hostSessionId, messageId: where.messageId, partId: draft.partId, revision: 0 },
    occurredAt,
    content: draft.content,
    ...(draft.toolCallId ? { toolCallId: draft.toolCallId } : {}),
    ...(draft.toolName ? { toolName: draft.toolName } : {}),
    ...(draft.hostTruncated ? { hostTruncated: {} } : {}),
    projectId: where.projectId,
    attributes: { hostMessageId: where.messageId, hostPartId: draft.partId },
  }));
}
