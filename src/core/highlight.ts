/**
 * Marks where search terms occur in an excerpt, for the memory browser's highlighted search hits. Pure: the browser's
 * templates escape every segment; this only says which ones matched.
 */

export interface Segment {
  readonly text: string;
  readonly match: boolean;
}

/**
 * `text` cut into segments whose concatenation is `text`, a segment being a match where one of `terms` occurs,
 * compared case-insensitively (terms are the query's own tokens, lower case: src/core/tokenize.ts `queryGroups`).
 * Longer terms win at the same position; overlapping and adjacent matches merge into one segment.
 */
export function highlightSegments(text: string, terms: readonly string[]): Segment[] {
  const wanted = [...new Set(terms.filter((term) => term.length > 0))].sort((a, b) => b.length - a.length);
  const marked = new Uint8Array(text.length);
  if (wanted.length > 0) {
    for (let at = 0; at < text.length; at++) {
      for (const term of wanted) {
        // Compared on the slice of the term's length: lower-casing the whole text first could change its length
        // (e.g. U+0130) and shift every later position.
        if (text.slice(at, at + term.length).toLowerCase() === term) {
          marked.fill(1, at, at + term.length);
          break;
        }
      }
    }
  }
  const segments: Segment[] = [];
  let start = 0;
  for (let at = 1; at <= text.length; at++) {
    if (at === text.length || marked[at] !== marked[start]) {
      segments.push({ text: text.slice(start, at), match: marked[start] === 1 });
      start = at;
    }
  }
  return segments;
}
