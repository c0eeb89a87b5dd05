import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../../scripts/model-server.js";
import { createSummarizer } from "../../src/compactor/registry.js";
import { FALLBACK_LABEL } from "../../src/core/fallback.js";
import type { Config } from "../../src/memory/config.js";
import { budgetSettingsOf } from "../../src/memory/config.js";
import { readTodaySpend } from "../../src/memory/cost.js";
import { inspectStoredSession } from "../../src/memory/inspect.js";
import { type CompactorEvent, startWorker } from "../../src/memory/worker.js";
import { runCli, useTestMemory, waitForIdleQueues } from "../helpers.js";

// Every merge built as soon as it can be (not only when a view wants it): the ledger's merge calls and the budget's
// fallbacks are counted over whole trees.
const db = useTestMemory({ failureRetrySeconds: 1, workerConcurrency: 1, compactorMerges: "all" });
let server: ModelServer;

beforeAll(async () => {
  server = await startModelServer();
});

afterAll(async () => {
  await server.close();
});

/** Messages over 512 bytes, so every leaf needs the model, and pairs of them need a merge. */
async function sessionWith(name: string, messages: number) {
  const session = await db.memory.openSession({ host: "test", hostSessionId: name, projectId: `prj_${name}` });
  for (let k = 0; k < messages; k++) {
    await db.memory.ingest({
      sessionId: session.sessionId,
      turnId: "t1",
      kind: k % 2 === 0 ? "user" : "assistant",
      finalization: { hostSessionId: name, messageId: `m${k}` },
      occurredAt: new Date(Date.UTC(2026, 0, 1, 10, k)).toISOString(),
      content: `message ${k} of ${name}: ${"the importer moves to the durable broker queue; ".repeat(14)}`,
    });
  }
  return session;
}

function anthropicAtServer() {
  return createSummarizer({
    summarizer: "anthropic",
    model: "claude-haiku-4-5",
    url: server.url,
    apiKey: "test",
    standardKeys: {},
    timeoutMs: 10_000,
    windowTokens: 0,
  });
}

/** Settles the session, then waits for every node job (parents outside the view too) so no work leaks into the next test. */
async function settleAll(sessionId: string): Promise<void> {
  await db.memory.settle(sessionId, { timeoutMs: 30_000 });
  await waitForIdleQueues(db.memory.pool);
}

async function ledgerOf(sessionId: string) {
  const { rows } = await db.memory.pool.query(
    `SELECT provider, model, purpose, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, latency_ms,
            outcome, scope_id, session_id, tree_id, level, idx, job_id, at
       FROM optchat.compactor_calls WHERE session_id = $1 ORDER BY call_id`,
    [sessionId],
  );
  return rows;
}

async function nodesOf(sessionId: string) {
  const { rows } = await db.memory.pool.query(
    `SELECT n.level, n.idx, n.text, n.summarizer, n.attempts
       FROM optchat.nodes n JOIN optchat.trees t USING (tree_id) WHERE t.session_id = $1 ORDER BY n.level, n.idx`,
    [sessionId],
  );
  return rows;
}

