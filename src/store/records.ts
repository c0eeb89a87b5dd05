import { OptchatError } from "../core/errors.js";
import type { Queryable } from "./db.js";

/** The unique constraint on records.event_key (named in migrations/008_named_constraints.sql). */
export const EVENT_KEY_CONSTRAINT = "records_event_key_unique";

export type RecordKind = "user" | "assistant" | "tool_call" | "tool_result" | "report" | "note";

/** What a record says of itself, the same before sealing (`RecordToSeal`) and after (`SourceRecord`). */
export interface RecordFacts {
  readonly sessionId: string;
  readonly eventKey: string;
  readonly turnId: string;
  readonly kind: RecordKind;
  readonly occurredAt: Date;
  readonly payloadHash: Buffer;
  readonly validUtf8: boolean;
  readonly toolCallId: string | null;
  readonly toolName: string | null;
  readonly hostTruncated: boolean;
  readonly hostOriginalBytes: number | null;
  readonly projectId: string | null;
  readonly worktreeId: string | null;
  readonly commitId: string | null;
  readonly attributes: Readonly<Record<string, unknown>>;
}

/** One final record, validated and hashed, ready to seal. */
export interface RecordToSeal extends RecordFacts {
  /** undefined: the session's current generation. */
  readonly generation: number | undefined;
  readonly stageKey: string;
  readonly payload: Buffer;
  /** The record's search vector as a tsvector literal (src/core/tokenize.ts). */
  readonly search: string;
}

export type SealOutcome =
  | {
      readonly status: "sealed" | "duplicate";
      readonly eventKey: string;
      readonly sessionId: string;
      readonly generation: number;
      readonly seq: number;
    }
  | {
      readonly status: "conflict";
      readonly eventKey: string;
      readonly sessionId: string;
      readonly generation: number;
      readonly seq: number;
      readonly conflictId: number;
    };

/** A not-yet-final message or part: keep its latest content so a crash loses nothing. */
export interface ItemToStage {
  readonly stageKey: string;
  readonly sessionId: string;
  readonly generation: number | undefined;
  readonly turnId: string;
  readonly kind: RecordKind;
  readonly revision: number;
  readonly payload: Buffer;
}

export type StageOutcome = "staged" | "already_sealed" | "stale_revision";

export async function stageItem(db: Queryable, item: ItemToStage): Promise<StageOutcome> {
  const sealed = await db.query("SELECT 1 FROM optchat.records WHERE stage_key = $1::text LIMIT 1", [item.stageKey]);
  if (sealed.rowCount) return "already_sealed"; // a late delta after the final: the record is immutable
  const result = await db.query(
    `INSERT INTO optchat.staged_items (stage_key, session_id, generation, turn_id, kind, revision, content)
     SELECT $1::text, s.session_id, coalesce($3::int, s.current_generation), $4::text, $5::text, $6::int, $7::bytea
       FROM optchat.sessions s WHERE s.session_id = $2::text AND s.deleted_at IS NULL
     ON CONFLICT (stage_key) DO UPDATE
       SET content = excluded.content, revision = excluded.revision, turn_id = excluded.turn_id, updated_at = now()
       WHERE optchat.staged_items.revision <= excluded.revision
     RETURNING stage_key`,
    [item.stageKey, item.sessionId, item.generation ?? null, item.turnId, item.kind, item.revision, item.payload],
  );
  if (result.rowCount) return "staged";
  // A forgotten session (migration 010) takes nothing new, staged or sealed: it is not found.
  const session = await db.query("SELECT 1 FROM optchat.sessions WHERE session_id = $1::text AND deleted_at IS NULL", [
    item.sessionId,
  ]);
  if (!session.rowCount) {
    throw new OptchatError(
      "SESSION_NOT_FOUND",
      `No session ${item.sessionId}: register it with openSession before ingesting`,
      {
        field: "sessionId",
        sessionId: item.sessionId,
      },
    );
  }
  return "stale_revision";
}

