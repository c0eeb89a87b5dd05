import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  MAX_POSITION,
  MAX_POSITIONS_PER_TERM,
  MAX_QUERY_TERMS,
  MAX_TERM_BYTES,
  MAX_TOKENS,
  queryGroups,
  segments,
  type Token,
  tokenize,
  toTsqueryLiteral,
  toTsvectorLiteral,
  unicodeSegments,
  utf8Length,
} from "../../src/core/tokenize.js";

const terms = (text: string): string[] => tokenize(text).map((t) => t.term);

/** Reads a tsvector literal back the way Postgres does (`''` is `'`, `\x` is `x`), checking its shape on the way. */
function parseTsvector(literal: string): Map<string, number[]> {
  const result = new Map<string, number[]>();
  if (literal === "") return result;
  const entry = /'((?:[^'\\]|''|\\[\s\S])*)':(\d+(?:,\d+)*)(?: |$)/y;
  let at = 0;
  while (at < literal.length) {
    entry.lastIndex = at;
    const match = entry.exec(literal);
    if (!match) throw new Error(`bad tsvector literal at ${at}: ${literal.slice(at, at + 40)}`);
    const term = (match[1] as string).replace(/''|\\([\s\S])/g, (all, escaped: string | undefined) =>
      all === "''" ? "'" : (escaped as string),
    );
    result.set(term, (match[2] as string).split(",").map(Number));
    at = entry.lastIndex;
  }
  return result;
}

/** Checks the shape `T & (T <-> T) & …` of a tsquery literal and returns its terms, unescaped. */
function parseTsquery(literal: string): string[] {
  const found: string[] = [];
  const skeleton = literal.replace(/'((?:[^'\\]|''|\\[\s\S])*)'/g, (_all, body: string) => {
    found.push(
      body.replace(/''|\\([\s\S])/g, (all, escaped: string | undefined) => (all === "''" ? "'" : (escaped ?? ""))),
    );
    return "T";
  });
  expect(skeleton).toMatch(/^(T|\(T( <-> T)+\))( & (T|\(T( <-> T)+\)))*$/);
  return found;
}

/** What Postgres's `@@` answers for our queries: every group occurs as a run of consecutive positions. */
function matches(tokens: readonly Token[], query: string): boolean {
  const positions = new Map<string, Set<number>>();
  for (const { term, position } of tokens) {
    const set = positions.get(term) ?? new Set<number>();
    set.add(position);
    positions.set(term, set);
  }
  const groups = queryGroups(query);
  if (groups.length === 0) return false;
  return groups.every((group) =>
    [...(positions.get(group[0] as string) ?? [])].some((start) =>
      group.every((term, k) => positions.get(term)?.has(start + k) ?? false),
    ),
  );
}

