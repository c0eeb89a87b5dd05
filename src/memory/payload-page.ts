import { InputInvalidError, OptchatError } from "../core/errors.js";
import { decodePayloadCursor, encodePayloadCursor, hashPrefixOf, utf8SafePrefixLength } from "../core/payload.js";
import type { Pool } from "../store/db.js";
import { findRecord, readPayloadBytes } from "../store/records.js";

export interface RecordRef {
  readonly sessionId: string;
  readonly generation: number;
  readonly seq: number;
}

export interface PayloadPage {
  readonly ref: RecordRef;
  readonly offset: number;
  /** The exact stored bytes of this page. */
  readonly bytes: Buffer;
  /** The page as text; invalid UTF-8 sequences appear as U+FFFD (see `validUtf8`). */
  readonly text: string;
  readonly totalBytes: number;
  readonly validUtf8: boolean;
  /** Cursor of the next page; null on the last page. */
  readonly nextCursor: string | null;
  /** True when this page reaches the end of the payload. */
  readonly complete: boolean;
  /** The host had already cut the output before we saw it: the full original cannot be recovered. */
  readonly hostTruncated: boolean;
  readonly hostOriginalBytes: number | null;
}

/**
 * One page of a record's stored payload, from the cursor's offset (the start without one), at most `maxBytes`. The
 * cursor names the payload's hash prefix, so a cursor of another payload is refused instead of read at its offset.
 */
export async function readPayloadPage(
  pool: Pool,
  ref: RecordRef,
  options: { readonly cursor?: string | undefined; readonly maxBytes: number },
): Promise<PayloadPage> {
  const record = await findRecord(pool, ref.sessionId, ref.generation, ref.seq);
  if (!record) {
    throw new OptchatError("REF_NOT_FOUND", `readPayload: no record ${ref.sessionId}:${ref.generation}:${ref.seq}`, {
      ref,
    });
  }
  const hashPrefix = hashPrefixOf(record.payloadHash);
  let offset = 0;
  if (options.cursor !== undefined) {
    const cursor = decodePayloadCursor(options.cursor);
    if (!cursor || cursor.hashPrefix !== hashPrefix || cursor.offset > record.payloadBytes) {
      throw new InputInvalidError("readPayload", [
        { field: "cursor", problem: "is not a cursor of this payload (use nextCursor from the previous page)" },
      ]);
    }
    offset = cursor.offset;
  }
  const chunk = await readPayloadBytes(pool, record.payloadHash, offset, options.maxBytes);
  const reachesEnd = offset + chunk.length >= record.payloadBytes;
  // Valid UTF-8 pages end on code point boundaries so each page decodes on its own; binary pages cut anywhere.
  const length = record.validUtf8 ? utf8SafePrefixLength(chunk, reachesEnd) : chunk.length;
  const bytes = chunk.subarray(0, length);
  const end = offset + length;
  return {
    ref,
    offset,
    bytes,
    text: bytes.toString("utf8"),
    totalBytes: record.payloadBytes,
    validUtf8: record.validUtf8,
    nextCursor: end < record.payloadBytes ? encodePayloadCursor({ hashPrefix, offset: end }) : null,
    complete: end >= record.payloadBytes,
    hostTruncated: record.hostTruncated,
    hostOriginalBytes: record.hostOriginalBytes,
  };
}
