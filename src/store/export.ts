// Reads for `optchat export --jsonl` (src/memory/export.ts): whole sessions in the order an import recreates them.
import type { Queryable } from "./db.js";
import { RECORD_COLUMNS, type RecordRow, type SourceRecord, toSourceRecord } from "./records.js";
import { type ScopeKind, SESSION_COLUMNS, type Session, type SessionRow, toSession } from "./sessions.js";
import type { TurnState } from "./turns.js";

/** A session to export, with its scope's kind (an import recreates a profile or isolated scope from it). */
export interface ExportSession extends Session {
  readonly scopeKind: ScopeKind;
}

/**
 * The sessions selected (one, or all of a scope, or all), plus their ancestors (an import declares a parent before
 * its subagent), each ancestor before its descendants, otherwise in creation order.
 */
export async function listExportSessions(
  db: Queryable,
  selection: { scopeId?: string; sessionId?: string },
): Promise<{ sessions: ExportSession[]; selected: Set<string> }> {
  const result = await db.query<SessionRow & { kind: ScopeKind; selected: boolean }>(
    `WITH RECURSIVE chosen AS (
       SELECT s.session_id, s.parent_session_id, true AS selected FROM optchat.sessions s
        WHERE ($1::text IS NULL OR s.scope_id = $1::text) AND ($2::text IS NULL OR s.session_id = $2::text)
          AND s.deleted_at IS NULL
       UNION
       SELECT p.session_id, p.parent_session_id, false FROM optchat.sessions p JOIN chosen c ON c.parent_session_id = p.session_id
     ), depth AS (
       SELECT s.session_id, 0 AS depth FROM optchat.sessions s WHERE s.parent_session_id IS NULL
       UNION ALL
       SELECT s.session_id, d.depth + 1 FROM optchat.sessions s JOIN depth d ON s.parent_session_id = d.session_id
     ), picked AS (
       SELECT c.session_id, bool_or(c.selected) AS selected FROM chosen c GROUP BY c.session_id
     )
     SELECT ${SESSION_COLUMNS.split(", ")
       .map((column) => `s.${column}`)
       .join(", ")}, sc.kind, picked.selected
       FROM picked
       JOIN optchat.sessions s ON s.session_id = picked.session_id
       JOIN optchat.scopes sc ON sc.scope_id = s.scope_id
       LEFT JOIN depth d ON d.session_id = s.session_id
      ORDER BY coalesce(d.depth, 0), s.created_at, s.session_id`,
    [selection.scopeId ?? null, selection.sessionId ?? null],
  );
  return {
    sessions: result.rows.map((row) => ({ ...toSession(row), scopeKind: row.kind })),
    selected: new Set(result.rows.filter((row) => row.selected).map((row) => row.session_id)),
  };
}

export interface ExportTurn {
  readonly turnId: string;
  readonly state: TurnState;
}

/** A session generation's turns in admission order (the order an import admits them). */
export async function listExportTurns(db: Queryable, sessionId: string, generation: number): Promise<ExportTurn[]> {
  const result = await db.query<{ turn_id: string; state: TurnState }>(
    `SELECT turn_id, state FROM optchat.turns WHERE session_id = $1::text AND generation = $2::int
      ORDER BY admission_seq, turn_id`,
    [sessionId, generation],
  );
  return result.rows.map((row) => ({ turnId: row.turn_id, state: row.state }));
}

/**
 * One turn's records in seq order, each with its payload when it is at most `inlineBytes` (null otherwise: read it
 * with readPayloadBytes, so a 64 MiB payload is never parsed from one hex answer).
 */
export async function listTurnRecordsWithPayload(
  db: Queryable,
  sessionId: string,
  generation: number,
  turnId: string,
  inlineBytes: number,
): Promise<{ record: SourceRecord; payload: Buffer | null }[]> {
  const result = await db.query<RecordRow & { content: Buffer | null }>(
    `SELECT ${RECORD_COLUMNS}, CASE WHEN r.payload_bytes <= $4::bigint THEN b.content END AS content
       FROM optchat.records r JOIN optchat.blobs b ON b.hash = r.payload_hash
      WHERE r.session_id = $1::text AND r.generation = $2::int AND r.turn_id = $3::text
      ORDER BY r.seq`,
    [sessionId, generation, turnId, inlineBytes],
  );
  return result.rows.map((row) => ({ record: toSourceRecord(row), payload: row.content }));
}