describe("tokenize: CJK bigrams", () => {
  it("splits a Chinese run into overlapping bigrams and keeps Latin words whole", () => {
    expect(tokenize("部署脚本用 pnpm 而不是 npm")).toEqual([
      { term: "部署", position: 1 },
      { term: "署脚", position: 2 },
      { term: "脚本", position: 3 },
      { term: "本用", position: 4 },
      { term: "pnpm", position: 5 },
      { term: "而不", position: 6 },
      { term: "不是", position: 7 },
      { term: "npm", position: 8 },
    ]);
  });

  it("finds a 2-character Chinese word inside a longer run", () => {
    expect(toTsqueryLiteral("部署")).toBe("'部署'");
    expect(matches(tokenize("部署脚本用 pnpm 而不是 npm"), "部署")).toBe(true);
    expect(matches(tokenize("部署脚本用 pnpm 而不是 npm"), "脚本")).toBe(true);
    expect(matches(tokenize("部署脚本用 pnpm 而不是 npm"), "部本")).toBe(false);
  });

  it("asks for any word, without function words, when match is any", () => {
    expect(toTsqueryLiteral("What did Caroline paint?")).toBe("'what' & 'did' & 'caroline' & 'paint'");
    expect(toTsqueryLiteral("What did Caroline paint?", "any")).toBe("'caroline' | 'paint'");
    expect(toTsqueryLiteral("what is it", "any")).toBe("'what' | 'is' | 'it'");
    expect(toTsqueryLiteral("pnpm 部署脚本", "any")).toBe("'pnpm' | ('部署' <-> '署脚' <-> '脚本')");
  });

  it("makes a 1-character run a single term", () => {
    expect(terms("用 x 第3章")).toEqual(["用", "x", "第", "3", "章"]);
    expect(toTsqueryLiteral("用")).toBe("'用'");
  });

  it("bigrams Japanese across kana and kanji, keeping ー inside katakana words", () => {
    const tokens = tokenize("このデータベースは遅いです");
    expect(tokens.map((t) => t.term)).toEqual([
      "この",
      "のデ",
      "デー",
      "ータ",
      "タベ",
      "ベー",
      "ース",
      "スは",
      "は遅",
      "遅い",
      "いで",
      "です",
    ]);
    expect(toTsqueryLiteral("データベース")).toBe("('デー' <-> 'ータ' <-> 'タベ' <-> 'ベー' <-> 'ース')");
    expect(matches(tokens, "データベース")).toBe(true);
    expect(matches(tokens, "遅い")).toBe(true);
    expect(matches(tokens, "データース")).toBe(false);
  });

  it("bigrams Korean words, so a word is found before its particle", () => {
    const tokens = tokenize("우리는 데이터베이스를 바꿨다");
    expect(tokens.map((t) => t.term)).toEqual([
      "우리",
      "리는",
      "데이",
      "이터",
      "터베",
      "베이",
      "이스",
      "스를",
      "바꿨",
      "꿨다",
    ]);
    expect(matches(tokens, "데이터베이스")).toBe(true);
    expect(matches(tokens, "데이터 바꿨다")).toBe(true);
    expect(matches(tokens, "베이스볼")).toBe(false);
  });

  it("treats CJK punctuation and the katakana middle dot as separators", () => {
    expect(terms("部署。脚本、データ・ベース「テスト」")).toEqual([
      "部署",
      "脚本",
      "デー",
      "ータ",
      "ベー",
      "ース",
      "テス",
      "スト",
    ]);
  });

  it("separates CJK runs from adjacent Latin words and digits", () => {
    expect(terms("用pnpm部署v2版本")).toEqual(["用", "pnpm", "部署", "v2", "版本"]);
  });
});

describe("tokenize: normalization and Latin words", () => {
  it("folds full-width Latin and digits (NFKC) and lowercases", () => {
    expect(terms("ＡＢＣ １２３ Ｈｅｌｌｏ")).toEqual(["abc", "123", "hello"]);
    expect(toTsqueryLiteral("ＡＢＣ")).toBe(toTsqueryLiteral("abc"));
  });

  it("folds half-width katakana, with its voicing marks, to full-width", () => {
    expect(terms("ﾃﾞｰﾀﾍﾞｰｽ")).toEqual(terms("データベース"));
    expect(matches(tokenize("このデータベースは遅い"), "ﾃﾞｰﾀﾍﾞｰｽ")).toBe(true);
  });

  it("composes decomposed accents and ignores invisible joiners and variation selectors", () => {
    expect(terms("Cafe\u0301")).toEqual(["café"]);
    expect(terms("co\u00ADoperate")).toEqual(["cooperate"]);
    expect(terms("葛\u{E0100}城")).toEqual(["葛城"]);
  });

  it("splits on punctuation, including apostrophes, hyphens, dots and slashes", () => {
    expect(terms("foo-bar a.b/c O'Reilly's C:\\temp\\x it’s")).toEqual([
      "foo",
      "bar",
      "a",
      "b",
      "c",
      "o",
      "reilly",
      "s",
      "c",
      "temp",
      "x",
      "it",
      "s",
    ]);
  });

  it("keeps identifiers joined by _ whole and also indexes their parts", () => {
    expect(tokenize("set max_tokens now")).toEqual([
      { term: "set", position: 1 },
      { term: "max_tokens", position: 2 },
      { term: "max", position: 3 },
      { term: "tokens", position: 4 },
      { term: "now", position: 5 },
    ]);
    expect(terms("__init__ _private")).toEqual(["init", "private"]);
    expect(toTsqueryLiteral("max_tokens")).toBe("'max_tokens'");
    expect(matches(tokenize("set max_tokens now"), "tokens")).toBe(true);
    expect(matches(tokenize("max tokens"), "max_tokens")).toBe(false);
  });

  it("does not make words of symbols, stray marks or emoji", () => {
    expect(terms("→ \u0301 😀 ** <> ||")).toEqual([]);
    expect(toTsqueryLiteral("-- !!! ...")).toBeUndefined();
    expect(toTsqueryLiteral("")).toBeUndefined();
  });

  it("drops (does not truncate) terms longer than 2046 UTF-8 bytes", () => {
    expect(terms(`a ${"x".repeat(MAX_TERM_BYTES)} b`)).toEqual(["a", "x".repeat(MAX_TERM_BYTES), "b"]);
    expect(terms(`a ${"x".repeat(MAX_TERM_BYTES + 1)} b`)).toEqual(["a", "b"]);
    expect(terms(`${"é".repeat(MAX_TERM_BYTES / 2)}`)).toHaveLength(1);
    expect(terms(`${"é".repeat(MAX_TERM_BYTES / 2 + 1)}`)).toEqual([]);
    expect(toTsqueryLiteral("y".repeat(MAX_TERM_BYTES + 1))).toBeUndefined();
    // An over-long identifier still yields its parts, on both sides.
    const long = `${"k".repeat(MAX_TERM_BYTES)}_v`;
    expect(terms(long)).toEqual(["k".repeat(MAX_TERM_BYTES), "v"]);
    expect(matches(tokenize(long), long)).toBe(true);
  });
});

