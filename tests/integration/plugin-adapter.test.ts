import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OpencodeAdapter } from "../../plugin/adapter.js";
import { resolvePluginConfig } from "../../plugin/config.js";
import type { HostMessageInfo, HostPart } from "../../plugin/messages.js";
import { type Memory, openMemory } from "../../src/memory/index.js";
import { createTestDatabase, retrying } from "../helpers.js";

/**
 * The adapter driven hook call by hook call, in orders a loaded OpenCode process produces but a test of real processes
 * hits only by chance (the e2e suite proves the same behaviours with real OpenCode 1.18.33). Real Postgres; the two
 * OpenCode client lookups answer "unknown".
 */

let database: Awaited<ReturnType<typeof createTestDatabase>>;
let adapter: OpencodeAdapter;
let memory: Memory;

beforeAll(async () => {
  database = await createTestDatabase();
  const config = resolvePluginConfig({ databaseUrl: database.url, embeddedWorker: "off" }, {});
  memory = await openMemory(config.core);
  adapter = new OpencodeAdapter(
    memory,
    config,
    { id: "project-adapter-test", worktree: "/tmp/adapter-test", directory: "/tmp/adapter-test" },
    { parentOf: async () => undefined, modelLimits: async () => undefined },
    () => {},
  );
});

afterAll(async () => {
  await adapter?.close();
  await database?.drop();
});

const SESSION = "ses_adapter_queue";
let clock = Date.UTC(2026, 10, 30, 9, 0, 0);

function userMessage(id: string, text: string): { info: HostMessageInfo; parts: HostPart[] } {
  clock += 1000;
  return {
    info: { id, sessionID: SESSION, role: "user", time: { created: clock } },
    parts: [{ id: `prt_${id}`, messageID: id, sessionID: SESSION, type: "text", text }],
  };
}

/** The events of one finished assistant step: its text part, then the message with `time.completed`. */
function assistantStep(id: string, parentID: string, finish: string, text: string): void {
  clock += 1000;
  adapter.onEvent({
    type: "message.part.updated",
    properties: { part: { id: `prt_${id}`, messageID: id, sessionID: SESSION, type: "text", text } },
  });
  adapter.onEvent({
    type: "message.updated",
    properties: {
      info: { id, sessionID: SESSION, role: "assistant", parentID, finish, time: { created: clock, completed: clock } },
    },
  });
}

async function turnStates(): Promise<Record<string, string>> {
  const session = await memory.host.findSession("opencode", SESSION);
  if (!session) return {};
  const states: Record<string, string> = {};
  for (const id of ["msg_001", "msg_002", "msg_003"]) {
    const turn = await memory.getTurn({ sessionId: session.sessionId, turnId: id }).catch(() => undefined);
    if (turn) states[id] = turn.state;
  }
  return states;
}

describe("OpenCode adapter turn bookkeeping", () => {
  it("ends every queued turn with the reply to the last one, whatever order their admissions finished in", async () => {
    const first = userMessage("msg_001", "QUEUE-1 run the slow tool");
    await adapter.admit(SESSION, first.info, first.parts);
    assistantStep("msg_101", "msg_001", "tool-calls", "running the tool");
    // Two prompts queued during the tool loop; the third's chat.message completed before the second's (OpenCode does
    // not serialize the hook calls of two prompt_async requests).
    const third = userMessage("msg_003", "QUEUE-3 queued third");
    const second = userMessage("msg_002", "QUEUE-2 queued second");
    await adapter.admit(SESSION, third.info, third.parts);
    await adapter.admit(SESSION, second.info, second.parts);
    // One reply answers both queued prompts; its parent is the last user message (facts §2), then the session idles.
    assistantStep("msg_102", "msg_003", "stop", "both answered");
    adapter.onEvent({ type: "session.idle", properties: { sessionID: SESSION } });

    await retrying(
      async () => {
        expect(await turnStates()).toEqual({ msg_001: "completed", msg_002: "completed", msg_003: "completed" });
      },
      10_000,
      "the three turns to finish",
    );
  });
});
