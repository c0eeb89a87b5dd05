/**
 * Strings that go into PostgreSQL `text` and `jsonb` columns (identifiers, titles, queries, attributes), as opposed to
 * payloads, which are stored as bytes and keep anything. `text` cannot hold U+0000 (22021), `jsonb` refuses the escape
 * `\u0000` (22P05), and neither can hold a lone surrogate: node-postgres encodes one as U+FFFD in text (so two
 * different IDs would become the same) and JSON.stringify writes `\ud800`, which jsonb refuses (22P02).
 */

/** Why `value` cannot be stored exactly in a text column, or undefined when it can. */
export function unstorableTextProblem(value: string): string | undefined {
  const nul = value.indexOf("\u0000");
  if (nul >= 0) return `contains U+0000 (NUL) at character ${nul}, which PostgreSQL text cannot store; remove it`;
  // With the u flag a well-formed pair is one astral code point, so \p{Cs} matches only unpaired surrogates.
  const lone = /\p{Cs}/u.exec(value);
  if (lone) {
    return `contains an unpaired UTF-16 surrogate at character ${lone.index} (ill-formed text), which UTF-8 cannot store; send well-formed text`;
  }
  return undefined;
}

/**
 * A text that can always be stored: U+0000 becomes U+2400 (␀, the symbol the summarizer shows for NUL too) and each
 * unpaired surrogate becomes U+FFFD, as UTF-8 encoding of a payload does. For copies of text whose exact form is kept
 * elsewhere (a turn's query is a copy of its user record's payload).
 */
export function storableText(value: string): string {
  return value.replaceAll("\u0000", "\u2400").replace(/\p{Cs}/gu, "\uFFFD");
}

/** One place in a JSON value that jsonb cannot store, named by its path below the value (`.a.b[2]`). */
export interface JsonProblem {
  readonly path: readonly (string | number)[];
  readonly problem: string;
}

/**
 * Every place where `value` cannot be stored exactly as jsonb: keys and strings that text cannot hold, and values JSON
 * has no form for (a BigInt, a function, a symbol, a non-finite number, a circular reference). At most `limit` problems.
 */
export function jsonbProblems(value: unknown, limit = 10): JsonProblem[] {
  const problems: JsonProblem[] = [];
  const ancestors = new Set<object>();
  const visit = (node: unknown, path: (string | number)[]): void => {
    if (problems.length >= limit) return;
    const add = (problem: string) => problems.push({ path: [...path], problem });
    if (typeof node === "string") {
      const problem = unstorableTextProblem(node);
      if (problem) add(problem);
    } else if (typeof node === "number") {
      if (!Number.isFinite(node)) add(`is ${node}, which JSON cannot hold (it would become null)`);
    } else if (typeof node === "bigint" || typeof node === "function" || typeof node === "symbol") {
      add(`is a ${typeof node}, which JSON cannot hold`);
    } else if (node !== null && typeof node === "object") {
      if (ancestors.has(node)) {
        add("is a circular reference, which JSON cannot hold");
        return;
      }
      if (typeof (node as { toJSON?: unknown }).toJSON === "function") return; // Date and the like: serialized as given
      ancestors.add(node);
      if (Array.isArray(node)) {
        node.forEach((item, index) => {
          visit(item, [...path, index]);
        });
      } else {
        for (const [key, item] of Object.entries(node)) {
          const keyProblem = unstorableTextProblem(key);
          // A bad key is named JSON-escaped, so the error message itself stays storable (adapters record it).
          const segment = keyProblem ? JSON.stringify(key) : key;
          if (keyProblem) problems.push({ path: [...path, segment], problem: `its key ${keyProblem}` });
          visit(item, [...path, segment]);
        }
      }
      ancestors.delete(node);
    }
  };
  visit(value, []);
  return problems;
}