describe("the cost ledger (issue 13 item 4)", () => {
  it("records every model call with its tokens, purpose, outcome and place, through the real provider", async () => {
    const session = await sessionWith("ledger", 4);
    const worker = await startWorker(db.memory, db.config, () => {}, { summarizer: anthropicAtServer });
    try {
      await settleAll(session.sessionId);
    } finally {
      await worker.stop();
    }
    const calls = await ledgerOf(session.sessionId);
    const nodes = await nodesOf(session.sessionId);
    // One row per call the nodes say they took, and as many as reached the provider.
    const attempts = nodes.reduce((sum, n) => sum + n.attempts, 0);
    expect(calls).toHaveLength(attempts);
    expect(server.requests().filter((r) => r.kind === "compactor")).toHaveLength(attempts);
    expect(new Set(calls.map((c) => c.purpose))).toEqual(new Set(["leaf", "merge"]));
    for (const call of calls) {
      expect(call).toMatchObject({
        provider: "anthropic",
        model: "claude-haiku-4-5",
        outcome: "ok",
        scope_id: session.scopeId,
        session_id: session.sessionId,
      });
      expect(call.input_tokens).toBeGreaterThan(0);
      expect(call.output_tokens).toBeGreaterThan(0);
      expect(call.job_id).toMatch(/^[0-9a-f-]{36}$/);
    }
    // The tokens are the provider's own accounting (the simulator's), call by call.
    const served = server.requests().filter((r) => r.kind === "compactor");
    expect(calls.map((c) => c.input_tokens)).toEqual(served.map((r) => r.cache?.inputTokens));
    expect(calls.map((c) => c.cache_read_tokens)).toEqual(served.map((r) => r.cache?.cacheReadTokens));

    const cli = await runCli(["cost", "--json", "--session", session.sessionId], { DATABASE_URL: db.url });
    expect(cli.code).toBe(0);
    const report = JSON.parse(cli.stdout);
    expect(report.total.calls).toBe(attempts);
    expect(report.total.inputTokens).toBe(calls.reduce((s, c) => s + c.input_tokens, 0));
    // Priced with the built-in table (claude-haiku-4-5: $1 / $0.10 / $1.25 / $5 per million tokens).
    const expected = calls.reduce(
      (s, c) =>
        s +
        ((c.input_tokens - c.cache_read_tokens - c.cache_write_tokens) * 1 +
          c.cache_read_tokens * 0.1 +
          c.cache_write_tokens * 1.25 +
          c.output_tokens * 5) /
          1e6,
      0,
    );
    expect(report.total.costUsd).toBeCloseTo(expected, 9);
    expect(report.bySession).toEqual([expect.objectContaining({ sessionId: session.sessionId, calls: attempts })]);

    const text = await runCli(["cost", "--since", "2000-01-01"], { DATABASE_URL: db.url });
    expect(text.code).toBe(0);
    expect(text.stdout).toContain("anthropic:claude-haiku-4-5");
    expect(text.stdout).toMatch(/per day\n/);
    const repriced = await runCli(["cost", "--json", "--session", session.sessionId], {
      DATABASE_URL: db.url,
      OPTCHAT_PRICES: JSON.stringify({ "anthropic:claude-haiku-4-5": { input: 0, output: 0 } }),
    });
    expect(JSON.parse(repriced.stdout).total.costUsd).toBe(0);
  });

  it("records a rate-limited call and tries the node again only after the provider's Retry-After", async () => {
    const session = await sessionWith("limited", 1);
    server.failNext(1, { status: 429, headers: { "retry-after": "3" } });
    const events: CompactorEvent[] = [];
    const worker = await startWorker(db.memory, db.config, (e) => events.push(e), { summarizer: anthropicAtServer });
    try {
      await settleAll(session.sessionId);
    } finally {
      await worker.stop();
    }
    const calls = await ledgerOf(session.sessionId);
    expect(calls.map((c) => c.outcome)).toEqual(["rate_limited", "ok"]);
    expect(calls[0].input_tokens).toBe(0);
    // OPTCHAT_FAILURE_RETRY_SECONDS is 1 here: the retry waited for the 3 s the provider asked for.
    expect(calls[1].at.getTime() - calls[0].at.getTime()).toBeGreaterThanOrEqual(2900);
    expect(events.filter((e) => e.type === "failure")[0]).toMatchObject({ error: expect.stringMatching(/HTTP 429/) });
  });
});

