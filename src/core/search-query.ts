/**
 * A search query as weighted units for BM25 ranking (issue 10), and the plan that ranks them: which units generate
 * candidates, and what each matched unit adds to a document's score. Pure: the statistics come from src/store.
 *
 * Units, from the tokens of src/core/tokenize.ts so that query and index agree:
 * - a word (an identifier such as `max_tokens` whole; the index also holds its parts), unless it is a stop word;
 * - a CJK run as the phrase of its bigrams (a 2-character word is one bigram);
 * - a compound written without spaces whose tokens split it (`src/store/search.ts`, `v1.2.3`, `O'Reilly`): its parts
 *   are words as above, and the compound is also a phrase unit, so the exact identifier or path outranks texts that
 *   merely contain its parts; quoted text ("like this") is a phrase unit the same way.
 * Stop words (the standard English list below, with the fragments an apostrophe leaves) are dropped unless the query
 * has nothing else.
 *
 * Latin word forms: a word of ASCII letters is matched as a prefix of its light stem ({@link lightStem}: one of the
 * inflection suffixes -ing, -ed, -es, -s, -ly removed when 4 letters stay), so "conferences" finds "conference" and
 * "painted" finds "painting"; shorter words, words with digits or `_`, and non-ASCII words match whole. The index is
 * unchanged (no stemming at write time), so the choice can be revisited without re-indexing. Measured on LoCoMo with
 * `npm run bench -- locomo` against whole words only (docs/shared-memory.md "Retrieval").
 */
import { queryGroups, segments, termsTsquery } from "./tokenize.js";

/**
 * English stop words: the Snowball stop list (snowballstem.org/algorithms/english/stop.txt) in the form our tokenizer
 * produces (apostrophes split words, so "don't" is "don" + "t", "I'm" is "i" + "m"), plus those fragments themselves.
 * Standard, not fitted to any benchmark.
 */
export const STOP_WORDS: ReadonlySet<string> = new Set(
  (
    "i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers herself " +
    "it its itself they them their theirs themselves what which who whom this that these those am is are was were be " +
    "been being have has had having do does did doing would should could ought a an the and but if or because as " +
    "until while of at by for with about against between into through during before after above below to from up " +
    "down in out on off over under again further then once here there when where why how all any both each few more " +
    "most other some such no nor not only own same so than too very can will just should now " +
    // apostrophe fragments: 's 't 've 'm 're 'll 'd, and the stems they leave (don't, isn't, can't, won't, …)
    "s t ve m re ll d don doesn didn isn aren wasn weren hasn haven hadn won wouldn shan shouldn couldn mustn mightn " +
    "needn let"
  ).split(" "),
);

export interface QueryUnit {
  /** The unit's terms; more than one is a phrase (adjacent, in order). */
  readonly terms: readonly string[];
  /** A single term matched as a prefix (a light stem): `'paint':*`. */
  readonly prefix?: boolean;
  /** A phrase built from a compound or quoted text (boosted by the idf of its parts), not a CJK run. */
  readonly compound: boolean;
}

/** Units kept per query: the rarest ones after statistics are known (see {@link planRanking}). */
export const MAX_QUERY_UNITS = 32;

function key(terms: readonly string[], prefix = false): string {
  return terms.join("\u0000") + (prefix ? ":*" : "");
}

const INFLECTIONS = ["ing", "ed", "es", "s", "ly"];
/** Fewest letters a prefix match keeps: shorter stems ("go", "car") would match too many unrelated words. */
export const MIN_PREFIX_LETTERS = 4;

/** The light stem of an ASCII word matched as a prefix, or undefined when the word is matched whole. */
export function lightStem(word: string): string | undefined {
  if (!/^[a-z]+$/.test(word)) return undefined;
  for (const suffix of INFLECTIONS) {
    if (word.endsWith(suffix) && word.length - suffix.length >= MIN_PREFIX_LETTERS)
      return word.slice(0, -suffix.length);
  }
  return word.length >= MIN_PREFIX_LETTERS ? word : undefined;
}

/** The key a unit's document frequency is looked up under: its term, or `stem:*` for a prefix. */
export function unitKey(unit: { readonly terms: readonly string[]; readonly prefix?: boolean }): string {
  return key(unit.terms, unit.prefix ?? false);
}