describe("tokenize: positions and limits", () => {
  it("numbers tokens 1, 2, 3, … across words and bigrams", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme", maxLength: 200 }), (text) => {
        tokenize(text).forEach((token, i) => {
          expect(token.position).toBe(i + 1);
        });
      }),
    );
  });

  it(`caps a text at ${MAX_TOKENS} tokens and clamps positions at ${MAX_POSITION}`, () => {
    const text = Array.from({ length: 60_000 }, (_, i) => `w${i % 10}`).join(" ");
    const tokens = tokenize(text);
    expect(tokens).toHaveLength(MAX_TOKENS);
    expect(tokens[MAX_POSITION - 2]?.position).toBe(MAX_POSITION - 1);
    expect(tokens[MAX_POSITION - 1]?.position).toBe(MAX_POSITION);
    expect(tokens[MAX_TOKENS - 1]).toEqual({ term: "w9", position: MAX_POSITION });
    const parsed = parseTsvector(toTsvectorLiteral(tokens));
    expect(parsed.get("w0")).toHaveLength(MAX_POSITIONS_PER_TERM);
  });

  it("stops before the distinct terms overflow a tsvector (1 MiB of lexemes and positions)", () => {
    const text = Array.from({ length: 50_000 }, (_, i) => `${i.toString(36).padStart(8, "0")}${"q".repeat(32)}`).join(
      " ",
    );
    const tokens = tokenize(text);
    expect(tokens.length).toBeLessThan(MAX_TOKENS);
    expect(tokens.length).toBeGreaterThan(20_000);
    expect(() => toTsvectorLiteral(tokens)).not.toThrow();
  });

  it("produces terms that are non-empty, short enough, and stable under re-tokenizing", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 80 }), (text) => {
        for (const { term } of tokenize(text)) {
          expect(term.length).toBeGreaterThan(0);
          expect(utf8Length(term)).toBeLessThanOrEqual(MAX_TERM_BYTES);
          expect(term).not.toMatch(/[\s'\\]|\p{Cs}/u);
          expect(term.includes("\u0000")).toBe(false);
          expect(tokenize(term)[0]?.term).toBe(term);
        }
        expect(() => toTsvectorLiteral(tokenize(text))).not.toThrow();
      }),
      { numRuns: 3000 },
    );
  });
});

describe("tokenize: the ASCII path", () => {
  // Every ASCII character class the rules distinguish: letters of both cases, digits, `_`, punctuation, symbols,
  // whitespace and control characters.
  const asciiText = fc.string({
    unit: fc.oneof(
      fc.constantFrom(..."aZ9_ _-.'/\\\t\n\u0000\u007f~!"),
      fc.integer({ min: 0, max: 0x7f }).map((c) => String.fromCharCode(c)),
    ),
    maxLength: 80,
  });

  it("segments ASCII text exactly as the general Unicode rules do", () => {
    fc.assert(
      fc.property(asciiText, (text) => {
        expect([...segments(text)]).toEqual([...unicodeSegments(text)]);
      }),
      { numRuns: 2000 },
    );
  });

  it("takes the general rules for any text with a non-ASCII character", () => {
    expect(terms("Straße max_tokens")).toEqual(["straße", "max_tokens", "max", "tokens"]);
    expect(terms("ＡＢＣ abc")).toEqual(["abc", "abc"]);
  });
});

