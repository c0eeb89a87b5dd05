/**
 * Measuring and cutting text by UTF-8 bytes in time proportional to what is looked at, never to the whole text: a
 * record may hold 64 MiB (MAX_PAYLOAD_BYTES), and the first chunker measured the whole rest of the text for every
 * part (8 MiB took 5 s, 64 MiB never finished and froze the worker; issue 9 item 3). Pure.
 *
 * Widths follow TextEncoder: a paired surrogate is 4 bytes, a lone surrogate 3 (it is encoded as U+FFFD).
 */

/** Work counters, so tests can prove that chunking is linear without timing it. */
export interface ScanCounter {
  /** UTF-16 code units examined. */
  units: number;
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}

/**
 * End (exclusive, in code units) of the longest stretch of `text` from `start` within `limit` UTF-8 bytes that does
 * not end inside a surrogate pair. Looks at no more than `limit + 1` code units: each code unit is at least one byte.
 */
export function prefixEndWithinBytes(text: string, start: number, limit: number, counter?: ScanCounter): number {
  const n = text.length;
  let bytes = 0;
  let i = start;
  while (i < n) {
    const code = text.charCodeAt(i);
    let width = 3;
    let units = 1;
    if (code < 0x80) width = 1;
    else if (code < 0x800) width = 2;
    else if (isHighSurrogate(code) && i + 1 < n && isLowSurrogate(text.charCodeAt(i + 1))) {
      width = 4;
      units = 2;
    }
    if (bytes + width > limit) break;
    bytes += width;
    i += units;
  }
  if (counter) counter.units += i - start + 1;
  return i;
}

/** True when `text` is at most `limit` UTF-8 bytes; looks at no more than `limit + 1` code units. */
export function fitsInBytes(text: string, limit: number): boolean {
  // A code unit is at least one byte, so a longer string cannot fit: this keeps a 64 MiB text from being measured
  // whole just to learn that it is not a free leaf.
  if (text.length > limit) return false;
  return prefixEndWithinBytes(text, 0, limit) === text.length;
}

/**
 * The end offsets (code units, exclusive, ascending, the last one `text.length`) of the parts {@link chunkText}
 * makes, one at a time, so a caller can yield to the event loop between parts. Each part is at most `maxBytes` UTF-8
 * bytes and ends at the last newline in its second half when there is one, else at the last space there, else at a
 * code point boundary. Linear: every part looks at most at twice its own length plus one code unit (the forward
 * measure of a part overlaps the next one by less than half a part, and the backward search stays in the half).
 */
export function* chunkEnds(text: string, maxBytes: number, counter?: ScanCounter): Generator<number> {
  if (maxBytes < 8) throw new RangeError("chunkText: maxBytes below 8");
  let start = 0;
  for (;;) {
    const headEnd = prefixEndWithinBytes(text, start, maxBytes, counter);
    if (headEnd >= text.length) {
      yield text.length;
      return;
    }
    const half = start + Math.floor((headEnd - start) / 2);
    let newline = -1;
    let space = -1;
    let i = headEnd - 1;
    for (; i >= half; i--) {
      const code = text.charCodeAt(i);
      if (code === 0x0a) {
        newline = i;
        break;
      }
      if (code === 0x20 && space < 0) space = i;
    }
    if (counter) counter.units += headEnd - i;
    // A newline or space is a whole code point, so cutting after it never splits a surrogate pair.
    const end = newline >= 0 ? newline + 1 : space >= 0 ? space + 1 : headEnd;
    yield end;
    start = end;
  }
}

/**
 * Splits a message too large for the summarizer's window into consecutive parts of at most `maxBytes` UTF-8 bytes,
 * deterministically (the boundaries are those of {@link chunkEnds}). Concatenating the parts gives the text back
 * exactly; an empty text is one empty part.
 */
export function chunkText(text: string, maxBytes: number, counter?: ScanCounter): string[] {
  const parts: string[] = [];
  let start = 0;
  for (const end of chunkEnds(text, maxBytes, counter)) {
    parts.push(text.slice(start, end));
    start = end;
  }
  return parts;
}