/** The query's units in query order without repeats (see the module comment). Empty when it has no terms. */
export function queryUnits(query: string): QueryUnit[] {
  const units: QueryUnit[] = [];
  const seen = new Set<string>();
  const add = (terms: readonly string[], compound: boolean) => {
    if (terms.length === 0 || seen.has(key(terms))) return;
    seen.add(key(terms));
    units.push({ terms, compound });
  };
  // Quoted stretches first become phrases; every chunk between spaces is examined for compounds.
  const quoted = /"([^"]+)"|“([^”]+)”/gu;
  for (const match of query.matchAll(quoted)) {
    const terms = queryGroups(match[1] ?? match[2] ?? "").flat();
    if (terms.length > 1) add(terms, true);
  }
  for (const chunk of query.split(/\s+/u)) {
    const groups = queryGroups(chunk);
    const words = groups.filter((group) => group.length === 1).map((group) => group[0] as string);
    // A possessive or contraction ("Caroline's") is not a compound: trim stop words at either end first.
    let first = 0;
    let last = words.length;
    while (first < last && STOP_WORDS.has(words[first] as string)) first++;
    while (last > first && STOP_WORDS.has(words[last - 1] as string)) last--;
    if (words.length === groups.length && last - first > 1) add(words.slice(first, last), true);
    for (const group of groups) add(group, false);
  }
  const content = units.filter((unit) => unit.terms.length > 1 || !STOP_WORDS.has(unit.terms[0] as string));
  const kept = content.length > 0 ? content : units;
  // Single words as prefixes of their light stems ("painted" and "paints" become one unit 'paint':*).
  const stemmed: QueryUnit[] = [];
  const stemmedKeys = new Set<string>();
  for (const unit of kept) {
    const stem = unit.terms.length === 1 && !unit.compound ? lightStem(unit.terms[0] as string) : undefined;
    const next: QueryUnit = stem === undefined ? unit : { terms: [stem], compound: false, prefix: true };
    if (stemmedKeys.has(unitKey(next))) continue;
    stemmedKeys.add(unitKey(next));
    stemmed.push(next);
  }
  return stemmed;
}

/** Collection statistics of one document kind (records, or summary nodes) in the caller's scope. */
export interface CollectionStats {
  readonly documents: number;
  readonly averageLength: number;
}

/** BM25 parameters: the standard values (Robertson & Zaragoza 2009, Lucene's defaults). */
export const BM25_K1 = 1.2;
export const BM25_B = 0.75;

/** Candidates wanted from the rarest units before common units stop being added to candidate generation. */
export const CANDIDATE_TARGET = 2_000;

export interface RankedUnit {
  readonly terms: readonly string[];
  readonly prefix: boolean;
  /** What a document containing the unit adds before length normalisation: idf (times parts, for a compound). */
  readonly weight: number;
  /** Whether the unit's postings are read to find candidates (the rarest units, see {@link planRanking}). */
  readonly generates: boolean;
  /** The unit's document frequency in the scope's statistics (its rarest term's, for a phrase). */
  readonly documents: number;
}

/** Robertson–Spärck Jones idf as Lucene computes it (never negative): ln(1 + (N - df + 0.5) / (df + 0.5)). */
export function idf(documents: number, documentFrequency: number): number {
  const df = Math.min(Math.max(documentFrequency, 0), Math.max(documents, 0));
  return Math.log(1 + (Math.max(documents, 0) - df + 0.5) / (df + 0.5));
}

/**
 * Weights the units by rarity and chooses the candidate generators: the rarest unit, then further units in ascending
 * document frequency while their frequencies sum to at most {@link CANDIDATE_TARGET}. A document matching none of the
 * generators can only hold more common units, whose idf is lower than every generator's, so it is left out of
 * ranking: that bounds the work of a query with a rare and a common word to about the target (`npm run bench --
 * shared`: "<hash> test" scored every record holding "test" otherwise). A unit's document frequency is that of its
 * rarest term (a phrase occurs at most where its rarest term does).
 */
