import { isUtf8 } from "node:buffer";
import { createHash } from "node:crypto";
import { yieldToEventLoop } from "../compactor/yield.js";
import { countLoneSurrogates, payloadAsText } from "../core/payload.js";
import { createTokenizer, tokenSliceEnds, toTsvectorLiteral } from "../core/tokenize.js";

/**
 * Everything ingestion derives from a payload before the transaction: its bytes, hash, UTF-8 validity, the count of
 * lone surrogates replaced, and its search vector. Done in slices with the event loop turning between them, because
 * ingestion runs inside the host (OpenCode) and a record may hold 64 MiB: in one task, encoding, hashing, checking
 * and tokenizing such a record blocked the host for seconds (issue 9 item 3; `npm run bench -- large-records`).
 */
export interface PreparedPayload {
  readonly payload: Buffer;
  readonly payloadHash: Buffer;
  readonly validUtf8: boolean;
  /** Lone surrogates of a string payload, each stored as U+FFFD. */
  readonly loneSurrogatesReplaced: number;
  /** tsvector literal of the tool name and the first {@link SEARCH_INDEX_BYTES} of the text. */
  readonly search: string;
}

/**
 * The search vector of a record covers its tool name and the first SEARCH_INDEX_BYTES of its text. The index stops
 * there (a 10 MB log would take seconds to tokenize and hit Postgres's tsvector limits); the whole payload stays
 * readable.
 */
export const SEARCH_INDEX_BYTES = 1024 * 1024;

/**
 * Code units encoded per turn of the event loop. V8 encodes a string with non-ASCII characters at roughly 60 ns per
 * code unit on a loaded machine (4 Mi units took 245 ms; Buffer.byteLength of a 64 MiB text took 958 ms), so slices
 * are small and the total is never measured in one call.
 */
const ENCODE_SLICE_UNITS = 256 * 1024;
/** Payload bytes hashed per turn of the event loop. */
const HASH_SLICE_BYTES = 1024 * 1024;
/** Code units tokenized per turn of the event loop: 32 KiB of text tokenizes in about 10 ms. */
const TOKEN_SLICE_UNITS = 32 * 1024;

export async function preparePayload(content: string | Uint8Array, toolName?: string): Promise<PreparedPayload> {
  let payload: Buffer;
  let loneSurrogatesReplaced = 0;
  if (typeof content === "string") {
    const pieces: Buffer[] = [];
    for (const [start, end] of stringSlices(content, ENCODE_SLICE_UNITS)) {
      const slice = content.slice(start, end);
      pieces.push(Buffer.from(slice, "utf8"));
      if (!isWellFormed(slice)) loneSurrogatesReplaced += countLoneSurrogates(slice);
      if (end < content.length) await yieldToEventLoop();
    }
    payload = pieces.length === 1 ? (pieces[0] as Buffer) : Buffer.concat(pieces);
  } else {
    payload = Buffer.from(content);
  }
  const hash = createHash("sha256");
  for (let at = 0; at < payload.length; at += HASH_SLICE_BYTES) {
    hash.update(payload.subarray(at, at + HASH_SLICE_BYTES));
    if (at + HASH_SLICE_BYTES < payload.length) await yieldToEventLoop();
  }
  // A JS string always encodes to valid UTF-8 (lone surrogates become U+FFFD); bytes are checked natively (the
  // hand-written check in src/core/payload.ts took about a second for 64 MiB).
  const validUtf8 = typeof content === "string" || isUtf8(payload);
  return {
    payload,
    payloadHash: hash.digest(),
    validUtf8,
    loneSurrogatesReplaced,
    search: await searchVectorOf(toolName, payload),
  };
}

async function searchVectorOf(toolName: string | undefined, payload: Buffer): Promise<string> {
  const body = payloadAsText(payload.subarray(0, SEARCH_INDEX_BYTES));
  const text = toolName ? `${toolName} ${body}` : body;
  const tokenizer = createTokenizer();
  let start = 0;
  for (const end of tokenSliceEnds(text, TOKEN_SLICE_UNITS)) {
    if (!tokenizer.add(text.slice(start, end))) break;
    start = end;
    if (end < text.length) await yieldToEventLoop();
  }
  return toTsvectorLiteral(tokenizer.tokens);
}

/** Consecutive [start, end) slices of about `units` code units that never split a surrogate pair. */
function* stringSlices(text: string, units: number): Generator<[number, number]> {
  let start = 0;
  while (start < text.length) {
    let end = Math.min(text.length, start + units);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end -= 1;
    yield [start, end];
    start = end;
  }
}

function isWellFormed(text: string): boolean {
  // String.prototype.isWellFormed (ES2024, native in Node 20) is not in this project's ES2023 lib typings.
  return (text as string & { isWellFormed(): boolean }).isWellFormed();
}
