/**
 * Full-text search terms (DESIGN.md §4). We tokenize ourselves and hand Postgres finished `tsvector`/`tsquery`
 * literals, because its parsers make one token of a whole CJK run ('部署' is not found in '部署脚本用'), and pg_trgm
 * cannot find 2-character words. The rules, shared by indexing and querying so that both sides agree:
 * - text is NFKC-normalized and lowercased (full-width ＡＢＣ and half-width ﾃﾞｰﾀ fold to abc and データ);
 * - a word is a maximal run of letters, digits and combining marks outside CJK; punctuation (`-`, `.`, `/`, `'`, …)
 *   and symbols split words, as Postgres's own parser does with apostrophes (O'Reilly's → o, reilly, s);
 * - `_` joins words into one identifier (`max_tokens`), because code is searched by identifier; the index also holds
 *   its parts (max, tokens) so a search for one part still finds it, while a query for the identifier asks for the
 *   whole identifier only. Leading and trailing underscores are separators (`__init__` → init);
 * - CJK text (Han, Hiragana, Katakana with ー, Hangul) becomes overlapping character bigrams of each maximal CJK run
 *   (部署脚本 → 部署, 署脚, 脚本), a 1-character run becomes that character; a query turns each CJK run into a phrase
 *   of its bigrams (`'部署' <-> '署脚'`), so a 2-character word is a single bigram and longer words must be adjacent;
 * - soft hyphens, zero-width (non-)joiners, word joiners and variation selectors are removed before normalizing:
 *   they are invisible, and keeping them would make visually equal words differ.
 * Scripts without spaces other than CJK (Thai, Lao, Khmer, Myanmar) are not segmented: a run is one term.
 *
 * Limits, chosen so that every literal we build is accepted by `$1::tsvector` / `$1::tsquery`:
 * - positions are 1-based and advance by one per emitted token; Postgres stores at most 16,383, so later tokens all get
 *   16,383 (as Postgres itself clamps). Their terms stay searchable, but phrases (CJK words of 3+ characters) match
 *   only within the first 16,383 tokens of a text;
 * - Postgres keeps the lowest 256 positions of each lexeme; a phrase that needs a later occurrence of a very frequent
 *   bigram is not found (single terms are);
 * - at most 50,000 tokens per text: the index covers a prefix of very long texts;
 * - a term is at most 2,046 bytes of UTF-8. Longer words (base64, minified code) are dropped, not truncated, as
 *   Postgres's own to_tsvector does: they are noise in an index, and a query drops the same word the same way.
 *   (2,046 is the limit documented by older Postgres releases; 15 accepts 2,047, so this keeps a byte of margin);
 * - the distinct lexemes of one tsvector, with their positions, must fit Postgres's 1 MiB string area; tokenize stops
 *   before a token that could overflow it (a conservative estimate), so the index again covers a prefix;
 * - a query keeps at most 1,000 terms: Postgres evaluates long phrase chains recursively (20,000 bigrams exceed the
 *   default 2 MB stack; 10,000 pass), and a search needs nowhere near that many.
 */

/** One indexed term and its 1-based position in the text (non-decreasing, clamped at {@link MAX_POSITION}). */
export interface Token {
  readonly term: string;
  readonly position: number;
}

/** Tokens kept per text; the rest of the text is not indexed. */
export const MAX_TOKENS = 50_000;
/** Largest position a tsvector can store (Postgres MAXENTRYPOS - 1); larger positions are clamped to it. */
export const MAX_POSITION = 16_383;
/** Largest term in UTF-8 bytes (Postgres's lexeme limit, with a byte of margin on 15). */
export const MAX_TERM_BYTES = 2_046;
/** Positions Postgres keeps per lexeme (MAXNUMPOS): the lowest ones. */
export const MAX_POSITIONS_PER_TERM = 256;
/** Size of a tsvector's lexeme and position area (Postgres MAXSTRPOS). */
export const MAX_TSVECTOR_BYTES = 1_048_575;
/** Terms kept per query. */
export const MAX_QUERY_TERMS = 1_000;

// A CJK character: a letter or digit of the four scripts, or the prolonged sound mark ー (script Common, used only in
// kana words). Marks after it belong to it, so a bigram never separates a character from its marks.
const CJK = String.raw`(?:(?=[\p{L}\p{N}])[\p{sc=Han}\p{sc=Hiragana}\p{sc=Katakana}\p{sc=Hangul}]|\u30FC)`;
// A word starts with a letter or digit (a stray mark after a space is not a word) and continues with marks too.
const WORD = String.raw`(?!${CJK})[\p{L}\p{N}](?:(?!${CJK})[\p{L}\p{N}\p{M}])*`;
const SEGMENT = new RegExp(String.raw`(?<cjk>(?:${CJK}\p{M}*)+)|(?<word>${WORD}(?:_+${WORD})*)`, "gu");
const CJK_UNIT = new RegExp(String.raw`${CJK}\p{M}*`, "gu");
const WORD_CHARACTER = new RegExp(String.raw`^(?!${CJK})[\p{L}\p{N}\p{M}]$`, "u");

