import type { Config } from "../../src/memory/config.js";
import type { Memory } from "../../src/memory/service.js";
import { startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import { waitForPublications } from "./database.js";

/** Stored text that a page must show literally and never run (the browser's escaping tests). */
export const HOSTILE_TEXT =
  'Careful: <script>alert(1)</script> and </shared_memory> then <img src=x onerror="alert(2)"> and &amp;lt; stay text.';

type SeedPart = { kind: "user" | "assistant" | "tool_call" | "tool_result"; text: string; tool?: string };

/** Session A's first turn: a question, a grep through bash and its output, and the decision. */
const QUEUE_DECISION_TURN: readonly SeedPart[] = [
  { kind: "user", text: "Where should the importer keep its queue? Not in Redis, please." },
  { kind: "tool_call", text: '{"command":"grep -rn broker src/"}', tool: "bash" },
  {
    kind: "tool_result",
    text: [
      "src/broker.ts:12: export class DurableBroker {",
      "src/broker.ts:40:   /** Messages survive a restart: every enqueue is fsynced before it is acknowledged. */",
      "src/broker.ts:41:   async enqueue(queue: string, message: Uint8Array): Promise<void> {",
      "src/importer.ts:7: // TODO: the importer still keeps its work list in memory and loses it on a crash",
      "src/importer.ts:19:   private readonly pending: ImportItem[] = []; // lost when the process dies",
      "src/importer.ts:42:   async run(): Promise<void> { for (const item of this.pending) await this.importOne(item); }",
      "src/queue/redis.ts:3: // unused since the broker landed; kept for the old deployment scripts",
    ].join("\n"),
    tool: "bash",
  },
  {
    kind: "assistant",
    text: "Decision: the importer uses the Broker's durable queue, no Redis. The broker already fsyncs every enqueue before acknowledging it (src/broker.ts:40), so a crash loses nothing, and one more service to run and back up is not worth it.\n\nNext: move the importer's in-memory work list onto that queue.",
  },
];

/**
 * Writes one finished turn per call, messages numbered across all calls (`m<n>`, n seconds after 09:00 on
 * 2026-11-20); `texts` gets each sealed message's text under `<sessionId>:<seq>`.
 */
function seedTurnWriter(
  memory: Memory,
  texts: Map<string, string>,
): (session: Session, turnId: string, parts: readonly SeedPart[]) => Promise<void> {
  let message = 0;
  return async (session, turnId, parts) => {
    await memory.admitTurn({ sessionId: session.sessionId, turnId, query: parts[0]?.text });
    for (const part of parts) {
      message += 1;
      const result = await memory.ingest({
        sessionId: session.sessionId,
        turnId,
        kind: part.kind,
        finalization: { hostSessionId: session.hostSessionId, messageId: `m${message}` },
        occurredAt: new Date(Date.UTC(2026, 10, 20, 9, 0, message)).toISOString(),
        content: part.text,
        ...(part.tool ? { toolName: part.tool, toolCallId: `call${message}` } : {}),
      });
      if (result.status === "sealed") texts.set(`${session.sessionId}:${result.seq}`, part.text);
    }
    await memory.finishTurn({ sessionId: session.sessionId, turnId }, "completed");
  };
}

/**
 * Two sessions of one project (A with a tool call, a CJK message and HOSTILE_TEXT; B asking about it), every turn
 * finished and published by a deterministic-summarizer worker, and one recorded injection: a memory with trees,
 * publications and inspection data, seeded through the service API only (the browser tests read it).
 */
export async function seedBrowseMemory(
  memory: Memory,
  config: Config,
): Promise<{ a: Session; b: Session; texts: Map<string, string> }> {
  const worker = await startWorker(memory, config, () => {});
  const a = await memory.openSession({
    host: "test",
    hostSessionId: "browse-A",
    projectId: "prj_browse",
    title: "queue design",
  });
  const b = await memory.openSession({
    host: "test",
    hostSessionId: "browse-B",
    projectId: "prj_browse",
    title: "follow-up",
  });
  const texts = new Map<string, string>();
  const turn = seedTurnWriter(memory, texts);
  try {
    await turn(a, "a1", QUEUE_DECISION_TURN);
    await turn(a, "a2", [
      { kind: "user", text: "我们把数据存进队列吗？" },
      { kind: "assistant", text: HOSTILE_TEXT },
    ]);
    // A's turns are published before B's starts: publications of different sessions are ordered by when their
    // covers are summarized, not by when the turns finished, and the pages' tests read the numbering.
    await waitForPublications(memory.pool, 2, 60_000, "A's two publications");
    await turn(b, "b1", [
      { kind: "user", text: "What did session A decide about the queue?" },
      { kind: "assistant", text: "It chose the broker's durable queue." },
    ]);
    await waitForPublications(memory.pool, 3, 60_000, "three publications");
    await memory.host.recordInjection({
      sessionId: b.sessionId,
      turnId: "b1",
      holder: "test-holder",
      status: "injected",
      mode: "replace",
      query: "What did session A decide about the queue?",
      detail: { tokens: { used: 120, available: 180000 }, blocks: ["shared_memory"], note: "</shared_memory>" },
      error: null,
    });
  } finally {
    await worker.stop();
  }
  return { a, b, texts };
}
