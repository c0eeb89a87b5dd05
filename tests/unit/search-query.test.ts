import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { distinctPlaces, type PlaceHit, type Span } from "../../src/core/search-places.js";
import {
  CANDIDATE_TARGET,
  candidateTsquery,
  idf,
  lengthFactor,
  lightStem,
  MAX_QUERY_UNITS,
  MIN_PREFIX_LETTERS,
  PREFIX_EXPANSION_TERMS,
  planRanking,
  preferredCandidates,
  queryUnits,
  STOP_WORDS,
} from "../../src/core/search-query.js";

const termsOf = (query: string) => queryUnits(query).map((unit) => unit.terms.join(" "));

describe("queryUnits", () => {
  it("drops stop words and the fragments an apostrophe leaves, keeping content words in order", () => {
    expect(termsOf("When did Caroline's sister go to the LGBTQ conference?")).toEqual([
      "caroline",
      "sister",
      "go",
      "lgbtq",
      "conference",
    ]);
    expect(termsOf("I've been thinking, haven't I?")).toEqual(["think"]);
  });

  it("keeps stop words when the query has nothing else", () => {
    expect(termsOf("what is it")).toEqual(["what", "is", "it"]);
  });

  it("makes a phrase of a path, a dotted name or quoted text, besides their words", () => {
    expect(queryUnits("open src/store/search.ts")).toEqual([
      { terms: ["open"], compound: false, prefix: true },
      { terms: ["src", "store", "search", "ts"], compound: true },
      { terms: ["src"], compound: false },
      { terms: ["store"], compound: false, prefix: true },
      { terms: ["search"], compound: false, prefix: true },
      { terms: ["ts"], compound: false },
    ]);
    expect(queryUnits('"connection refused" error').map((u) => [u.terms.join(" "), u.compound])).toEqual([
      ["connection refused", true],
      ["connection", false],
      ["refus", false],
      ["error", false],
    ]);
    expect(termsOf("max_tokens")).toEqual(["max_tokens"]);
  });

  it("keeps a CJK run as the phrase of its bigrams, a 2-character word as one bigram", () => {
    expect(queryUnits("部署 数据库")).toEqual([
      { terms: ["部署"], compound: false },
      { terms: ["数据", "据库"], compound: false },
    ]);
  });

  it("never yields an empty unit or a repeated one", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 200 }), (query) => {
        const units = queryUnits(query);
        const keys = units.map((unit) => unit.terms.join("\u0000"));
        expect(new Set(keys).size).toBe(keys.length);
        for (const unit of units) expect(unit.terms.length).toBeGreaterThan(0);
      }),
    );
  });

  it("uses a standard list that holds the apostrophe fragments", () => {
    for (const word of ["s", "t", "ve", "m", "re", "ll", "d", "the", "been"]) expect(STOP_WORDS.has(word)).toBe(true);
  });
});

describe("lightStem", () => {
  it("removes one inflection suffix when 4 letters stay, and leaves short, non-ASCII and identifier words whole", () => {
    expect(
      ["conferences", "painted", "painting", "quickly", "boxes", "go", "cars", "max_tokens", "v2", "café"].map(
        lightStem,
      ),
    ).toEqual(["conferenc", "paint", "paint", "quick", "boxe", undefined, "cars", undefined, undefined, undefined]);
  });

  it("matches every word that starts with the stem, the word itself included", () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[a-z]{1,12}$/), (word) => {
        const stem = lightStem(word);
        if (stem !== undefined) {
          expect(word.startsWith(stem)).toBe(true);
          expect(stem.length).toBeGreaterThanOrEqual(MIN_PREFIX_LETTERS);
        }
      }),
    );
  });
});

describe("planRanking", () => {
  const stats = { documents: 10_000, averageLength: 20 };

  it("weights rarer units more and generates candidates from the rarest until the target is reached", () => {
    const df: Record<string, number> = { caroline: 3_000, lgbtq: 2, conference: 3, go: 2_500 };
    const plan = planRanking(queryUnits("caroline go lgbtq conference"), (t) => df[t.replace(/:\*$/, "")] ?? 0, stats);
    expect(plan.map((u) => u.terms[0])).toEqual(["lgbtq", "conference", "go", "caroline"]);
    expect(plan.map((u) => u.generates)).toEqual([true, true, false, false]);
    for (let i = 1; i < plan.length; i++)
      expect((plan[i] as { weight: number }).weight).toBeLessThanOrEqual((plan[i - 1] as { weight: number }).weight);
  });

  it("always generates from at least one unit and keeps at most MAX_QUERY_UNITS", () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.stringMatching(/^[a-z]{3,8}$/), fc.nat(50_000)), { minLength: 1, maxLength: 60 }),
        (entries) => {
          const df = new Map(entries);
          const plan = planRanking(
            queryUnits([...df.keys()].join(" ")),
            (t) => df.get(t.replace(/:\*$/, "")) ?? 0,
            stats,
          );
          expect(plan.length).toBeLessThanOrEqual(MAX_QUERY_UNITS);
          expect(plan[0]?.generates ?? true).toBe(true);
          const generated = plan.filter((u) => u.generates);
          const sum = generated.reduce((total, u) => total + Math.max(1, df.get(u.terms[0] as string) ?? 0), 0);
          expect(generated.length === 1 || sum <= CANDIDATE_TARGET).toBe(true);
        },
      ),
    );
  });

  it("boosts a compound by the idf of its parts", () => {
    const plan = planRanking(queryUnits("src/store/search.ts"), () => 10, stats);
    const compound = plan.find((u) => u.terms.length > 1);
    const part = plan.find((u) => u.terms.length === 1);
    expect(compound?.weight).toBeCloseTo(4 * (part?.weight ?? 0));
  });
});

