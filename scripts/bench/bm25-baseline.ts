/**
 * The LoCoMo bench's reference ranking (issue 10 item 6): Okapi BM25 over the verbatim dialogue turns of one
 * conversation, with its own tokenizer, so that the product's search is compared with a baseline it cannot share a
 * bug with. Nothing here is imported from src/.
 *
 * - tokens: NFKC, lowercase; a Latin (non-CJK) word is a maximal run of letters, digits and marks; a CJK run (Han,
 *   Hiragana, Katakana, Hangul) gives its overlapping character bigrams (a single character stays itself); no stop
 *   words, no stemming;
 * - BM25 with k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5)), document length in tokens; every query
 *   token counts once per occurrence in the query.
 */

const CJK = /[\p{sc=Han}\p{sc=Hiragana}\p{sc=Katakana}\p{sc=Hangul}]/u;
const RUN = /[\p{L}\p{N}\p{M}]+/gu;

export function baselineTokens(text: string): string[] {
  const tokens: string[] = [];
  let latin = "";
  let cjk: string[] = [];
  const flushLatin = () => {
    if (latin) tokens.push(latin);
    latin = "";
  };
  const flushCjk = () => {
    if (cjk.length === 1) tokens.push(cjk[0] as string);
    for (let i = 0; i + 1 < cjk.length; i++) tokens.push(`${cjk[i]}${cjk[i + 1]}`);
    cjk = [];
  };
  for (const [run] of text.normalize("NFKC").toLowerCase().matchAll(RUN)) {
    for (const character of run) {
      if (CJK.test(character)) {
        flushLatin();
        cjk.push(character);
      } else {
        flushCjk();
        latin += character;
      }
    }
    flushLatin();
    flushCjk();
  }
  return tokens;
}

export interface Bm25Index {
  /** Indices of the documents in descending score, ties by document order; documents scoring 0 are left out. */
  top(query: string, k: number): number[];
}

export function bm25Index(documents: readonly string[], k1 = 1.2, b = 0.75): Bm25Index {
  const frequencies = documents.map((text) => {
    const counts = new Map<string, number>();
    const tokens = baselineTokens(text);
    for (const token of tokens) counts.set(token, (counts.get(token) ?? 0) + 1);
    return { counts, length: tokens.length };
  });
  const df = new Map<string, number>();
  for (const { counts } of frequencies) for (const term of counts.keys()) df.set(term, (df.get(term) ?? 0) + 1);
  const n = documents.length;
  const average = frequencies.reduce((sum, d) => sum + d.length, 0) / Math.max(1, n);
  const idf = (term: string) => {
    const f = df.get(term) ?? 0;
    return Math.log(1 + (n - f + 0.5) / (f + 0.5));
  };
  return {
    top(query, k) {
      const terms = baselineTokens(query);
      const scores = frequencies.map(({ counts, length }) => {
        let score = 0;
        for (const term of terms) {
          const tf = counts.get(term) ?? 0;
          if (tf > 0) score += (idf(term) * tf * (k1 + 1)) / (tf + k1 * (1 - b + (b * length) / average));
        }
        return score;
      });
      return scores
        .map((score, index) => ({ score, index }))
        .filter((entry) => entry.score > 0)
        .sort((x, y) => y.score - x.score || x.index - y.index)
        .slice(0, k)
        .map((entry) => entry.index);
    },
  };
}
