import { OptchatError } from "../core/errors.js";
import type { Queryable } from "./db.js";

export type RecordKind = "user" | "assistant" | "tool_call" | "tool_result" | "report" | "note";

/** One final record, validated and hashed, ready to seal. */
export interface RecordToSeal {
  readonly sessionId: string;
  /** undefined: the session's current generation. */
  readonly generation: number | undefined;
  readonly eventKey: string;
  readonly stageKey: string;
  readonly turnId: string;
  readonly kind: RecordKind;
  readonly occurredAt: Date;
  readonly payload: Buffer;
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

interface ExistingRow {
  event_key: string;
  session_id: string;
  generation: number;
  seq: number;
  payload_hash: Buffer;
  kind: string;
  turn_id: string;
  tool_call_id: string | null;
}

/** Same finalization, same content: a re-delivery. Anything else under the same key is a conflict. */
function sameContent(row: ExistingRow, item: RecordToSeal): boolean {
  return (
    row.payload_hash.equals(item.payloadHash) &&
    row.kind === item.kind &&
    row.session_id === item.sessionId &&
    row.turn_id === item.turnId &&
    row.tool_call_id === item.toolCallId
  );
}

function groupKey(sessionId: string, generation: number): string {
  return `${sessionId}\u0000${generation}`;
}

/**
 * Seals final records inside the caller's transaction (READ COMMITTED). One statement locks the generation rows the
 * batch writes to, in sorted order (so concurrent batches cannot deadlock on them), and looks the keys up: a
 * re-delivery is reported as a duplicate and allocates nothing; a different content under a sealed key is recorded in
 * ingest_conflicts and reported as a conflict; new records get consecutive seqs.
 *
 * The lookup sees the snapshot taken before the statement waited for the locks, so a twin of the same key sealed by
 * the writer we waited for is not seen; inserting it again then fails on records.event_key, and the caller runs the
 * transaction again (retryOnTwinInsert in src/memory/service.ts), which sees the twin and reports a duplicate. That
 * race is rare (two deliveries of one finalization at the same moment); a separate lookup after the lock would cost
 * every ingest a round trip (issue 9 item 6).
 */
export async function sealRecords(db: Queryable, items: readonly RecordToSeal[]): Promise<SealOutcome[]> {
  const outcomes: (SealOutcome | undefined)[] = new Array(items.length);
  const { sealed, ...locked } = await lockGenerations(db, items);
  await allocateAndInsert(db, items, sealed, locked, outcomes);

  const conflicts: { index: number; row: ExistingRow }[] = [];
  items.forEach((item, index) => {
    if (outcomes[index]) return;
    const row = sealed.get(item.eventKey) ?? sealedInBatch(items, outcomes, item);
    if (!row) throw new Error(`sealRecords: ${item.eventKey} neither sealed nor allocated`);
    if (sameContent(row, item)) {
      outcomes[index] = {
        status: "duplicate",
        eventKey: row.event_key,
        sessionId: row.session_id,
        generation: row.generation,
        seq: row.seq,
      };
    } else {
      conflicts.push({ index, row });
    }
  });
  if (conflicts.length > 0) {
    const recorded = await db.query<{ conflict_id: number }>(
      `INSERT INTO optchat.ingest_conflicts (event_key, session_id, existing_hash, offered_hash, offered_bytes)
       SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[], $5::bigint[])
       RETURNING conflict_id`,
      [
        conflicts.map((c) => c.row.event_key),
        conflicts.map((c) => (items[c.index] as RecordToSeal).sessionId),
        conflicts.map((c) => c.row.payload_hash),
        conflicts.map((c) => (items[c.index] as RecordToSeal).payloadHash),
        conflicts.map((c) => (items[c.index] as RecordToSeal).payload.length),
      ],
    );
    conflicts.forEach((c, n) => {
      outcomes[c.index] = {
        status: "conflict",
        eventKey: c.row.event_key,
        sessionId: c.row.session_id,
        generation: c.row.generation,
        seq: c.row.seq,
        conflictId: recorded.rows[n]?.conflict_id ?? -1,
      };
    });
  }
  return outcomes as SealOutcome[];
}

/** The same key twice in one batch: the first occurrence was sealed here; later ones compare against it. */
function sealedInBatch(
  items: readonly RecordToSeal[],
  outcomes: readonly (SealOutcome | undefined)[],
  item: RecordToSeal,
): ExistingRow | undefined {
  const first = items.findIndex((other, k) => other.eventKey === item.eventKey && outcomes[k]?.status === "sealed");
  const outcome = outcomes[first];
  const original = items[first];
  if (!outcome || !original) return undefined;
  return {
    event_key: original.eventKey,
    session_id: original.sessionId,
    generation: outcome.generation,
    seq: outcome.seq,
    payload_hash: original.payloadHash,
    kind: original.kind,
    turn_id: original.turnId,
    tool_call_id: original.toolCallId,
  };
}

interface LockedGenerations {
  /** Next free seq per (session, generation) group key; advanced as seqs are allocated. */
  readonly nextSeq: Map<string, number>;
  readonly currentGeneration: ReadonlyMap<string, number>;
}

interface SealedJson {
  event_key: string;
  session_id: string;
  generation: number;
  seq: number;
  payload_hash: string;
  kind: string;
  turn_id: string;
  tool_call_id: string | null;
}

/**
 * Locks, in one statement and sorted order, the generation row of every (session, generation) the batch writes to:
 * the explicit generations and each session's current one; the same statement returns the batch's keys that are
 * already sealed (see sealRecords for the snapshot this lookup sees).
 */
async function lockGenerations(
  db: Queryable,
  items: readonly RecordToSeal[],
): Promise<LockedGenerations & { sealed: Map<string, ExistingRow> }> {
  const explicit = items.filter((item) => item.generation !== undefined);
  const result = await db.query<{
    session_id: string;
    current_generation: number;
    generation: number;
    next_seq: number;
    sealed: SealedJson[] | null;
  }>({
    // Prepared once per connection (named): the hot path of every ingest, planned once instead of per call.
    name: "optchat.records.lock_generations",
    text: `SELECT s.session_id, s.current_generation, g.generation, g.next_seq,
            (SELECT json_agg(json_build_object('event_key', r.event_key, 'session_id', r.session_id,
                                               'generation', r.generation, 'seq', r.seq,
                                               'payload_hash', encode(r.payload_hash, 'hex'), 'kind', r.kind,
                                               'turn_id', r.turn_id, 'tool_call_id', r.tool_call_id))
               FROM optchat.records r WHERE r.event_key = ANY($4::text[])) AS sealed
       FROM optchat.sessions s
       JOIN optchat.generations g ON g.session_id = s.session_id
      WHERE s.session_id = ANY($1::text[])
        AND (g.generation = s.current_generation
             OR (g.session_id, g.generation) IN (SELECT * FROM unnest($2::text[], $3::int[])))
      ORDER BY g.session_id, g.generation
        FOR UPDATE OF g`,
    values: [
      [...new Set(items.map((item) => item.sessionId))],
      explicit.map((item) => item.sessionId),
      explicit.map((item) => item.generation),
      items.map((item) => item.eventKey),
    ],
  });
  const sealed = new Map<string, ExistingRow>(
    (result.rows[0]?.sealed ?? []).map((row) => [
      row.event_key,
      { ...row, seq: Number(row.seq), payload_hash: Buffer.from(row.payload_hash, "hex") },
    ]),
  );
  const nextSeq = new Map<string, number>();
  const currentGeneration = new Map<string, number>();
  for (const row of result.rows) {
    nextSeq.set(groupKey(row.session_id, row.generation), row.next_seq);
    currentGeneration.set(row.session_id, row.current_generation);
  }
  for (const item of items) {
    if (!currentGeneration.has(item.sessionId)) {
      throw new OptchatError(
        "SESSION_NOT_FOUND",
        `No session ${item.sessionId}: register it with openSession before ingesting`,
        {
          field: "sessionId",
          sessionId: item.sessionId,
        },
      );
    }
    if (item.generation !== undefined && !nextSeq.has(groupKey(item.sessionId, item.generation))) {
      throw new OptchatError("SESSION_NOT_FOUND", `Session ${item.sessionId} has no generation ${item.generation}`, {
        field: "generation",
        sessionId: item.sessionId,
        generation: item.generation,
      });
    }
  }
  return { nextSeq, currentGeneration, sealed };
}

/** Payloads up to this size are written in the batch's one statement; larger ones in their own (see sealRecords). */
const INLINE_BLOB_BYTES = 256 * 1024;

async function allocateAndInsert(
  db: Queryable,
  items: readonly RecordToSeal[],
  sealed: ReadonlyMap<string, ExistingRow>,
  { nextSeq, currentGeneration }: LockedGenerations,
  outcomes: (SealOutcome | undefined)[],
): Promise<void> {
  const fresh: { index: number; item: RecordToSeal; generation: number; seq: number }[] = [];
  const seenInBatch = new Set<string>();
  items.forEach((item, index) => {
    if (sealed.has(item.eventKey) || seenInBatch.has(item.eventKey)) return;
    seenInBatch.add(item.eventKey);
    const generation = item.generation ?? (currentGeneration.get(item.sessionId) as number);
    const key = groupKey(item.sessionId, generation);
    const seq = nextSeq.get(key) as number;
    nextSeq.set(key, seq + 1);
    fresh.push({ index, item, generation, seq });
  });
  if (fresh.length === 0) return;

  // Blobs in hash order: two batches sharing payloads (common tool outputs) then lock the same keys in the same order
  // and cannot deadlock on the blobs primary key (reproduced: 25 deadlocks in 200 rounds of reversed batches).
  const blobs = new Map<string, RecordToSeal>();
  for (const { item } of fresh) blobs.set(item.payloadHash.toString("hex"), item);
  const sortedBlobs = [...blobs.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, item]) => item);
  // Large payloads go first, one statement each, as a plain bytea parameter (sent in binary): inside the bytea[]
  // array below a payload travels as hex text built in one task (a 64 MiB record stalled the host's event loop for
  // seconds, issue 9 item 3). Size decides the order once per hash, so (large first, then by hash) is one total order
  // for every batch and the deadlock argument above still holds.
  const blobItems: RecordToSeal[] = [];
  for (const blob of sortedBlobs) {
    if (blob.payload.length <= INLINE_BLOB_BYTES) {
      blobItems.push(blob);
      continue;
    }
    await db.query(
      `INSERT INTO optchat.blobs (hash, byte_length, valid_utf8, content)
       VALUES ($1::bytea, $2::bigint, $3::boolean, $4::bytea) ON CONFLICT (hash) DO NOTHING`,
      [blob.payloadHash, blob.payload.length, blob.validUtf8, blob.payload],
    );
  }
  const touched = new Map<string, { sessionId: string; generation: number }>();
  for (const e of fresh)
    touched.set(groupKey(e.item.sessionId, e.generation), { sessionId: e.item.sessionId, generation: e.generation });
  const counters = [...touched.entries()];
  const column = <T>(pick: (entry: (typeof fresh)[number]) => T): T[] => fresh.map(pick);

  // One statement: blobs, records, the generations' counters, and the staged copies the records replace.
  await db.query({
    name: "optchat.records.seal",
    text: `WITH new_blobs AS (
       INSERT INTO optchat.blobs (hash, byte_length, valid_utf8, content)
       SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::boolean[], $4::bytea[])
       ON CONFLICT (hash) DO NOTHING
     ), new_records AS (
       INSERT INTO optchat.records (session_id, generation, seq, event_key, stage_key, turn_id, kind, occurred_at,
                                    payload_hash, payload_bytes, tool_call_id, tool_name, host_truncated,
                                    host_original_bytes, project_id, worktree_id, commit_id, attributes, search)
       SELECT * FROM unnest($5::text[], $6::int[], $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[],
                            $12::timestamptz[], $13::bytea[], $14::bigint[], $15::text[], $16::text[], $17::boolean[],
                            $18::bigint[], $19::text[], $20::text[], $21::text[], $22::jsonb[], $26::tsvector[])
     ), unstaged AS (
       DELETE FROM optchat.staged_items WHERE stage_key = ANY($9::text[])
     )
     UPDATE optchat.generations g SET next_seq = u.next_seq
       FROM unnest($23::text[], $24::int[], $25::bigint[]) AS u(session_id, generation, next_seq)
      WHERE g.session_id = u.session_id AND g.generation = u.generation`,
    values: [
      blobItems.map((b) => b.payloadHash),
      blobItems.map((b) => b.payload.length),
      blobItems.map((b) => b.validUtf8),
      blobItems.map((b) => b.payload),
      column((e) => e.item.sessionId),
      column((e) => e.generation),
      column((e) => e.seq),
      column((e) => e.item.eventKey),
      column((e) => e.item.stageKey),
      column((e) => e.item.turnId),
      column((e) => e.item.kind),
      column((e) => e.item.occurredAt),
      column((e) => e.item.payloadHash),
      column((e) => e.item.payload.length),
      column((e) => e.item.toolCallId),
      column((e) => e.item.toolName),
      column((e) => e.item.hostTruncated),
      column((e) => e.item.hostOriginalBytes),
      column((e) => e.item.projectId),
      column((e) => e.item.worktreeId),
      column((e) => e.item.commitId),
      column((e) => JSON.stringify(e.item.attributes)),
      counters.map(([, v]) => v.sessionId),
      counters.map(([, v]) => v.generation),
      counters.map(([key]) => nextSeq.get(key) as number),
      column((e) => e.item.search),
    ],
  });

  for (const e of fresh) {
    outcomes[e.index] = {
      status: "sealed",
      eventKey: e.item.eventKey,
      sessionId: e.item.sessionId,
      generation: e.generation,
      seq: e.seq,
    };
  }
}

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
       FROM optchat.sessions s WHERE s.session_id = $2::text
     ON CONFLICT (stage_key) DO UPDATE
       SET content = excluded.content, revision = excluded.revision, turn_id = excluded.turn_id, updated_at = now()
       WHERE optchat.staged_items.revision <= excluded.revision
     RETURNING stage_key`,
    [item.stageKey, item.sessionId, item.generation ?? null, item.turnId, item.kind, item.revision, item.payload],
  );
  if (result.rowCount) return "staged";
  const session = await db.query("SELECT 1 FROM optchat.sessions WHERE session_id = $1::text", [item.sessionId]);
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

export interface SourceRecord {
  readonly sessionId: string;
  readonly generation: number;
  readonly seq: number;
  readonly eventKey: string;
  readonly turnId: string;
  readonly kind: RecordKind;
  readonly occurredAt: Date;
  readonly sealedAt: Date;
  readonly payloadHash: Buffer;
  readonly payloadBytes: number;
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
