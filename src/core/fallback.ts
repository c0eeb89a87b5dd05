/**
 * Deterministic fallback lines, used when the compactor may not call a model (its budget is spent, issue 13 item 5).
 * Seed 000 §10: a fallback may say that a range needs inspection, but it is labelled as a fallback and never passes as a
 * summary. So a fallback line says what it is first, then only facts that need no model (what kind of message, how
 * big, how many): no cut text (DESIGN.md: never show cut text). The agent zooms to read the originals. Pure.
 */

/** What every fallback line starts with; views, zoom and the browser show it as it is. */
export const FALLBACK_LABEL = "[not summarized by a model — zoom to read]";

/** The summarizer identity stored on a fallback node (like "free" for nodes that needed no call). */
export const FALLBACK_SUMMARIZER = "fallback";

const BYTES = new Intl.NumberFormat("en-US");

/** A message too large to be its own line. */
export function fallbackLeafText(kind: string, bytes: number): string {
  return `${FALLBACK_LABEL} ${kind}: one message of ${BYTES.format(bytes)} bytes`;
}

/** Two lines that do not fit together, covering `messages` messages. */
export function fallbackParentText(messages: number): string {
  return `${FALLBACK_LABEL} ${BYTES.format(messages)} messages`;
}

/** A turn's publication leaf whose cover does not fit in one line, after its outcome tag (none for a completed turn). */
export function fallbackTurnText(tag: string, records: number): string {
  return `${tag === "" ? "" : `${tag} `}${FALLBACK_LABEL} a turn of ${BYTES.format(records)} records`;
}

export function isFallbackText(text: string): boolean {
  return text.startsWith(FALLBACK_LABEL) || text.includes(` ${FALLBACK_LABEL} `);
}
