/**
 * Strings that go into PostgreSQL `text` and `jsonb` columns (identifiers, titles, queries, attributes), as opposed to
 * payloads, which are stored as bytes and keep anything. `text` cannot hold U+0000 (22021), `jsonb` refuses the escape
 * `\u0000` (22P05), and neither can hold an unpaired surrogate: node-postgres encodes one as U+FFFD in text (so two
 * different IDs would become the same) and JSON.stringify writes `\ud800`, which jsonb refuses (22P02).
 */

export const NUL_PROBLEM = "contains U+0000 (NUL), which PostgreSQL text cannot store; remove it";
export const UNPAIRED_SURROGATE_PROBLEM =
  "contains an unpaired UTF-16 surrogate (ill-formed text), which UTF-8 cannot store; send well-formed text";

/** Text with no U+0000. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is exactly the character this refuses
export const NO_NUL = /^[^\u0000]*$/;
/** Text with no unpaired surrogate: with the u flag a well-formed pair is one code point, so \p{Cs} is only unpaired. */
export const NO_UNPAIRED_SURROGATE = /^\P{Cs}*$/u;

/** Why `value` cannot be stored exactly in a text column, or undefined when it can. */
export function unstorableTextProblem(value: string): string | undefined {
  if (value.includes("\u0000")) return NUL_PROBLEM;
  if (!NO_UNPAIRED_SURROGATE.test(value)) return UNPAIRED_SURROGATE_PROBLEM;
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
 * One walk with a shared path stack: attributes ride along with every ingested record, so the clean case stays cheap.
 */
export function jsonbProblems(value: unknown, limit = 10): JsonProblem[] {
  const problems: JsonProblem[] = [];
  const path: (string | number)[] = [];
  const ancestors: object[] = [];
  const add = (problem: string) => {
    problems.push({ path: [...path], problem });
  };
  const visit = (node: unknown): void => {
    switch (typeof node) {
      case "string": {
        const problem = unstorableTextProblem(node);
        if (problem) add(problem);
        return;
      }
      case "number":
        if (!Number.isFinite(node)) add(`is ${node}, which JSON cannot hold (it would become null)`);
        return;
      case "bigint":
      case "function":
      case "symbol":
        add(`is a ${typeof node}, which JSON cannot hold`);
        return;
      case "object":
        break;
      default:
        return;
    }
    if (node === null) return;
    if (ancestors.includes(node)) {
      add("is a circular reference, which JSON cannot hold");
      return;
    }
    if (typeof (node as { toJSON?: unknown }).toJSON === "function") return; // Date and the like: serialized as given
    ancestors.push(node);
    if (Array.isArray(node)) {
      for (let index = 0; index < node.length && problems.length < limit; index++) {
        path.push(index);
        visit(node[index]);
        path.pop();
      }
    } else {
      for (const key of Object.keys(node)) {
        if (problems.length >= limit) break;
        const keyProblem = unstorableTextProblem(key);
        // A bad key is named JSON-escaped, so the error message itself stays storable (adapters record it).
        path.push(keyProblem ? JSON.stringify(key) : key);
        if (keyProblem) add(`its key ${keyProblem}`);
        visit((node as Record<string, unknown>)[key]);
        path.pop();
      }
    }
    ancestors.pop();
  };
  visit(value);
  return problems.slice(0, limit);
}