export interface RecordRow {
  session_id: string;
  generation: number;
  seq: number;
  event_key: string;
  turn_id: string;
  kind: RecordKind;
  occurred_at: Date;
  sealed_at: Date;
  payload_hash: Buffer;
  payload_bytes: number;
  valid_utf8: boolean;
  tool_call_id: string | null;
  tool_name: string | null;
  host_truncated: boolean;
  host_original_bytes: number | null;
  project_id: string | null;
  worktree_id: string | null;
  commit_id: string | null;
  attributes: Record<string, unknown>;
}

/** A sealed record as stored. */
export interface SourceRecord extends RecordFacts {
  readonly generation: number;
  readonly seq: number;
  readonly sealedAt: Date;
  readonly payloadBytes: number;
}

export function toSourceRecord(row: RecordRow): SourceRecord {
  return {
    sessionId: row.session_id,
    generation: row.generation,
    seq: row.seq,
    eventKey: row.event_key,
    turnId: row.turn_id,
    kind: row.kind,
    occurredAt: row.occurred_at,
    sealedAt: row.sealed_at,
    payloadHash: row.payload_hash,
    payloadBytes: row.payload_bytes,
    validUtf8: row.valid_utf8,
    toolCallId: row.tool_call_id,
    toolName: row.tool_name,
    hostTruncated: row.host_truncated,
    hostOriginalBytes: row.host_original_bytes,
    projectId: row.project_id,
    worktreeId: row.worktree_id,
    commitId: row.commit_id,
    attributes: row.attributes,
  };
}

export const RECORD_COLUMNS = `r.session_id, r.generation, r.seq, r.event_key, r.turn_id, r.kind, r.occurred_at, r.sealed_at,
  r.payload_hash, r.payload_bytes, b.valid_utf8, r.tool_call_id, r.tool_name, r.host_truncated, r.host_original_bytes,
  r.project_id, r.worktree_id, r.commit_id, r.attributes`;

/** Records of one session generation in seq order, from `fromSeq`, at most `limit` (payloads not included). */
export async function listRecords(
  db: Queryable,
  sessionId: string,
  generation: number,
  fromSeq = 0,
  limit = 1000,
): Promise<SourceRecord[]> {
  const result = await db.query<RecordRow>(
    `SELECT ${RECORD_COLUMNS} FROM optchat.records r JOIN optchat.blobs b ON b.hash = r.payload_hash
      WHERE r.session_id = $1::text AND r.generation = $2::int AND r.seq >= $3::bigint
      ORDER BY r.seq LIMIT $4::int`,
    [sessionId, generation, fromSeq, limit],
  );
  return result.rows.map(toSourceRecord);
}

export async function findRecord(
  db: Queryable,
  sessionId: string,
  generation: number,
  seq: number,
): Promise<SourceRecord | undefined> {
  const rows = await listRecords(db, sessionId, generation, seq, 1);
  const first = rows[0];
  return first && first.seq === seq ? first : undefined;
}

/**
 * Bytes of a payload transferred per statement. A bytea arrives as hex text (twice its size) that the driver parses in
 * one task: a 4 MiB zoom page read in one statement blocked the event loop for about 0.3 s on a loaded machine.
 */
export const PAYLOAD_READ_BYTES = 1024 * 1024;

/**
 * `length` bytes of a payload from byte `offset` (0-based); fewer at the end. Read in statements of at most
 * {@link PAYLOAD_READ_BYTES} (a blob never changes, so the pieces belong together).
 */
export async function readPayloadBytes(
  db: Queryable,
  payloadHash: Buffer,
  offset: number,
  length: number,
): Promise<Buffer> {
  const pieces: Buffer[] = [];
  for (let at = 0; at === 0 || at < length; at += PAYLOAD_READ_BYTES) {
    const want = Math.min(PAYLOAD_READ_BYTES, length - at);
    const piece = await readPayloadPiece(db, payloadHash, offset + at, want);
    pieces.push(piece);
    if (piece.length < want) break;
  }
  return pieces.length === 1 ? (pieces[0] as Buffer) : Buffer.concat(pieces);
}

