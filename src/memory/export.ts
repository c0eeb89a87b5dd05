/**
 * `optchat export --jsonl`: sessions, turns and records written in the import format (docs/import.md), so that an
 * export imported into an empty database gives back every record byte for byte: the same kinds, times, tool fields,
 * host-truncation flags and payload bytes (as `text` when valid UTF-8, else as base64 `bytes`), in each turn's order.
 */
import { parseEventKey } from "../core/ids.js";
import type { Pool } from "../store/db.js";
import {
  type ExportSession,
  listExportSessions,
  listExportTurns,
  listTurnRecordsWithPayload,
} from "../store/export.js";
import { readPayloadBytes, type SourceRecord } from "../store/records.js";
import type { ImportRecord, ImportSessionLine, ImportTurnLine } from "./import.js";

/** Payloads up to this size come with their record's row; larger ones are read on their own, piece by piece. */
const INLINE_PAYLOAD_BYTES = 256 * 1024;

export interface ExportSelection {
  /** Every session of this scope (and their ancestors' session lines). */
  readonly scopeId?: string;
  /** This optchat session only (and its ancestors' session lines). */
  readonly sessionId?: string;
}

export interface ExportProgress {
  readonly sessions: number;
  readonly totalSessions: number;
  readonly turns: number;
  readonly records: number;
  readonly bytes: number;
}

export interface ExportSummary {
  readonly sessions: number;
  readonly turns: number;
  readonly records: number;
  /** Payload bytes written. */
  readonly bytes: number;
  /** What was not written, and why (the import format has no place for it). */
  readonly skipped: {
    /** Turns still running: an import needs a turn's outcome. Export again once they end. */
    readonly activeTurns: number;
    /** Finished turns without records: an import line needs at least one record. */
    readonly emptyTurns: number;
  };
}

/**
 * Writes the selection as import lines, one `write` per line (awaited, so a slow file or pipe holds the export back
 * rather than filling memory). Sessions come parents first; each session's turns in admission order.
 */
export async function exportJsonl(
  pool: Pool,
  selection: ExportSelection,
  write: (line: string) => Promise<void>,
  options: { onProgress?: (progress: ExportProgress) => void } = {},
): Promise<ExportSummary> {
  const { sessions, selected } = await listExportSessions(pool, selection);
  const fileIds = fileSessionIds(sessions);
  const counts = { sessions: 0, turns: 0, records: 0, bytes: 0, activeTurns: 0, emptyTurns: 0 };
  const progress = () =>
    options.onProgress?.({
      sessions: counts.sessions,
      totalSessions: sessions.length,
      turns: counts.turns,
      records: counts.records,
      bytes: counts.bytes,
    });
  for (const session of sessions) {
    await write(JSON.stringify(sessionLine(session, fileIds)));
    counts.sessions += 1;
    if (selected.has(session.sessionId)) await exportTurns(pool, session, fileIds, write, counts, progress);
    progress();
  }
  return {
    sessions: counts.sessions,
    turns: counts.turns,
    records: counts.records,
    bytes: counts.bytes,
    skipped: { activeTurns: counts.activeTurns, emptyTurns: counts.emptyTurns },
  };
}

async function exportTurns(
  pool: Pool,
  session: ExportSession,
  fileIds: Map<string, string>,
  write: (line: string) => Promise<void>,
  counts: { turns: number; records: number; bytes: number; activeTurns: number; emptyTurns: number },
  progress: () => void,
): Promise<void> {
  for (const turn of await listExportTurns(pool, session.sessionId, session.currentGeneration)) {
    if (turn.state === "active") {
      counts.activeTurns += 1;
      continue;
    }
    const rows = await listTurnRecordsWithPayload(
      pool,
      session.sessionId,
      session.currentGeneration,
      turn.turnId,
      INLINE_PAYLOAD_BYTES,
    );
    if (rows.length === 0) {
      counts.emptyTurns += 1;
      continue;
    }
    const records: ImportRecord[] = [];
    for (const { record, payload } of rows) {
      const bytes = payload ?? (await readPayloadBytes(pool, record.payloadHash, 0, record.payloadBytes));
      records.push(importRecord(record, bytes));
      counts.bytes += bytes.length;
    }
    const line: ImportTurnLine = {
      type: "turn",
      session: fileIds.get(session.sessionId) as string,
      id: turn.turnId,
      outcome: turn.state,
      records,
    };
    await write(JSON.stringify(line));
    counts.turns += 1;
    counts.records += records.length;
    progress();
  }
}

/**
 * The session's `id` in the file: its host session id, as an import registers it (host "import", that id). Two
 * selected sessions of different hosts with the same host id get their host as a prefix, since ids are unique in a file.
 */
function fileSessionIds(sessions: readonly ExportSession[]): Map<string, string> {
  const taken = new Set<string>();
  const ids = new Map<string, string>();
  for (const session of sessions) {
    let id = session.hostSessionId;
    if (taken.has(id)) id = `${session.host}:${session.hostSessionId}`;
    for (let n = 2; taken.has(id); n++) id = `${session.host}:${session.hostSessionId}:${n}`;
    taken.add(id);
    ids.set(session.sessionId, id);
  }
  return ids;
}

function sessionLine(session: ExportSession, fileIds: Map<string, string>): ImportSessionLine {
  const parent = session.parentSessionId ? fileIds.get(session.parentSessionId) : undefined;
  const id = fileIds.get(session.sessionId) as string;
  return {
    type: "session",
    id,
    // OpenCode's sessions say so, so that an import registers them as OpenCode's and a later `import --opencode` (or
    // the plugin) finds them instead of storing them twice (issue 40 item 6).
    ...(session.host === "opencode" && id === session.hostSessionId ? { host: "opencode" as const } : {}),
    project: session.projectId ?? session.scopeId.replace(/^project:/, ""),
    ...(session.title !== null ? { title: session.title } : {}),
    ...(session.scopeKind === "isolated" ? { sharing: "isolated" as const } : {}),
    ...(session.scopeKind === "profile" ? { scope: session.scopeId } : {}),
    ...(parent !== undefined ? { parent } : {}),
  };
}

/**
 * A record as an import record. Its `id` is the host message it was finalized from (with its part, and its revision
 * when above 0), so it is unique within the session and, for a session that came from an import, the same id again.
 */
function importRecord(record: SourceRecord, payload: Buffer): ImportRecord {
  const key = parseEventKey(record.eventKey);
  const id = key
    ? `${key.messageId}${key.partId !== undefined ? `/${key.partId}` : ""}${key.revision > 0 ? `#${key.revision}` : ""}`
    : record.eventKey;
  return {
    id,
    kind: record.kind,
    at: record.occurredAt.toISOString(),
    ...(record.validUtf8 ? { text: payload.toString("utf8") } : { bytes: payload.toString("base64") }),
    ...(record.toolCallId !== null ? { toolCallId: record.toolCallId } : {}),
    ...(record.toolName !== null ? { toolName: record.toolName } : {}),
    ...(record.hostTruncated ? { hostTruncated: true } : {}),
    ...(record.hostOriginalBytes !== null ? { hostOriginalBytes: record.hostOriginalBytes } : {}),
  } as ImportRecord;
}
