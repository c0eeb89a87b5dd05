import type pg from "pg";
import { beforeAll, describe, expect, it } from "vitest";
import { MEMORY_HEAD } from "../../plugin/request/memory-message.js";
import { CHECKPOINT_HEAD } from "../../plugin/v2/compaction.js";
import type { ModelServer } from "../../scripts/model-server.js";
import { type Opencode2Env, runOpencode2 } from "../../scripts/opencode2-harness.js";
import { retrying } from "../helpers.js";
import { useV2World } from "./v2-world.js";

/**
 * V2's compaction answered by optchat (plugin/v2/compaction.ts), with a real `@opencode/cli` 2.1.2 process at a 16k
 * window: a tool loop long enough that V2 compacts mid-turn. Native V2 would send its whole history to the model with
 * "You MUST summarize the conversation above …" (docs/opencode-v2-notes.md); with optchat, no such request is made,
 * V2's next request starts from its `<conversation-checkpoint>` holding optchat's view, and the turn completes.
 */

const WINDOW = 16_000;
const NATIVE_SUMMARY_ASK = "You MUST summarize";
const CALLS = 12;
// No OPTCHAT_V2_WINDOW_TOKENS: the window is the model's limit.context, read from V2 (plugin/v2/window.ts).
const world = useV2World({ extraEnv: {}, install: { contextLimit: WINDOW } });
let db: pg.Pool;
let model: ModelServer;
let env: Opencode2Env;
beforeAll(() => {
  ({ db, model } = world);
  env = world.envs[0] as Opencode2Env;
});

describe("a V2 compaction answered by optchat (real @opencode/cli 2.1.2, 16k window)", () => {
  it("asks no model to summarize; the next request starts from a checkpoint of optchat's view; the turn completes", async () => {
    // A short prompt; each result ~3,900 characters: fewer than twelve of them pass V2's threshold near the 16k window.
    const calls = Array.from({ length: CALLS }, (_, n) => ({
      name: "shell",
      args: { command: `seq -f fill-${n}-%05g 1 300` },
    }));
    const run = await runOpencode2(env, `fill the window TOOLS=${JSON.stringify(calls)} END`, { timeoutMs: 240_000 });
    expect(run.code, `${run.errors.join("; ")}\n${run.stderr.slice(-2000)}`).toBe(0);

    const bodies = model.requests().map((request) => JSON.stringify(request.body));
    expect(bodies.filter((body) => body.includes(NATIVE_SUMMARY_ASK))).toEqual([]);
    expect(model.requests().filter((request) => request.kind === "summary")).toEqual([]);

    // The checkpoint V2 recorded from optchat's answer, at the head of the conversation it sends after compacting.
    const withCheckpoint = model
      .requests()
      .filter((request) => request.kind === "main")
      .map((request) => (request.body as { messages: Array<{ role: string; content: unknown }> }).messages)
      .filter((messages) => JSON.stringify(messages).includes("<conversation-checkpoint>"));
    expect(withCheckpoint.length, "no request after a compaction").toBeGreaterThan(0);
    // Every request of the turn is a step of the tool loop or one from the checkpoint on: none was spent compacting.
    const mains = model.requests().filter((request) => request.kind === "main");
    const steps = mains.filter((request) => request.reply.startsWith("tool_calls:"));
    expect(steps.length + withCheckpoint.length).toBe(mains.length);
    const first = withCheckpoint[0] ?? [];
    const conversation = first.filter((message) => message.role !== "system");
    const texts = conversation.map((message) => contentText(message.content));
    // A memory message of optchat's may come first (plugin/v2/layout.ts: before the turn's message, which V2 drops
    // after a mid-turn compaction); V2's history starts after it.
    const historyStart = texts[0]?.startsWith(MEMORY_HEAD) ? 1 : 0;
    const checkpoint = texts[historyStart] ?? "";
    expect(checkpoint.trimStart().startsWith("<conversation-checkpoint>"), texts.join("\n---\n").slice(0, 3000)).toBe(
      true,
    );
    expect(checkpoint).toContain(CHECKPOINT_HEAD);
    // optchat's view of this session: its records as lines under refs memory_zoom opens, the prompt among them.
    expect(checkpoint).toMatch(/\n[\w]+:\d+:0\+\d+\|user: fill the window/);
    expect(checkpoint).toContain("seq -f fill-0-%05g");
    // What was compacted away is not sent again in full: the checkpoint request is far below the window.
    expect(JSON.stringify(first).length / 4).toBeLessThan(WINDOW);

    const stored = await retrying(
      async () => {
        const rows = await db.query(
          `SELECT t.state, count(r.*) FILTER (WHERE r.kind = 'tool_result')::int AS results
             FROM optchat.turns t
             JOIN optchat.sessions s ON s.session_id = t.session_id
             LEFT JOIN optchat.records r ON r.session_id = t.session_id AND r.turn_id = t.turn_id
            WHERE s.host = 'opencode-v2' AND s.host_session_id = $1::text GROUP BY t.state`,
          [run.sessionId],
        );
        if (rows.rows[0]?.state !== "completed") throw new Error(`the turn: ${JSON.stringify(rows.rows)}`);
        return rows.rows[0];
      },
      30_000,
      "the compacted turn completed",
    );
    // Every tool call the model asked for, and its result, is in memory (the checkpoint replaced them in V2's request).
    const toolSteps = model.requests().filter((request) => request.reply.startsWith("tool_calls:")).length;
    expect(toolSteps).toBeGreaterThan(1);
    expect(stored.results).toBe(toolSteps);
  }, 300_000);
});

function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return JSON.stringify(content ?? "");
  return content
    .map((part) => (part && typeof part === "object" && "text" in part ? String(part.text) : JSON.stringify(part)))
    .join("\n");
}