describe("toTsvectorLiteral", () => {
  it("quotes lexemes, doubling ' and escaping \\", () => {
    const literal = toTsvectorLiteral([
      { term: "o'reilly", position: 1 },
      { term: "c:\\temp", position: 2 },
      { term: "it''s\\'", position: 3 },
    ]);
    expect(literal).toBe("'c:\\\\temp':2 'it''''s\\\\''':3 'o''reilly':1");
  });

  it("merges, sorts, deduplicates and clamps positions per term", () => {
    const literal = toTsvectorLiteral([
      { term: "term", position: 5 },
      { term: "other", position: 2 },
      { term: "term", position: 1 },
      { term: "term", position: 5 },
      { term: "term", position: 20_000 },
      { term: "term", position: MAX_POSITION },
    ]);
    expect(literal).toBe(`'other':2 'term':1,5,${MAX_POSITION}`);
  });

  it("keeps the lowest 256 positions of a term, as Postgres does", () => {
    const tokens = Array.from({ length: 300 }, (_, i) => ({ term: "a", position: 300 - i }));
    expect(parseTsvector(toTsvectorLiteral(tokens)).get("a")).toEqual(
      Array.from({ length: MAX_POSITIONS_PER_TERM }, (_, i) => i + 1),
    );
  });

  it("orders lexemes by UTF-8 bytes (Postgres's order), not by UTF-16 code units", () => {
    const literal = toTsvectorLiteral([
      { term: "😀", position: 1 },
      { term: "\uE000", position: 2 },
      { term: "ab", position: 3 },
      { term: "a", position: 4 },
      { term: "b", position: 5 },
    ]);
    expect(literal).toBe("'a':4 'ab':3 'b':5 '\uE000':2 '😀':1");
  });

  it("gives '' for no tokens", () => {
    expect(toTsvectorLiteral([])).toBe("");
    expect(toTsvectorLiteral(tokenize(" -- ."))).toBe("");
  });

  it.each([
    ["an empty term", [{ term: "", position: 1 }]],
    ["a term over 2046 bytes", [{ term: "é".repeat(1024), position: 1 }]],
    ["a NUL", [{ term: "a\u0000b", position: 1 }]],
    ["a lone surrogate", [{ term: "a\uD800", position: 1 }]],
    ["position 0", [{ term: "a", position: 0 }]],
    ["a fractional position", [{ term: "a", position: 1.5 }]],
    [
      "more than 1 MiB of lexemes",
      Array.from({ length: 600 }, (_, i) => ({ term: `${i}${"z".repeat(2000)}`, position: 1 })),
    ],
  ])("rejects %s", (_label, tokens) => {
    expect(() => toTsvectorLiteral(tokens)).toThrow(RangeError);
  });

  it("round-trips arbitrary terms and positions through the literal syntax", () => {
    const term = fc
      .string({
        unit: fc.constantFrom("'", "\\", " ", ":", ",", "a", "é", "部", "😀", "\n"),
        minLength: 1,
        maxLength: 8,
      })
      .filter((t) => t.length > 0);
    fc.assert(
      fc.property(fc.array(fc.record({ term, position: fc.integer({ min: 1, max: 20_000 }) })), (tokens) => {
        const expected = new Map<string, number[]>();
        for (const { term, position } of tokens) {
          expected.set(term, [...(expected.get(term) ?? []), Math.min(position, MAX_POSITION)]);
        }
        const parsed = parseTsvector(toTsvectorLiteral(tokens));
        expect([...parsed.keys()].sort()).toEqual([...expected.keys()].sort());
        for (const [key, list] of expected) {
          expect(parsed.get(key)).toEqual([...new Set(list)].sort((a, b) => a - b).slice(0, MAX_POSITIONS_PER_TERM));
        }
      }),
      { numRuns: 500 },
    );
  });
});

