/**
 * `bench compactor-quality` (issue 13 item 7): the quality corpus (quality-corpus.ts) summarized through the real
 * compactor path (memory service, worker, pg-boss) by each model named, every built node and the top of every tree
 * checked (quality-checks.ts), with pass rates, calls, tokens and cost per model.
 *
 * Environment:
 *   OPTCHAT_BENCH_QUALITY_MODELS  comma-separated, default "scripted,scripted-anthropic,fake":
 *     scripted             the scripted model (scripts/model-server.ts) through @ai-sdk/openai-compatible: a smoke
 *                          run that proves the harness (it answers like the extractive fake)
 *     scripted-anthropic   the scripted model through @ai-sdk/anthropic (its cache simulator counts the tokens)
 *     fake                 the in-process deterministic summarizer
 *     <provider>:<model>   a real endpoint: anthropic:claude-haiku-4-5, openai:gpt-4.1-mini, openai-compatible:llama3.1:8b;
 *                          the key and URL come from the usual settings (ANTHROPIC_API_KEY, OPENAI_API_KEY,
 *                          OPTCHAT_SUMMARIZER_API_KEY, OPTCHAT_SUMMARIZER_URL), prices from the table and OPTCHAT_PRICES
 *   OPTCHAT_BENCH_QUALITY_TIMEOUT_SECONDS  longest wait for one model's trees (default 600)
 */
import { createSummarizer } from "../../src/compactor/registry.js";
import type { Summarizer } from "../../src/compactor/summarizer.js";
import { type Config, pricesOf, resolveConfig, summarizerSettingsOf } from "../../src/memory/config.js";
import { readCost } from "../../src/memory/cost.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import type { Memory } from "../../src/memory/service.js";
import { startWorker } from "../../src/memory/worker.js";
import { type ModelServer, startModelServer } from "../model-server.js";
import { type BenchContext, compactorRecorder, emit, envNumber, note, withScratchMemory } from "./common.js";
import { type CheckOutcome, evaluateSession, summarizeOutcomes } from "./quality-checks.js";
import { type CorpusSession, QUALITY_CORPUS } from "./quality-corpus.js";

const BENCH = "compactor-quality";

export async function runCompactorQualityBench(context: BenchContext): Promise<void> {
  const models = (process.env.OPTCHAT_BENCH_QUALITY_MODELS ?? "scripted,scripted-anthropic,fake")
    .split(",")
    .map((m) => m.trim())
    .filter(Boolean);
  const timeoutMs = envNumber("OPTCHAT_BENCH_QUALITY_TIMEOUT_SECONDS", 600, { min: 10 }) * 1000;
  // The usual settings from the environment (keys, URL, prices, caps), with the scratch database.
  const configFor = (databaseUrl: string) =>
    // Every merge built (OPTCHAT_COMPACTOR_MERGES=all): the checks follow each fact up every level of the tree, which
    // a view builds only once it needs those merges (docs/compactor.md "Merges on demand"). Leaf runs and due merges
    // are still summarized in batches, as in the product.
    resolveConfig({ env: process.env, overrides: { databaseUrl, summarizer: "fake", compactorMerges: "all" } });
  await withScratchMemory(context.serverUrl, "quality", configFor, async (memory, config) => {
    const server = await startModelServer();
    try {
      for (const model of models) {
        if (context.signal.aborted) return;
        const summarizer = await summarizerFor(model, config, server);
        note(`compactor-quality: ${QUALITY_CORPUS.length} sessions through ${summarizer.identity}`);
        const started = new Date();
        const outcomes = await runModel(memory, config, summarizer, model, timeoutMs, context.signal);
        if (!outcomes) return;
        const cost = await readCost(memory.pool, pricesOf(config), { since: started });
        const summary = summarizeOutcomes(outcomes.checks);
        emit(BENCH, "compactor-quality", {
          model,
          summarizer: summarizer.identity,
          sessions: QUALITY_CORPUS.length,
          nodes: outcomes.nodes,
          ...summary,
          calls: cost.total.calls,
          failedCalls: cost.total.failedCalls,
          inputTokens: cost.total.inputTokens,
          cacheReadTokens: cost.total.cacheReadTokens,
          cacheWriteTokens: cost.total.cacheWriteTokens,
          outputTokens: cost.total.outputTokens,
          costUsd: cost.total.unpricedTokens > 0 && cost.total.costUsd === 0 ? null : round6(cost.total.costUsd),
          fallbackNodes: cost.fallbackNodes,
          failures: outcomes.checks
            .filter((o) => !o.passed)
            .slice(0, 12)
            .map((o) => ({ session: o.session, check: o.check, ref: o.ref, top: o.top, problem: o.problem })),
          ...(outcomes.problem ? { compactorProblem: outcomes.problem } : {}),
        });
      }
    } finally {
      await server.close().catch(() => {});
    }
  });
}