export function planRanking(
  units: readonly QueryUnit[],
  frequencyOf: (key: string) => number,
  records: CollectionStats,
): RankedUnit[] {
  const measured = units.map((unit) => ({
    unit,
    df: unit.prefix ? frequencyOf(unitKey(unit)) : Math.min(...unit.terms.map(frequencyOf)),
  }));
  measured.sort((a, b) => a.df - b.df || unitKey(a.unit).localeCompare(unitKey(b.unit)));
  const kept = measured.slice(0, MAX_QUERY_UNITS);
  let sum = 0;
  return kept.map(({ unit, df }) => {
    const generates = sum === 0 || sum + df <= CANDIDATE_TARGET;
    if (generates) sum += Math.max(df, 1);
    const single = idf(records.documents, df);
    // A compound phrase adds the idf of its parts again: an exact path or identifier counts double its words.
    const weight = unit.compound
      ? unit.terms.reduce((total, term) => total + idf(records.documents, frequencyOf(term)), 0)
      : single;
    return { terms: unit.terms, prefix: unit.prefix ?? false, weight, generates, documents: df };
  });
}

/** BM25's length factor for a document of `length` terms containing a unit once: (k1 + 1) / (tf + k1·(1 − b + b·dl/avgdl)). */
export function lengthFactor(length: number, averageLength: number): number {
  const ratio = averageLength > 0 ? length / averageLength : 1;
  return (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B + BM25_B * ratio));
}

/**
 * Most of the scope's terms a prefix unit's candidates are read for (the most frequent first). A prefix is evaluated
 * by GIN as the union of every indexed term that starts with it, over every scope of the server, before the scope is
 * intersected (docs/shared-memory.md "Search at scale"); the scope's own terms with their counts are in its statistics.
 * A record holding only rarer forms than these is not a candidate through this unit (it still scores it, through
 * another unit's candidates); LoCoMo's stems have far fewer forms, so its results are unchanged
 * (`npm run bench -- locomo`).
 */
export const PREFIX_EXPANSION_TERMS = 16;

/**
 * The tsquery a unit's candidates are read through: the unit itself, or for a prefix unit its stem and the expansion
 * (the scope's counted terms starting with the stem) as exact terms OR-ed.
 */
export function candidateTsquery(
  unit: { readonly terms: readonly string[]; readonly prefix?: boolean },
  expansion: readonly string[] = [],
): string {
  if (!unit.prefix) return termsTsquery(unit.terms);
  const stem = unit.terms[0] as string;
  const terms = [...new Set([stem, ...expansion.slice(0, PREFIX_EXPANSION_TERMS)])];
  return terms.length === 1 ? termsTsquery(terms) : `(${terms.map((term) => termsTsquery([term])).join(" | ")})`;
}

/**
 * The candidates to read first when there may be more than `cap` of them (only the first `cap` are scored): a query
 * whose generating units are in more than `cap` records in all. When the rarest unit is in at most `cap` records,
 * the records of the rarest generating units whose frequencies sum to at most `cap` come first: a record holding one
 * of them outscores every record holding only more common units, unless much longer. Otherwise every unit is common
 * and the records holding all of them come first: they have the largest sum of idf, so the best-ranked records are
 * among them unless those are much longer (max-score's bound, without reading each record's length). Undefined when
 * the candidates need no order: they all fit, or no subset of them is better.
 */
export function preferredCandidates(
  ranked: readonly RankedUnit[],
  expansionOf: (stem: string) => readonly string[] | undefined,
  cap: number,
): string | undefined {
  const generating = ranked.filter((unit) => unit.generates);
  const total = generating.reduce((sum, unit) => sum + unit.documents, 0);
  if (total <= cap || ranked.length === 0) return undefined;
  const candidate = (unit: RankedUnit) => candidateTsquery(unit, expansionOf(unit.terms[0] as string));
  if ((ranked[0] as RankedUnit).documents <= cap) {
    let sum = 0;
    const first = generating.filter((unit) => {
      sum += unit.documents;
      return sum <= cap;
    });
    return first.length < generating.length ? first.map(candidate).join(" | ") : undefined;
  }
  return ranked.length > 1 ? ranked.map(candidate).join(" & ") : undefined;
}

/**
 * The CJK words of a query that are a single character. CJK text is indexed as character pairs, so such a word is
 * found only where it stands alone: a search that finds nothing says so (issue 40 item 10).
 */
export function singleCjkCharacters(query: string): string[] {
  const out: string[] = [];
  for (const segment of segments(query))
    if (segment.kind === "cjk" && segment.units.length === 1) out.push(segment.units[0] as string);
  return out;
}
