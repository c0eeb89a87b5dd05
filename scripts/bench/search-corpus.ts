/**
 * Synthetic texts for the search scale benchmark (scripts/bench/search-scale.ts): a Zipf-distributed vocabulary of
 * made-up Latin-script words, identifiers (paths, snake_case names, hex hashes) and CJK runs, so that the index holds
 * very common, middling and unique terms the way real transcripts do. Nothing here is taken from or fitted to LoCoMo.
 *
 * - Latin: 20 English function words take the top ranks (as in any English text; the query side drops them as stop
 *   words), then {@link LATIN_WORDS} pseudo-words of 1-4 syllables. A word's probability is proportional to
 *   1 / rank^{@link ZIPF_EXPONENT} (Zipf's law; ~1 for natural language), so with about 70 words per record rank 21 is
 *   in about a quarter of the records, rank 1,000 in about 0.6% and rank 40,000 in a few of a million.
 * - Identifiers: about a third of the records carry a path `src/<word>/<word>_<word>.ts` or a snake_case name built
 *   from mid-rank words, and a fifth a 12-hex-digit hash unique to the record.
 * - CJK: a tenth of the records carry a run of {@link CJK_WORDS} 2-3 character words over 600 common Han characters,
 *   also Zipf-distributed, written without spaces as CJK text is.
 */
import { seededRandom } from "./common.js";

export const ZIPF_EXPONENT = 1.0;
export const LATIN_WORDS = 50_000;
export const CJK_WORDS = 5_000;

const FUNCTION_WORDS = "the of and to a in is it that for was on with as be at by this have from".split(" ");
const ONSETS = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr", "pl"];
const VOWELS = ["a", "e", "i", "o", "u", "ae", "io"];
const CODAS = ["", "", "", "n", "r", "s", "l", "x", "m"];
// 600 Han characters from the CJK Unified Ideographs block (common ones sit low in it, but any fixed set will do).
const HAN = Array.from({ length: 600 }, (_, k) => String.fromCodePoint(0x4e00 + ((k * 37) % 2000)));

/** Cumulative Zipf weights for ranks 1..n, for sampling by binary search. */
function zipfTable(n: number): Float64Array {
  const table = new Float64Array(n);
  let sum = 0;
  for (let r = 0; r < n; r++) {
    sum += 1 / (r + 1) ** ZIPF_EXPONENT;
    table[r] = sum;
  }
  for (let r = 0; r < n; r++) table[r] = (table[r] as number) / sum;
  return table;
}

function sampleRank(table: Float64Array, u: number): number {
  let lo = 0;
  let hi = table.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((table[mid] as number) < u) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

export interface Vocabulary {
  /** Latin words by rank (0 = most frequent). */
  readonly latin: readonly string[];
  readonly cjk: readonly string[];
  readonly latinTable: Float64Array;
  readonly cjkTable: Float64Array;
}

/** The vocabulary of a seed: the same seed gives the same words in the same ranks. */
export function buildVocabulary(seed: number): Vocabulary {
  const random = seededRandom(seed * 7919 + 11);
  const pick = <T>(list: readonly T[]) => list[Math.floor(random() * list.length)] as T;
  const seen = new Set<string>(FUNCTION_WORDS);
  const latin = [...FUNCTION_WORDS];
  while (latin.length < LATIN_WORDS) {
    const syllables = 1 + Math.floor(random() * 4);
    let word = "";
    for (let s = 0; s < syllables; s++) word += pick(ONSETS) + pick(VOWELS) + (s === syllables - 1 ? pick(CODAS) : "");
    if (word.length < 3 || seen.has(word)) continue;
    seen.add(word);
    latin.push(word);
  }
  const cjkSeen = new Set<string>();
  const cjk: string[] = [];
  while (cjk.length < CJK_WORDS) {
    const length = random() < 0.7 ? 2 : 3;
    let word = "";
    for (let c = 0; c < length; c++) word += pick(HAN);
    if (cjkSeen.has(word)) continue;
    cjkSeen.add(word);
    cjk.push(word);
  }
  return { latin, cjk, latinTable: zipfTable(latin.length), cjkTable: zipfTable(cjk.length) };
}

/** A record's unique hash: 12 hex digits from its global number (a bijective mix, so no two records share one). */
export function recordHash(n: number, seed: number): string {
  let h = (n ^ Math.imul(seed, 0x9e3779b9)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0;
  h = (h ^ (h >>> 16)) >>> 0;
  return `${h.toString(16).padStart(8, "0")}${(n % 65536).toString(16).padStart(4, "0")}`;
}

export type CorpusKind = "user" | "assistant" | "tool_call" | "tool_result";

export interface CorpusRecord {
  readonly kind: CorpusKind;
  readonly content: string;
  readonly hash: string | null;
}

/** Whether record n carries its hash (a fifth of them; the benchmark's rare queries pick among these). */
export function carriesHash(n: number): boolean {
  return n % 5 === 2;
}

/** Record n of the corpus: its kind follows its position in the turn, its words come from its own random stream. */
export function corpusRecord(vocabulary: Vocabulary, n: number, positionInTurn: number, seed: number): CorpusRecord {
  const random = seededRandom(seed * 1_000_003 + n);
  const latinWord = () => vocabulary.latin[sampleRank(vocabulary.latinTable, random())] as string;
  // Identifiers use words of middling rank (100..5,000): names are neither function words nor one-offs.
  const midWord = () => vocabulary.latin[100 + Math.floor(random() * 4900)] as string;
  // Lengths: mostly short messages, some long tool output (about 10 to 250 words).
  const words = 10 + Math.floor(random() ** 3 * 240);
  const parts: string[] = [];
  for (let w = 0; w < words; w++) {
    parts.push(latinWord());
    if (w % 12 === 11) parts[parts.length - 1] += ".";
  }
  const insert = (text: string) => parts.splice(Math.floor(random() * parts.length), 0, text);
  if (random() < 0.15) insert(`src/${midWord()}/${midWord()}_${midWord()}.ts`);
  if (random() < 0.2) insert(`${midWord()}_${midWord()}`);
  const hash = carriesHash(n) ? recordHash(n, seed) : null;
  if (hash) insert(hash);
  if (random() < 0.1) {
    const run = 3 + Math.floor(random() * 10);
    let text = "";
    for (let c = 0; c < run; c++) text += vocabulary.cjk[sampleRank(vocabulary.cjkTable, random())];
    insert(`${text}。`);
  }
  const kinds: CorpusKind[] = ["user", "tool_call", "tool_result", "assistant"];
  return { kind: kinds[positionInTurn % 4] as CorpusKind, content: parts.join(" "), hash };
}
