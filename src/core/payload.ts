/**
 * Payload bytes: validity, page boundaries and cursors. Policy for content that is not clean text (documented in
 * docs/payloads.md):
 * - payloads are stored byte-exact (bytea): NUL bytes and invalid UTF-8 survive a round trip unchanged;
 * - a payload given as a JS string is encoded as UTF-8; lone surrogates (which UTF-8 cannot represent) become U+FFFD
 *   and the record says how many were replaced, so the substitution is never silent;
 * - text renderings of invalid UTF-8 use U+FFFD for each invalid sequence and are flagged `validUtf8: false`; the
 *   exact bytes stay available page by page.
 */

/** True when `bytes` is well-formed UTF-8 (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF). */
export function isValidUtf8(bytes: Uint8Array): boolean {
  let i = 0;
  const n = bytes.length;
  while (i < n) {
    const b0 = bytes[i] as number;
    if (b0 < 0x80) {
      i += 1;
      continue;
    }
    let need: number;
    let min: number;
    let cp: number;
    if (b0 >= 0xc2 && b0 <= 0xdf) {
      need = 1;
      min = 0x80;
      cp = b0 & 0x1f;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
      need = 2;
      min = 0x800;
      cp = b0 & 0x0f;
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
      need = 3;
      min = 0x10000;
      cp = b0 & 0x07;
    } else {
      return false;
    }
    for (let k = 1; k <= need; k++) {
      const b = bytes[i + k];
      if (b === undefined || (b & 0xc0) !== 0x80) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += need + 1;
  }
  return true;
}

/** Number of lone surrogates in a JS string (each becomes U+FFFD when encoded as UTF-8). */
export function countLoneSurrogates(text: string): number {
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        i += 1;
      } else {
        count += 1;
      }
    } else if (c >= 0xdc00 && c <= 0xdfff) {
      count += 1;
    }
  }
  return count;
}

/**
 * Length of the longest prefix of `chunk` (at most `chunk.length`) that does not end inside a UTF-8 code point.
 * `chunk` must start on a code point boundary. Used only for valid UTF-8 payloads; binary payloads page by bytes.
 * The result is 0 only for a chunk shorter than its first code point; pages of at least 4 bytes always progress.
 */
export function utf8SafePrefixLength(chunk: Uint8Array, atEndOfPayload: boolean): number {
  if (atEndOfPayload || chunk.length === 0) return chunk.length;
  // Walk back over at most 3 continuation bytes to the lead byte of the last code point.
  let lead = chunk.length - 1;
  while (lead > 0 && chunk.length - lead < 4 && ((chunk[lead] as number) & 0xc0) === 0x80) lead -= 1;
  const b0 = chunk[lead] as number;
  const width = b0 < 0x80 ? 1 : b0 >= 0xf0 ? 4 : b0 >= 0xe0 ? 3 : b0 >= 0xc0 ? 2 : 1;
  if (lead + width <= chunk.length) return chunk.length;
  return lead;
}

/** A page cursor: opaque to callers, bound to one payload (by hash prefix) and a byte offset. */
export interface PayloadCursor {
  readonly hashPrefix: string;
  readonly offset: number;
}

export function encodePayloadCursor(cursor: PayloadCursor): string {
  return `p1.${cursor.hashPrefix}.${cursor.offset.toString(36)}`;
}

export function decodePayloadCursor(text: string): PayloadCursor | undefined {
  const match = /^p1\.([0-9a-f]{16})\.([0-9a-z]{1,12})$/.exec(text);
  if (!match) return undefined;
  const offset = Number.parseInt(match[2] as string, 36);
  if (!Number.isSafeInteger(offset) || offset < 0) return undefined;
  return { hashPrefix: match[1] as string, offset };
}

/** First 16 hex digits of a SHA-256: enough to bind a cursor to its payload. */
export function hashPrefixOf(hash: Uint8Array): string {
  return Array.from(hash.subarray(0, 8), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * A payload as text for summaries and search: invalid UTF-8 sequences become U+FFFD and NUL becomes U+2400 (␀), because
 * Postgres text cannot hold NUL. The exact bytes stay in the record; this rendering is never stored as the source.
 */
export function payloadAsText(bytes: Uint8Array): string {
  return new TextDecoder("utf-8", { fatal: false }).decode(bytes).replaceAll("\u0000", "\u2400");
}

/**
 * {@link payloadAsText} page by page, for payloads too large to decode in one task (64 MiB took about a second):
 * the pieces pushed, then `end()`, concatenate to exactly `payloadAsText` of the concatenated pages (the decoder
 * carries a code point split between pages over, and a BOM is dropped only at the very start, as TextDecoder does).
 */
export function createPayloadTextDecoder(): { push(page: Uint8Array): string; end(): string } {
  const decoder = new TextDecoder("utf-8", { fatal: false });
  return {
    push: (page) => decoder.decode(page, { stream: true }).replaceAll("\u0000", "\u2400"),
    end: () => decoder.decode().replaceAll("\u0000", "\u2400"),
  };
}
