import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ModelServer, startModelServer } from "../../scripts/model-server.js";
import { createSummarizer } from "../../src/compactor/registry.js";
import { toolResultExcerpt } from "../../src/core/excerpt.js";
import { type RunningCompactor, startWorker } from "../../src/memory/worker.js";
import { ingestEvent, useTestMemory, waitForIdleQueues } from "../helpers.js";

// Issue 39: a tool result too long for a line gets its excerpt as its leaf line, made without a model call
// (OPTCHAT_COMPACTOR_TOOL_RESULTS=excerpt, the default); under `model` the model summarizes it, as before.
const db = useTestMemory({ workerConcurrency: 1 });
let server: ModelServer;
let worker: RunningCompactor | undefined;

beforeAll(async () => {
  server = await startModelServer();
});

afterAll(async () => {
  await worker?.stop(5_000);
  await server.close();
});

const OUTPUT = `${Array.from({ length: 120 }, (_, i) => `case ${i + 1}: ok in ${i % 9} ms`).join("\n")}\nFAIL tests/ack.test.ts: acks before commit (ERR_ACK_42)\n${Array.from({ length: 60 }, (_, i) => `case ${i + 121}: ok`).join("\n")}\nTests: 1 failed, 180 passed`;

async function sessionWithToolResult(name: string) {
  const session = await db.memory.openSession({ host: "test", hostSessionId: name, projectId: "prj_excerpt" });
  const ctx = { sessionId: session.sessionId, turnId: "t0" };
  await db.memory.admitTurn(ctx);
  const base = { ...ctx, host: name, messageId: "m1", occurredAt: "2026-12-01T10:00:00.000Z" };
  await db.memory.ingest(ingestEvent({ ...base, kind: "user", partId: "p0", content: "run the tests" }));
  await db.memory.ingest(
    ingestEvent({
      ...base,
      kind: "tool_call",
      toolName: "bash",
      toolCallId: "c1",
      partId: "p1",
      content: JSON.stringify({ tool: "bash", input: { command: "npm test" } }),
    }),
  );
  const sealed = await db.memory.ingest(
    ingestEvent({ ...base, kind: "tool_result", toolName: "bash", toolCallId: "c1", partId: "p2", content: OUTPUT }),
  );
  return { session, seq: (sealed as { seq: number }).seq };
}

async function leafOf(sessionId: string, seq: number) {
  const { rows } = await db.memory.pool.query<{ text: string; summarizer: string; attempts: number }>(
    `SELECT n.text, n.summarizer, n.attempts FROM optchat.nodes n JOIN optchat.trees t ON t.tree_id = n.tree_id
      WHERE t.session_id = $1 AND n.level = 0 AND n.idx = $2`,
    [sessionId, seq],
  );
  return rows[0];
}

async function leafCalls(sessionId: string): Promise<number> {
  const { rows } = await db.memory.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM optchat.compactor_calls WHERE session_id = $1 AND purpose = 'leaf'",
    [sessionId],
  );
  return rows[0]?.n ?? 0;
}

describe("a tool result's leaf", () => {
  it("is its excerpt, made without a model call, and the whole output is one zoom away", async () => {
    const summarizer = createSummarizer({
      summarizer: "anthropic",
      model: "claude-haiku-4-5",
      url: server.url,
      apiKey: "test",
      standardKeys: {},
      timeoutMs: 10_000,
      windowTokens: 0,
    });
    worker = await startWorker(db.memory, db.config, () => {}, { summarizer: async () => summarizer });
    const { session, seq } = await sessionWithToolResult("excerpt");
    await db.memory.settle(session.sessionId, { timeoutMs: 30_000 });
    await waitForIdleQueues(db.memory.pool);

    const leaf = await leafOf(session.sessionId, seq);
    expect(leaf).toEqual({ text: toolResultExcerpt("bash", OUTPUT), summarizer: "free", attempts: 0 });
    expect(leaf?.text).toContain("FAIL tests/ack.test.ts: acks before commit (ERR_ACK_42)");
    expect(leaf?.text).toContain("Tests: 1 failed, 180 passed");
    expect(await leafCalls(session.sessionId)).toBe(0);
    expect(server.requests().filter((r) => r.kind === "compactor")).toHaveLength(0);
    // The view shows the excerpt; its ref opens the record, read whole.
    const view = await db.memory.view(session.sessionId);
    expect(JSON.stringify(view)).toContain(JSON.stringify(leaf?.text).slice(1, -1));
    expect(await db.memory.zoomSession(session.sessionId, `${seq}+1`)).toMatchObject({ kind: "record", seq });
    const record = (await db.memory.listRecords(session.sessionId)).find((r) => r.seq === seq);
    const page = await db.memory.readPayload(record as { sessionId: string; generation: number; seq: number });
    expect(page.text).toBe(OUTPUT);
    await worker.stop(5_000);
    worker = undefined;
  });

  it("is the model's summary under OPTCHAT_COMPACTOR_TOOL_RESULTS=model", async () => {
    worker = await startWorker(db.memory, { ...db.config, compactorToolResults: "model" }, () => {});
    const { session, seq } = await sessionWithToolResult("model");
    await db.memory.settle(session.sessionId, { timeoutMs: 30_000 });
    await waitForIdleQueues(db.memory.pool);
    const leaf = await leafOf(session.sessionId, seq);
    expect(leaf?.summarizer).toBe("fake-extractive/1");
    expect(leaf?.attempts).toBeGreaterThan(0);
    expect(await leafCalls(session.sessionId)).toBeGreaterThan(0);
  });
});