async function readPayloadPiece(db: Queryable, payloadHash: Buffer, offset: number, length: number): Promise<Buffer> {
  const result = await db.query<{ chunk: Buffer }>(
    "SELECT substring(content FROM $2::int + 1 FOR $3::int) AS chunk FROM optchat.blobs WHERE hash = $1::bytea",
    [payloadHash, offset, length],
  );
  const row = result.rows[0];
  if (!row) throw new Error(`readPayloadBytes: blob ${payloadHash.toString("hex")} is missing (integrity error)`);
  return row.chunk;
}

/**
 * A record with its whole payload, in one round trip; with `maxBytes`, the payload only when it is at most that many
 * bytes (null otherwise), so a caller that needs only small payloads never transfers a large one.
 */
export async function readRecordWithPayload(
  db: Queryable,
  sessionId: string,
  generation: number,
  seq: number,
  maxBytes?: number,
): Promise<{ record: SourceRecord; payload: Buffer | null } | undefined> {
  const result = await db.query<RecordRow & { content: Buffer | null }>(
    `SELECT ${RECORD_COLUMNS},
            CASE WHEN $4::bigint IS NULL OR octet_length(b.content) <= $4::bigint THEN b.content END AS content
       FROM optchat.records r JOIN optchat.blobs b ON b.hash = r.payload_hash
      WHERE r.session_id = $1::text AND r.generation = $2::int AND r.seq = $3::bigint`,
    [sessionId, generation, seq, maxBytes ?? null],
  );
  const row = result.rows[0];
  return row ? { record: toSourceRecord(row), payload: row.content } : undefined;
}

/** Earliest and latest host timestamps of records [start, end) of a session generation. */
export async function recordTimeSpan(
  db: Queryable,
  sessionId: string,
  generation: number,
  start: number,
  end: number,
): Promise<{ first: Date; last: Date } | undefined> {
  const result = await db.query<{ first: Date | null; last: Date | null }>(
    `SELECT min(occurred_at) AS first, max(occurred_at) AS last FROM optchat.records
      WHERE session_id = $1::text AND generation = $2::int AND seq >= $3::bigint AND seq < $4::bigint`,
    [sessionId, generation, start, end],
  );
  const row = result.rows[0];
  return row?.first && row.last ? { first: row.first, last: row.last } : undefined;
}

/** The user and assistant messages of a turn, whole, in order (the previous exchange of seed 000 §7). */
export async function readTurnMessages(
  db: Queryable,
  sessionId: string,
  generation: number,
  turnId: string,
): Promise<{ seq: number; kind: RecordKind; payload: Buffer }[]> {
  const result = await db.query<{ seq: number; kind: RecordKind; content: Buffer }>(
    `SELECT r.seq, r.kind, b.content FROM optchat.records r JOIN optchat.blobs b ON b.hash = r.payload_hash
      WHERE r.session_id = $1::text AND r.generation = $2::int AND r.turn_id = $3::text AND r.kind IN ('user', 'assistant')
      ORDER BY r.seq`,
    [sessionId, generation, turnId],
  );
  return result.rows.map((row) => ({ seq: Number(row.seq), kind: row.kind, payload: row.content }));
}

/**
 * The highest sealed seq of each host message of a session's generation, from the `hostMessageId` attribute the host
 * adapter stores on every record (it decides which native messages the memory blocks may replace).
 */
export async function hostMessageSeqs(
  db: Queryable,
  sessionId: string,
  generation: number,
): Promise<Map<string, number>> {
  const result = await db.query<{ message_id: string; max_seq: number }>(
    `SELECT attributes->>'hostMessageId' AS message_id, max(seq) AS max_seq FROM optchat.records
      WHERE session_id = $1::text AND generation = $2::int AND attributes ? 'hostMessageId'
      GROUP BY 1`,
    [sessionId, generation],
  );
  return new Map(result.rows.map((row) => [row.message_id, Number(row.max_seq)]));
}