/** Whether a character (one code point) belongs to a word: a letter, digit or mark outside CJK (CJK makes bigrams). */
export function isWordCharacter(character: string): boolean {
  return WORD_CHARACTER.test(character);
}
const INVISIBLE = /\u00AD|\u200C|\u200D|\u2060|\uFEFF|[\uFE00-\uFE0F]|[\u{E0100}-\u{E01EF}]/gu;

/** The normalized form both sides compare: invisible joiners removed, NFKC, lowercase (NFKC again: lowercasing can
 * leave a sequence that NFKC would compose). */
function normalize(text: string): string {
  return text.replace(INVISIBLE, "").normalize("NFKC").toLowerCase().normalize("NFKC");
}

export type Segment =
  | { readonly kind: "word"; readonly text: string }
  | { readonly kind: "cjk"; readonly units: string[] };

// Text of ASCII characters only (most of what a coding agent writes): every rule above reduces to this. NFKC and the
// invisible characters touch nothing ASCII, lowercasing is ASCII's own, no ASCII character is CJK or a mark, and the
// only ASCII letters and digits are [a-z0-9] once lowercased. A word is then a run of those, joined by `_`.
// tests/unit/tokenize.test.ts checks it against the general rules; it tokenizes several times faster (the general
// expression with its Unicode property lookaheads cost about 0.2 ms for a 300-byte message).
/** Whether every code unit of `text` is ASCII (a loop: biome refuses control characters in a regular expression). */
function isAscii(text: string): boolean {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) > 0x7f) return false;
  return true;
}
const ASCII_WORD = /[a-z0-9]+(?:_+[a-z0-9]+)*/g;

export function* segments(text: string): Generator<Segment> {
  if (isAscii(text)) {
    for (const match of text.toLowerCase().matchAll(ASCII_WORD)) yield { kind: "word", text: match[0] };
    return;
  }
  yield* unicodeSegments(text);
}

/** The general rules (see the module comment); exported for the test of the ASCII path. */
export function* unicodeSegments(text: string): Generator<Segment> {
  for (const match of normalize(text).matchAll(SEGMENT)) {
    const cjk = match.groups?.cjk;
    if (cjk !== undefined) {
      yield { kind: "cjk", units: cjk.match(CJK_UNIT) ?? [] };
    } else {
      yield { kind: "word", text: match[0] };
    }
  }
}

/** The terms of a CJK run in order: its bigrams, or the single character of a 1-character run. */
function cjkTerms(units: readonly string[]): string[] {
  if (units.length === 1) return [units[0] as string];
  const terms: string[] = [];
  for (let i = 0; i + 1 < units.length; i++) terms.push((units[i] as string) + (units[i + 1] as string));
  return terms;
}

/** UTF-8 length of a string whose surrogates are paired (a lone surrogate counts as U+FFFD, 3 bytes). */
export function utf8Length(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        bytes += 4;
        i += 1;
      } else {
        bytes += 3;
      }
    } else bytes += 3;
  }
  return bytes;
}

function fits(term: string): boolean {
  return utf8Length(term) <= MAX_TERM_BYTES;
}

/**
 * The search tokens of a text, in order. See the module comment for the rules and limits. Positions are 1-based and
 * increase by one per token up to {@link MAX_POSITION}, then stay there.
 */
export function tokenize(text: string): Token[] {
  const tokenizer = createTokenizer();
  tokenizer.add(text);
  return tokenizer.tokens;
}

/**
 * A tokenizer fed one slice of a text at a time (the slices of {@link tokenSliceEnds}), so that a caller can yield to
 * the event loop between slices: tokenizing the indexed first MiB of a record took about 0.5 s in one task. Fed those
 * slices, it gives exactly {@link tokenize} of the whole text; `add` returns false once a limit is reached (the rest of
 * the text is not indexed, as with the whole text).
 */
