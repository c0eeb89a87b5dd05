/**
 * Identifiers. Seed 000 §3: identity is a stable opaque ID, never a path, title or model-generated name. We accept a
 * conservative alphabet so that an ID can never be read as a path (no '/', '\', no leading '.', no '..').
 */
export const OPAQUE_ID_PATTERN = /^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}$/;

export function opaqueIdProblem(value: string): string | undefined {
  if (!OPAQUE_ID_PATTERN.test(value)) {
    return "must be an opaque ID of 1-200 characters from [A-Za-z0-9_.:-], not starting with '.' or '-' (paths, titles and names are not identities)";
  }
  if (value.includes("..")) return "must not contain '..' (it would read as a path)";
  return undefined;
}

/** The host's coordinates of one message or part; `revision` distinguishes deliberate host-side rewrites. */
export interface FinalizationKey {
  readonly hostSessionId: string;
  readonly messageId: string;
  readonly partId?: string | undefined;
  readonly revision: number;
}

// Components are percent-encoded so that a '/' or '#' inside a host ID cannot make two different keys collide.
function encodeComponent(value: string): string {
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** The staging key: which host message/part this is, independent of revision. */
export function stageKeyOf(key: FinalizationKey): string {
  return [key.hostSessionId, key.messageId, key.partId ?? ""].map(encodeComponent).join("/");
}

/** The finalization key: a sealed record's unique `event_key`. */
export function eventKeyOf(key: FinalizationKey): string {
  return `${stageKeyOf(key)}#${key.revision}`;
}

/** The finalization key an `event_key` was made from (eventKeyOf's inverse); undefined when it is not one. */
export function parseEventKey(eventKey: string): FinalizationKey | undefined {
  const hash = eventKey.lastIndexOf("#");
  if (hash < 0) return undefined;
  const revision = Number(eventKey.slice(hash + 1));
  const parts = eventKey.slice(0, hash).split("/");
  if (parts.length !== 3 || !Number.isInteger(revision) || revision < 0) return undefined;
  try {
    const [hostSessionId, messageId, partId] = parts.map(decodeURIComponent) as [string, string, string];
    return { hostSessionId, messageId, ...(partId === "" ? {} : { partId }), revision };
  } catch {
    return undefined;
  }
}

const SESSION_ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"; // Crockford base32, lowercase

/**
 * A new opaque session ID from 16 random bytes (the caller supplies the randomness: core reads no entropy source).
 * The `mem_` prefix tells optchat's ids from OpenCode's `ses_…` at a glance (issue 12: both looked alike). Sessions
 * created before it keep their `ses_…` ids: an id is opaque, nothing parses the prefix.
 */
export function sessionIdFromRandom(bytes: Uint8Array): string {
  if (bytes.length < 16) throw new RangeError("sessionIdFromRandom needs at least 16 random bytes");
  let out = "mem_";
  let buffer = 0;
  let bits = 0;
  for (const byte of bytes.subarray(0, 16)) {
    buffer = (buffer << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += SESSION_ID_ALPHABET[(buffer >> (bits - 5)) & 31];
      bits -= 5;
    }
    buffer &= (1 << bits) - 1;
  }
  if (bits > 0) out += SESSION_ID_ALPHABET[(buffer << (5 - bits)) & 31];
  return out;
}
