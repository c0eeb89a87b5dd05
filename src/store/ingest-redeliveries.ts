/**
 * Re-deliveries of a batch's keys (store/ingest-commit.ts): a key sealed before, or earlier in the same batch, with
 * the same content is a duplicate; with other content a conflict, recorded in optchat.ingest_conflicts.
 */
import type { Queryable } from "./db.js";
import type { RecordToSeal, SealOutcome } from "./records.js";

export interface ExistingRow {
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

/**
 * Keys that were sealed before (or earlier in this batch): a re-delivery is a duplicate (its outcome set here), other
 * content a conflict (returned, for recordConflicts).
 */
export function classifyRedeliveries(
  items: readonly RecordToSeal[],
  sealed: ReadonlyMap<string, ExistingRow>,
  outcomes: (SealOutcome | undefined)[],
): { index: number; row: ExistingRow }[] {
  const conflicts: { index: number; row: ExistingRow }[] = [];
  items.forEach((item, index) => {
    if (outcomes[index]) return;
    const row = sealed.get(item.eventKey) ?? sealedInBatch(items, outcomes, item);
    if (!row) throw new Error(`sealAndAppend: ${item.eventKey} neither sealed nor allocated`);
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
  return conflicts;
}

/** Records each conflict (optchat.ingest_conflicts) and sets its outcome. */
export async function recordConflicts(
  db: Queryable,
  items: readonly RecordToSeal[],
  conflicts: readonly { index: number; row: ExistingRow }[],
  outcomes: (SealOutcome | undefined)[],
): Promise<void> {
  if (conflicts.length === 0) return;
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