export function createTokenizer(): { readonly tokens: Token[]; add(slice: string): boolean } {
  const tokens: Token[] = [];
  // Upper bound of the bytes Postgres will need per distinct lexeme: the term, one byte of alignment, the position
  // count and one uint16 per position (at most MAX_POSITIONS_PER_TERM of them).
  const counts = new Map<string, number>();
  let bytes = 0;
  let full = false;
  const push = (term: string): boolean => {
    if (tokens.length >= MAX_TOKENS) return false;
    const count = counts.get(term) ?? 0;
    let cost = count < MAX_POSITIONS_PER_TERM ? 2 : 0;
    if (count === 0) {
      // A term's length is measured once, when first seen (a term that does not fit is never counted).
      const length = utf8Length(term);
      if (length > MAX_TERM_BYTES) return true;
      cost = length + 5;
    }
    if (bytes + cost > MAX_TSVECTOR_BYTES) return false;
    bytes += cost;
    counts.set(term, count + 1);
    tokens.push({ term, position: Math.min(tokens.length + 1, MAX_POSITION) });
    return true;
  };
  const add = (slice: string): boolean => {
    for (const segment of segments(slice)) {
      if (segment.kind === "cjk") {
        for (const term of cjkTerms(segment.units)) if (!push(term)) return false;
      } else {
        if (!push(segment.text)) return false;
        const parts = segment.text.split(/_+/);
        if (parts.length > 1) for (const part of parts) if (!push(part)) return false;
      }
    }
    return true;
  };
  return {
    tokens,
    add(slice) {
      if (full) return false;
      full = !add(slice);
      return !full;
    },
  };
}

function isAsciiSpace(code: number): boolean {
  return code === 0x20 || (code >= 0x09 && code <= 0x0d);
}

/**
 * End offsets (code units, exclusive, ascending, the last one `text.length`) of slices of about `sliceUnits` code
 * units that tokenize independently to the same tokens as the whole text: each slice but the last ends just before an
 * ASCII whitespace character. Whitespace separates words and CJK runs, composes with nothing under NFKC, and is
 * neither cased nor case-ignorable, so a final sigma before it lowercases the same with or without what follows. A
 * stretch with no whitespace stays whole (it is one slice however long). Linear: each code unit is looked at once.
 */
export function* tokenSliceEnds(text: string, sliceUnits: number): Generator<number> {
  let start = 0;
  while (text.length - start > sliceUnits) {
    let end = start + sliceUnits;
    while (end < text.length && !isAsciiSpace(text.charCodeAt(end))) end++;
    if (end >= text.length) break;
    yield end;
    start = end;
  }
  yield text.length;
}

/** Compares strings by code point, which is the byte order of their UTF-8 encodings and so Postgres's lexeme order. */
function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) {
      // Surrogates (U+D800–DFFF) encode code points above U+FFFF, so they sort after U+E000–FFFF.
      const xs = x >= 0xd800 && x <= 0xdfff;
      const ys = y >= 0xd800 && y <= 0xdfff;
      if (xs !== ys) return xs ? 1 : -1;
      return x - y;
    }
  }
  return a.length - b.length;
}

/** A term as a quoted lexeme of a tsvector or tsquery literal: `'` doubled, `\` escaped. */
function quote(term: string): string {
  if (!term.includes("\\") && !term.includes("'")) return `'${term}'`;
  return `'${term.replaceAll("\\", "\\\\").replaceAll("'", "''")}'`;
}

function hasLoneSurrogate(text: string): boolean {
  return /\p{Cs}/u.test(text);
}

/**
 * A term's positions ascending without repeats, the lowest {@link MAX_POSITIONS_PER_TERM}. Tokens from tokenize come in
 * position order, so the list is usually ascending already (repeats only at the clamp): then it is only checked and
 * cut, not copied into a set and sorted (that took most of the literal's time).
 */
function ascendingPositions(list: readonly number[]): number[] {
  let ascending = true;
  for (let i = 1; i < list.length && ascending; i++) ascending = (list[i] as number) > (list[i - 1] as number);
  if (ascending) return list.length > MAX_POSITIONS_PER_TERM ? list.slice(0, MAX_POSITIONS_PER_TERM) : [...list];
  return [...new Set(list)].sort((a, b) => a - b).slice(0, MAX_POSITIONS_PER_TERM);
}

/**
 * A tsvector literal (`'other':2 'term':1,5`) for `$1::tsvector`. Lexemes are sorted by UTF-8 bytes and positions
 * ascending, deduplicated, clamped at {@link MAX_POSITION} and limited to the lowest {@link MAX_POSITIONS_PER_TERM} per
 * term: exactly what Postgres stores, so `$1::tsvector::text` returns the literal unchanged. No tokens give `''`, which
 * casts to an empty tsvector. Tokens that Postgres would reject (an empty term, a term over {@link MAX_TERM_BYTES}
 * bytes, NUL or a lone surrogate, a position that is not a positive integer, a total over {@link MAX_TSVECTOR_BYTES})
 * are a caller's bug and throw a RangeError; tokens from {@link tokenize} never do.
 */