async function summarizerFor(model: string, config: Config, server: ModelServer): Promise<Summarizer> {
  const base = { ...summarizerSettingsOf(config), apiKey: "", standardKeys: {} };
  if (model === "fake") return await createSummarizer({ ...base, summarizer: "fake" });
  if (model === "scripted")
    return await createSummarizer({
      ...base,
      summarizer: "openai-compatible",
      url: server.url,
      model: "optchat-compactor",
    });
  if (model === "scripted-anthropic")
    return await createSummarizer({
      ...base,
      summarizer: "anthropic",
      url: server.url,
      apiKey: "scripted",
      model: "claude-haiku-4-5",
    });
  const colon = model.indexOf(":");
  if (colon <= 0) throw new Error(`OPTCHAT_BENCH_QUALITY_MODELS: '${model}' is not scripted, fake or provider:model`);
  // A real endpoint: the settings as the user has them, with this provider and model.
  return await createSummarizer({
    ...summarizerSettingsOf(config),
    summarizer: model.slice(0, colon),
    model: model.slice(colon + 1),
  });
}

async function runModel(
  memory: Memory,
  config: Config,
  summarizer: Summarizer,
  label: string,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<{ checks: CheckOutcome[]; nodes: number; problem?: string } | undefined> {
  const recorder = compactorRecorder();
  const sessions = await Promise.all(QUALITY_CORPUS.map((session) => ingestSession(memory, session, label)));
  const worker = await startWorker(memory, config, recorder.report, { summarizer: async () => summarizer });
  try {
    const deadline = Date.now() + timeoutMs;
    for (const { sessionId, session } of sessions) {
      while (!signal.aborted && (await builtNodes(memory, sessionId)).length < 2 * session.messages.length - 1) {
        if (Date.now() > deadline)
          throw new Error(
            `${label}: trees not complete after ${timeoutMs} ms (${recorder.first() ?? "no error reported"})`,
          );
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  } finally {
    await worker.stop(10_000);
  }
  if (signal.aborted) return undefined;
  const checks: CheckOutcome[] = [];
  let nodes = 0;
  for (const { sessionId, session } of sessions) {
    const built = await builtNodes(memory, sessionId);
    nodes += built.length;
    checks.push(
      ...evaluateSession({ name: session.name, messages: session.messages.length, checks: session.checks }, built),
    );
  }
  const problem = recorder.first();
  return { checks, nodes, ...(problem ? { problem } : {}) };
}

async function ingestSession(memory: Memory, session: CorpusSession, label: string) {
  const hostSessionId = `quality-${label}-${session.name}`;
  const opened = await memory.openSession({ host: "bench", hostSessionId, projectId: `quality-${label}` });
  let lastCall = "";
  const events: IngestEvent[] = session.messages.map((message, n) => {
    if (message.kind === "tool_call") lastCall = `call_${n}`;
    return {
      sessionId: opened.sessionId,
      turnId: "t1",
      kind: message.kind,
      finalization: { hostSessionId, messageId: `m${n}` },
      occurredAt: new Date(Date.UTC(2026, 0, 1, 9, 0, n)).toISOString(),
      content: message.content,
      ...(message.kind === "tool_call" || message.kind === "tool_result"
        ? { toolCallId: lastCall || `call_${n}`, toolName: message.toolName ?? "tool" }
        : {}),
    };
  });
  await memory.ingestMany(events);
  return { sessionId: opened.sessionId, session };
}

async function builtNodes(memory: Memory, sessionId: string) {
  const result = await memory.pool.query<{ level: number; index: string; text: string; summarizer: string }>(
    `SELECT DISTINCT ON (n.level, n.idx) n.level, n.idx AS index, n.text, n.summarizer
       FROM optchat.nodes n JOIN optchat.trees t USING (tree_id)
      WHERE t.session_id = $1 ORDER BY n.level, n.idx, n.revision DESC`,
    [sessionId],
  );
  return result.rows.map((row) => ({ ...row, index: Number(row.index) }));
}

function round6(value: number): number {
  return Math.round(value * 1e6) / 1e6;
}