describe("the budget cap (issue 13 item 5)", () => {
  it("stops calling the model past the cap and builds labelled fallbacks that say so, never as summaries", async () => {
    // A view of 1 KiB folds the merges (fallbacks past the cap) into the view: the run of four messages is one call
    // (a leaf run, batch.ts), so the cap first shows in the merges above it.
    const capped: Config = Object.freeze({
      ...db.config,
      budgetDailyTokens: 1,
      budgetDailyUsd: 0,
      viewBytes: 1024,
      viewLowerBytes: 1024,
    });
    // Today's spend so far is whatever the tests above recorded: start this one from a clean ledger.
    await db.memory.pool.query("DELETE FROM optchat.compactor_calls");
    const session = await sessionWith("capped", 4);
    const events: CompactorEvent[] = [];
    const worker = await startWorker(db.memory, capped, (e) => events.push(e));
    try {
      // Readiness holds: fallbacks are built nodes, so the session settles.
      await settleAll(session.sessionId);
    } finally {
      await worker.stop();
    }
    const nodes = await nodesOf(session.sessionId);
    const summarized = nodes.filter((n) => n.attempts > 0);
    const fallbacks = nodes.filter((n) => n.summarizer === "fallback");
    // The first call spends more than the 1-token cap; every node after it is a fallback.
    expect(summarized).toHaveLength(1);
    expect(fallbacks.length).toBeGreaterThanOrEqual(2);
    for (const node of fallbacks) {
      expect(node.text.startsWith(FALLBACK_LABEL)).toBe(true);
      expect(node.attempts).toBe(0);
    }
    expect((await ledgerOf(session.sessionId)).length).toBe(1);
    // Reported once, not once per node.
    expect(events.filter((e) => e.type === "budget")).toEqual([
      expect.objectContaining({ state: "spent", reason: expect.stringMatching(/OPTCHAT_BUDGET_DAILY_TOKENS=1/) }),
    ]);
    expect(events.filter((e) => e.type === "built" && e.fallback).length).toBe(fallbacks.length);

    // The view shows the label as it is; the user hears of it in memory_inspect, status and cost.
    const view = await db.memory.view(session.sessionId);
    expect(JSON.stringify(view)).toContain(FALLBACK_LABEL);
    const report = await inspectStoredSession(db.memory, session, { budget: budgetSettingsOf(capped) });
    expect((report.health as { verdict: string }).verdict).toMatch(/^degraded: .*OPTCHAT_BUDGET_DAILY_TOKENS/);
    expect(report.compactorToday).toMatchObject({
      fallbackNodes: fallbacks.length,
      notice: expect.stringMatching(/budget is spent.*OPTCHAT_BUDGET_DAILY_TOKENS/),
    });
    const spend = await readTodaySpend(db.memory.pool, budgetSettingsOf(capped));
    expect(spend.all.calls).toBe(1);
    const status = await runCli(["status"], { DATABASE_URL: db.url, OPTCHAT_BUDGET_DAILY_TOKENS: "1" });
    expect(status.stdout).toMatch(/spend {6}today .*1 compactor call.*fallback nodes: \d+/);
    expect(status.stdout).toContain("budget is spent");
    // Which model spent it and at what price, and each session's part (issue 39).
    expect(status.stdout).toMatch(/model fake:fake-extractive\/1: \$0 in \/ \$0 out per million tokens/);
    expect(status.stdout).toContain(`session ${session.sessionId}: $0.0000 (1 call(s), `);
    expect(report.compactorThisSessionToday).toMatch(/^\$0\.0000 \(1 call\(s\), \d+ tokens\)$/);
  });

  it("does not stop a model whose spend is under the cap", async () => {
    await db.memory.pool.query("DELETE FROM optchat.compactor_calls");
    const session = await sessionWith("uncapped", 2);
    const worker = await startWorker(db.memory, { ...db.config, budgetDailyTokens: 10_000_000 }, () => {});
    try {
      await settleAll(session.sessionId);
    } finally {
      await worker.stop();
    }
    expect((await nodesOf(session.sessionId)).filter((n) => n.summarizer === "fallback")).toEqual([]);
  });
});