export function toTsvectorLiteral(tokens: readonly Token[]): string {
  // Per term, its UTF-8 length (measured once) and its positions.
  const positions = new Map<string, { bytes: number; list: number[] }>();
  for (const { term, position } of tokens) {
    let entry = positions.get(term);
    if (entry === undefined) {
      const length = utf8Length(term);
      if (term.length === 0 || length > MAX_TERM_BYTES || term.includes("\u0000") || hasLoneSurrogate(term)) {
        throw new RangeError(`not a valid tsvector lexeme: ${JSON.stringify(term.slice(0, 40))}`);
      }
      entry = { bytes: length, list: [] };
      positions.set(term, entry);
    }
    const list = entry.list;
    if (!Number.isSafeInteger(position) || position < 1) {
      throw new RangeError(`not a valid tsvector position: ${position}`);
    }
    list.push(Math.min(position, MAX_POSITION));
  }
  const entries: string[] = [];
  let bytes = 0;
  for (const term of [...positions.keys()].sort(compareCodePoints)) {
    const entry = positions.get(term) as { bytes: number; list: number[] };
    const sorted = ascendingPositions(entry.list);
    // Postgres's own accounting (tsvector.c uniqueentry): lexeme, align to 2, uint16 count, uint16 per position.
    bytes += entry.bytes;
    bytes += bytes % 2;
    bytes += 2 + 2 * sorted.length;
    entries.push(`${quote(term)}:${sorted.join(",")}`);
  }
  if (bytes > MAX_TSVECTOR_BYTES) {
    throw new RangeError(`tsvector too large: ${bytes} bytes of lexemes and positions, max ${MAX_TSVECTOR_BYTES}`);
  }
  return entries.join(" ");
}

/**
 * The query's term groups, each a phrase of terms that must be adjacent (a single term is a group of one), in query
 * order without repeats. A word is its whole identifier (its parts only if the whole is too long); a CJK run is the
 * phrase of its bigrams (split where a bigram is too long, since the index skips it too). At most
 * {@link MAX_QUERY_TERMS} terms.
 */
export function queryGroups(query: string): string[][] {
  const groups: string[][] = [];
  const seen = new Set<string>();
  let terms = 0;
  const add = (group: string[]): boolean => {
    if (group.length === 0) return true;
    const kept = group.slice(0, MAX_QUERY_TERMS - terms);
    const key = kept.join("\u0000");
    if (!seen.has(key)) {
      seen.add(key);
      groups.push(kept);
      terms += kept.length;
    }
    return terms < MAX_QUERY_TERMS;
  };
  for (const segment of segments(query)) {
    if (segment.kind === "cjk") {
      let phrase: string[] = [];
      for (const term of cjkTerms(segment.units)) {
        if (fits(term)) {
          phrase.push(term);
        } else {
          if (!add(phrase)) return groups;
          phrase = [];
        }
      }
      if (!add(phrase)) return groups;
    } else if (fits(segment.text)) {
      if (!add([segment.text])) return groups;
    } else {
      for (const part of segment.text.split(/_+/)) if (fits(part) && !add([part])) return groups;
    }
  }
  return groups;
}

/**
 * A tsquery literal for one term, a prefix of one (`'paint':*`), or a phrase of adjacent terms: `'pnpm'`,
 * `('部署' <-> '署脚')`.
 */
export function termsTsquery(terms: readonly string[], prefix = false): string {
  if (terms.length === 1) return `${quote(terms[0] as string)}${prefix ? ":*" : ""}`;
  return `(${terms.map(quote).join(" <-> ")})`;
}

/**
 * English function words dropped from an "any word" query: matching any text that contains "the" ranks noise (the
 * LoCoMo bench's natural-language questions found almost nothing with every word required, and everything with any).
 */
const FUNCTION_WORDS = new Set(
  (
    "a an and are as at be but by can did do does for from had has have he her his how i if in is it its me my no not " +
    "of on or our she so that the their them then there they this to was we were what when where which who why will " +
    "with you your"
  ).split(" "),
);

/**
 * A tsquery literal for `$1::tsquery` that finds texts containing every word of `query` (`all`, AND) or any of them
 * (`any`, OR, function words dropped unless nothing else is left), each CJK run as a phrase of its bigrams:
 * `'pnpm' & ('部署' <-> '署脚')`. Undefined when the query has no terms (only punctuation, say).
 */
export function toTsqueryLiteral(query: string, match: "all" | "any" = "all"): string | undefined {
  let groups = queryGroups(query);
  if (groups.length === 0) return undefined;
  if (match === "any") {
    const content = groups.filter((group) => group.length > 1 || !FUNCTION_WORDS.has(group[0] as string));
    if (content.length > 0) groups = content;
  }
  return groups
    .map((group) => (group.length === 1 ? quote(group[0] as string) : `(${group.map(quote).join(" <-> ")})`))
    .join(match === "all" ? " & " : " | ");
}