describe("candidate queries", () => {
  const stats = { documents: 10_000, averageLength: 20 };

  it("reads a prefix unit as its stem and the scope's expansion, exact terms only, at most PREFIX_EXPANSION_TERMS", () => {
    const unit = { terms: ["paint"], prefix: true };
    expect(candidateTsquery(unit, ["painting", "paint", "painted"])).toBe("('paint' | 'painting' | 'painted')");
    expect(candidateTsquery(unit)).toBe("'paint'");
    const many = Array.from({ length: 40 }, (_, i) => `paint${i}`);
    expect(candidateTsquery(unit, many).split(" | ")).toHaveLength(PREFIX_EXPANSION_TERMS + 1);
    expect(candidateTsquery(unit, many)).not.toContain(":*");
    expect(candidateTsquery({ terms: ["src", "store"] }, ["ignored"])).toBe("('src' <-> 'store')");
  });

  it("orders candidates only when they may be more than the cap: rarest unit first, else records with every unit", () => {
    const plan = (df: Record<string, number>, query: string) =>
      planRanking(queryUnits(query), (t) => df[t.replace(/:\*$/, "")] ?? 0, stats);
    const none = () => undefined;
    // Few candidates: no order needed.
    expect(preferredCandidates(plan({ lgbtq: 2, conference: 3 }, "lgbtq conference"), none, 500)).toBeUndefined();
    // Rare words next to a generating common one: the rarer words' records first, as many as fit the cap.
    expect(preferredCandidates(plan({ lgbtq: 2, bake: 900 }, "lgbtq bake"), none, 500)).toBe("'lgbtq'");
    expect(preferredCandidates(plan({ lgbtq: 2, cake: 300, bake: 900 }, "lgbtq cake bake"), none, 500)).toBe(
      "'lgbtq' | 'cake'",
    );
    // Only common words: the records holding all of them first, each prefix through its expansion.
    const common = plan({ test: 4_000, error: 3_000 }, "test error");
    expect(preferredCandidates(common, (stem) => (stem === "test" ? ["tests"] : undefined), 500)).toBe(
      "'error' & ('test' | 'tests')",
    );
    // A single common word has no better subset.
    expect(preferredCandidates(plan({ test: 4_000 }, "test"), none, 500)).toBeUndefined();
  });
});

describe("BM25 pieces", () => {
  it("idf is never negative and falls as documents grow more frequent", () => {
    fc.assert(
      fc.property(fc.nat(100_000), fc.nat(100_000), fc.nat(100_000), (n, a, b) => {
        expect(idf(n, a)).toBeGreaterThanOrEqual(0);
        if (a <= b) expect(idf(n, a)).toBeGreaterThanOrEqual(idf(n, b));
      }),
    );
  });

  it("a longer document than average scores less, a shorter one more", () => {
    expect(lengthFactor(10, 20)).toBeGreaterThan(lengthFactor(20, 20));
    expect(lengthFactor(20, 20)).toBeCloseTo(1);
    expect(lengthFactor(200, 20)).toBeLessThan(lengthFactor(40, 20));
  });
});

describe("distinctPlaces", () => {
  const span = (sessionId: string, startSeq: number, endSeq: number): Span => ({
    sessionId,
    generation: 0,
    startSeq,
    endSeq,
  });
  const record = (sessionId: string, seq: number) => ({
    id: `${sessionId}:${seq}`,
    source: "record" as const,
    spans: [span(sessionId, seq, seq + 1)],
  });
  const summary = (id: string, spans: Span[], source: "session_node" | "shared_node" = "session_node") => ({
    id,
    source,
    spans,
  });

  it("merges a summary with its ancestors and points it at the best record inside", () => {
    const places = distinctPlaces([
      summary("s:1+2", [span("a", 2, 4)]),
      summary("pub:0+4", [span("a", 0, 8)], "shared_node"),
      record("b", 5),
      record("a", 3),
      record("a", 2),
    ]);
    expect(places.map((p) => [p.hit.id, p.within?.id ?? null])).toEqual([
      ["a:3", "s:1+2"],
      ["b:5", null],
      ["a:2", null],
    ]);
  });

  it("gives places whose summaries never overlap another place, every record hit kept", () => {
    const hit = fc.oneof(
      fc.tuple(fc.constantFrom("a", "b"), fc.nat(20)).map(([s, q]) => record(s, q) as PlaceHit & { id: string }),
      fc
        .tuple(fc.constantFrom("a", "b"), fc.nat(5), fc.nat(3))
        .map(([s, i, l]) => summary(`${s}:${l}:${i}`, [span(s, i * 2 ** l, (i + 1) * 2 ** l)])),
    );
    fc.assert(
      fc.property(fc.array(hit, { maxLength: 30 }), (hits) => {
        const unique = hits.filter((h, i) => hits.findIndex((o) => o.id === h.id) === i);
        const places = distinctPlaces(unique);
        const records = unique.filter((h) => h.source === "record");
        expect(places.filter((p) => p.hit.source === "record")).toHaveLength(records.length);
        const summaries = places.filter((p) => p.hit.source !== "record").map((p) => p.hit.spans[0] as Span);
        for (const [i, a] of summaries.entries())
          for (const b of summaries.slice(i + 1))
            expect(a.sessionId !== b.sessionId || a.endSeq <= b.startSeq || b.endSeq <= a.startSeq).toBe(true);
      }),
    );
  });
});