describe("toTsqueryLiteral", () => {
  it("ANDs words and makes each CJK run a phrase of its bigrams", () => {
    expect(toTsqueryLiteral("部署脚本 用 pnpm")).toBe("('部署' <-> '署脚' <-> '脚本') & '用' & 'pnpm'");
    expect(toTsqueryLiteral("데이터베이스")).toBe("('데이' <-> '이터' <-> '터베' <-> '베이' <-> '이스')");
    expect(toTsqueryLiteral("O'Reilly")).toBe("'o' & 'reilly'");
    expect(toTsqueryLiteral("npm NPM npm")).toBe("'npm'");
  });

  it("always has the shape T & (T <-> T) & … with correctly quoted terms", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 60 }), (query) => {
        const literal = toTsqueryLiteral(query);
        if (literal === undefined) {
          expect(tokenize(query)).toEqual([]);
          return;
        }
        expect(new Set(parseTsquery(literal))).toEqual(new Set(queryGroups(query).flat()));
      }),
      { numRuns: 3000 },
    );
  });

  it(`keeps at most ${MAX_QUERY_TERMS} terms`, () => {
    const query = Array.from({ length: 3000 }, (_, i) => `w${i}`).join(" ");
    expect(queryGroups(query).flat()).toHaveLength(MAX_QUERY_TERMS);
    expect(queryGroups("部署脚本".repeat(1000)).flat()).toHaveLength(MAX_QUERY_TERMS);
  });
});

describe("queries made of whole words of a text find the text", () => {
  const latin = fc.oneof(
    fc.stringMatching(/^[A-Za-z][A-Za-z0-9]{0,7}$/),
    fc.stringMatching(/^[a-z]{1,4}_[a-z0-9]{1,4}$/),
    fc.constantFrom("ＡＢＣ", "Café", "naïve", "straße", "v2"),
  );
  const cjk = fc
    .array(fc.constantFrom(..."部署脚本用而不是数据库のデータベースは遅いですー우리는데이터베이스를바꿨다ﾃｰﾀｽ"), {
      minLength: 1,
      maxLength: 8,
    })
    .map((chars) => chars.join(""));
  const separator = fc.constantFrom(" ", "-", ".", "/", ", ", "\n", "'", "\u3000", "、", "。", "「");
  const text = fc.array(fc.tuple(fc.oneof(latin, cjk), separator), { minLength: 1, maxLength: 12 });

  it("every query term is among the text's terms, and every phrase occurs at consecutive positions", () => {
    fc.assert(
      fc.property(text, fc.nat(), fc.nat(), (parts, a, b) => {
        // Build the text, remembering where each word or run starts and ends.
        let source = "";
        const spans: [number, number][] = [];
        for (const [word, sep] of parts) {
          spans.push([source.length, source.length + word.length]);
          source += word + sep;
        }
        const i = a % spans.length;
        const j = i + (b % (spans.length - i));
        const query = source.slice((spans[i] as [number, number])[0], (spans[j] as [number, number])[1]);
        const tokens = tokenize(source);
        const literal = toTsqueryLiteral(query);
        expect(literal).toBeDefined();
        const textTerms = new Set(tokens.map((t) => t.term));
        for (const term of parseTsquery(literal as string)) expect(textTerms).toContain(term);
        expect(matches(tokens, query)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it("a CJK run of 2+ characters contributes exactly its bigrams, all found in the text's bigrams", () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(cjk, separator), { minLength: 1, maxLength: 6 }), fc.nat(), (parts, k) => {
        const source = parts.map(([run, sep]) => run + sep).join("");
        const [run] = parts[k % parts.length] as [string, string];
        const chars = [...run.normalize("NFKC")];
        fc.pre(chars.length >= 2);
        const bigrams = chars.slice(1).map((c, n) => (chars[n] as string) + c);
        expect(queryGroups(run)).toEqual([bigrams]);
        const textTerms = new Set(terms(source));
        for (const bigram of bigrams) expect(textTerms).toContain(bigram);
      }),
      { numRuns: 1000 },
    );
  });

  it("does not find a word the text lacks", () => {
    fc.assert(
      fc.property(text, (parts) => {
        const source = parts.map(([word, sep]) => word + sep).join("");
        expect(matches(tokenize(source), "zzzabsent")).toBe(false);
        expect(matches(tokenize(source), "猫猫")).toBe(false);
      }),
    );
  });
});
