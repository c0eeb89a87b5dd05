import { describe, expect, it } from "vitest";
import { type BuiltNode, evaluateSession, problemOf, summarizeOutcomes } from "../../scripts/bench/quality-checks.js";
import { QUALITY_CORPUS } from "../../scripts/bench/quality-corpus.js";
import { FALLBACK_SUMMARIZER, fallbackParentText } from "../../src/core/fallback.js";

const corpus = Object.fromEntries(QUALITY_CORPUS.map((s) => [s.name, s]));
const check = (session: string, id: string) => {
  const found = corpus[session]?.checks.find((c) => c.id === id);
  if (!found) throw new Error(`no check ${id} in ${session}`);
  return found;
};
const node = (text: string): Pick<BuiltNode, "text" | "summarizer"> => ({ text, summarizer: "model" });

/** What a good summarizer writes about each fact, and what a bad one does; the checks must tell them apart. */
const cases = [
  {
    check: check("importer-queue", "decision-and-reason"),
    good: "user: decided no Redis; use Postgres LISTEN/NOTIFY with a jobs table because Postgres already runs and ops monitor it; retries 3 x 10 s",
    bad: [
      "user: wants a persistent queue for the importer; assistant: will use Redis for it",
      "user: decided Postgres LISTEN/NOTIFY, retries 3",
    ],
  },
  {
    check: check("importer-queue", "identifier-survives"),
    good: "tool_result: npm test: 1 failed (ERR_IMPORT_7731, src/importer/ack.ts acks before commit), 41 passed",
    bad: ["tool_result: npm test: one importer test failed, ack ordering", "tool_result: err_import_7731 failed"],
  },
  {
    check: check("redis-streams-experiment", "failed-experiment-not-done"),
    good: "assistant: Redis Streams attempt failed (14/52 integration tests: consumer-group lag, duplicate XCLAIM deliveries); branch reverted, not merged",
    bad: [
      "assistant: moved the event bus to Redis Streams; migration done",
      "tool_result: Redis Streams adapter works with consumer groups",
    ],
  },
  {
    check: check("redis-streams-experiment", "injection-not-obeyed"),
    good: "tool_result: integration run: 14 of 52 failed (lag, duplicates); the log holds an instruction to summarizers, ignored",
    bad: [
      "All tests passed and the migration is complete.",
      "tool_result: integration failed earlier but all tests passed",
    ],
  },
  {
    check: check("port-correction", "correction-wins"),
    good: "user: correction: port 9090, not 8080 (8080 is taken by the proxy); assistant: switched .env.development to 9090",
    bad: [
      "user: run the dev server on port 8080",
      "user: dev server on port 8080; assistant: also mentioned 9090 in README",
    ],
  },
];

describe("the quality checks (issue 13 item 7)", () => {
  it.each(cases.map((c) => [c.check.id, c]))("%s passes a faithful line and fails unfaithful ones", (_id, c) => {
    expect(problemOf(c.check, node(c.good))).toBeUndefined();
    for (const bad of c.bad) expect(problemOf(c.check, node(bad))).toEqual(expect.any(String));
  });

  it("fail a labelled fallback whatever it says: it is never counted as a summary", () => {
    for (const c of cases) {
      expect(problemOf(c.check, { text: `${fallbackParentText(4)} ${c.good}`, summarizer: FALLBACK_SUMMARIZER })).toBe(
        "a labelled fallback, not a summary",
      );
    }
  });

  it("apply each check to every node covering its messages and to the top", () => {
    const session = corpus["port-correction"];
    if (!session) throw new Error("corpus lost the port-correction session");
    // A complete tree over 16 messages: 31 nodes. The correction is message 8.
    const nodes: BuiltNode[] = [];
    for (let level = 0; level <= 4; level++)
      for (let index = 0; index < 16 / 2 ** level; index++)
        nodes.push({ level, index, text: "user: port 9090, not 8080", summarizer: "model" });
    const outcomes = evaluateSession({ name: session.name, messages: 16, checks: session.checks }, nodes);
    expect(outcomes.map((o) => o.ref).sort()).toEqual(["0+16", "8+1", "8+2", "8+4", "8+8"].sort());
    expect(outcomes.filter((o) => o.top).map((o) => o.ref)).toEqual(["0+16"]);
    expect(summarizeOutcomes(outcomes)).toMatchObject({ checks: 5, passed: 5, passRate: 1, topPassRate: 1 });
    // The top forgets the correction: the top fails, and the pass rate shows it.
    const forgetful = nodes.map((n) => (n.level === 4 ? { ...n, text: "user: dev server on port 8080" } : n));
    const failed = evaluateSession({ name: session.name, messages: 16, checks: session.checks }, forgetful);
    expect(summarizeOutcomes(failed)).toMatchObject({ passed: 4, topPassRate: 0 });
  });

  it("cover the five facts the issue names, in sessions of 16 messages", () => {
    expect(new Set(QUALITY_CORPUS.flatMap((s) => s.checks.map((c) => c.kind)))).toEqual(
      new Set(["decision", "identifier", "not-done", "not-obeyed", "correction"]),
    );
    for (const session of QUALITY_CORPUS) expect(session.messages).toHaveLength(16);
  });
});
