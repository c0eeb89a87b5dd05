/**
 * Marks where search terms occur in an excerpt, for the memory browser's highlighted search hits. Pure: the browser's
 * templates escape every segment; this only says which ones matched.
 */
import { isWordCharacter } from "./tokenize.js";

export interface Segment {
  readonly text: string;
  readonly match: boolean;
}

/**
 * `text` cut into segments whose concatenation is `text`, a segment being a match where one of `terms` occurs,
 * compared case-insensitively (terms are the query's own tokens, lower case: src/core/tokenize.ts `queryGroups`).
 * A word term matches a whole word only, as search does ("broker" is not in "DurableBroker"); a CJK term matches
 * anywhere (CJK text is searched by bigrams). Longer terms win at one position; touching matches merge.
 */
export function highlightSegments(text: string, terms: readonly string[]): Segment[] {
  const wanted = [...new Set(terms.filter((term) => term.length > 0))].sort((a, b) => b.length - a.length);
  const marked = new Uint8Array(text.length);
  if (wanted.length > 0) {
    for (let at = 0; at < text.length; at++) {
      for (const term of wanted) {
        // Compared on the slice of the term's length: lower-casing the whole text first could change its length
        // (e.g. U+0130) and shift every later position.
        if (text.slice(at, at + term.length).toLowerCase() === term && wholeWordAt(text, at, term.length)) {
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

/** Whether text[at, at + length) is not part of a longer word: no word character touches a word character at its ends. */
function wholeWordAt(text: string, at: number, length: number): boolean {
  const joined = (left: string | undefined, right: string | undefined) =>
    left !== undefined && right !== undefined && isWordCharacter(left) && isWordCharacter(right);
  const end = at + length;
  return (
    !joined(characterBefore(text, at), characterAt(text, at)) &&
    !joined(characterBefore(text, end), characterAt(text, end))
  );
}

/** The code point starting at `index`, or undefined at the end. */
function characterAt(text: string, index: number): string | undefined {
  const code = text.codePointAt(index);
  return code === undefined ? undefined : String.fromCodePoint(code);
}

/** The code point ending just before `index` (a surrogate pair whole), or undefined at the start. */
function characterBefore(text: string, index: number): string | undefined {
  if (index <= 0) return undefined;
  const unit = text.charCodeAt(index - 1);
  const pair = index >= 2 && unit >= 0xdc00 && unit <= 0xdfff;
  return characterAt(text, pair ? index - 2 : index - 1);
}
