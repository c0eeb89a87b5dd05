import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DONE_PREFIX, longTaskPrompt, stepRuns } from "../../scripts/diligent-agent.js";
import type { CapturedRequest } from "../../scripts/model-server.js";
import { expandFolded } from "../../src/core/checkpoint-lines.js";
import { resolveConfig } from "../../src/memory/config.js";
import { openMemory } from "../../src/memory/service.js";
import { type PluginWorld, startPluginWorld } from "../helpers.js";

/**
 * A long active turn with real OpenCode (issue 36): the diligent scripted agent (scripts/diligent-agent.ts) calls bash
 * for the first step whose output it cannot see, so a request that lost progress makes it repeat a step. Assertions
 * are on what OpenCode stored, on every request the model received, and on memory_zoom of the checkpoint's refs.
 */

const STEPS = 30;
const WINDOW = 16_000;

let world: PluginWorld;

beforeAll(async () => {
  world = await startPluginWorld();
}, 120_000);

afterAll(async () => {
  await world?.close();
});

// biome-ignore lint/suspicious/noExplicitAny: wire JSON as the client sent it
type Json = any;

function blocksOf(message: Json): Json[] {
  return typeof message.content === "string" ? [{ type: "text", text: message.content }] : (message.content ?? []);
}

describe("a long active turn with real OpenCode (issue 36)", { timeout: 600_000 }, () => {
  it("runs 30 steps of 4 KB at a 16k window in one turn: every request fits, keeps its pairs and the prompt, and the checkpoint's refs open the exact outputs", async () => {
    const env = await world.env({ modelApi: "anthropic", contextLimit: WINDOW, outputLimit: 4_000 });
    const server = await world.server(env);
    const session = await server.createSession("long turn");
    const prompt = longTaskPrompt(STEPS, 4096);
    await server.prompt(session, prompt);
    await server.waitIdle(session, 480_000);

    // Every step ran exactly once, in one turn, and the agent saw them all.
    const messages: Json[] = await server.messages(session);
    const outputs = stepRuns(messages);
    expect([...outputs.keys()].sort((a, b) => a - b)).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
    for (const runs of outputs.values()) expect(runs).toHaveLength(1);
    expect(messages.filter((m) => m.info.role === "user")).toHaveLength(1);
    const last = messages.at(-1);
    expect(last.info.error).toBeUndefined();
    expect(last.parts.find((p: Json) => p.type === "text")?.text).toContain(DONE_PREFIX);

    const requests = world.model
      .requests()
      .filter((r: CapturedRequest) => r.kind === "main" && JSON.stringify(r.body.messages).includes(prompt));
    expect(requests.length).toBe(STEPS + 1);
    let checkpointed: string | undefined;
    for (const request of requests) {
      // Within the window as the provider counts it.
      expect(request.cache?.inputTokens).toBeLessThanOrEqual(WINDOW);
      const wire: Json[] = request.body.messages;
      // The person's prompt verbatim, in a user message.
      expect(
        wire.some((m) => m.role === "user" && blocksOf(m).some((b) => b.type === "text" && b.text === prompt)),
      ).toBe(true);
      // Every tool_use is answered by a tool_result in the next message, and every tool_result answers the one before.
      wire.forEach((m, i) => {
        const uses = blocksOf(m)
          .filter((b) => b.type === "tool_use")
          .map((b) => b.id);
        const answered = blocksOf(wire[i + 1] ?? {})
          .filter((b) => b.type === "tool_result")
          .map((b) => b.tool_use_id);
        if (m.role === "assistant") expect(answered.sort()).toEqual(uses.sort());
        const results = blocksOf(m)
          .filter((b) => b.type === "tool_result")
          .map((b) => b.tool_use_id);
        const asked = blocksOf(wire[i - 1] ?? {})
          .filter((b) => b.type === "tool_use")
          .map((b) => b.id);
        if (results.length > 0) expect(results.sort()).toEqual(asked.sort());
      });
      const text = wire.flatMap(blocksOf).find((b) => b.type === "text" && b.text.startsWith("<turn_checkpoint"));
      if (text) checkpointed = text.text;
    }

    // The checkpoint's lines (folded or not) name every step it stands for, and each ref opens that step's output.
    expect(checkpointed).toBeDefined();
    const lines = (checkpointed as string).split("\n").slice(2, -1).flatMap(expandFolded);
    expect(lines.length).toBeGreaterThan(STEPS / 2);
    const { rows } = await world.db.query<{ session_id: string; turn_id: string }>(
      "SELECT t.session_id, t.turn_id FROM optchat.turns t JOIN optchat.sessions s USING (session_id) WHERE s.host_session_id = $1::text",
      [session],
    );
    const ctx = { sessionId: rows[0]?.session_id as string, turnId: rows[0]?.turn_id as string };
    const memory = await openMemory(resolveConfig({ overrides: { databaseUrl: world.database.url } }));
    try {
      // A folded line's ref, as the line shows it, opens into the refs it stands for.
      for (const folded of (checkpointed as string)
        .split("\n")
        .slice(2, -1)
        .filter((l) => l.startsWith("{"))) {
        const ref = folded.split("|")[0] as string;
        const page = await memory.zoom(ctx, ref, { maxTokens: 100_000 });
        expect(page.kind === "lines" && page.lines.map((l) => l.ref)).toEqual(
          expandFolded(folded).map((l) => l.split("|")[0]),
        );
      }
      for (const line of lines) {
        const [ref, text] = line.split("|") as [string, string];
        const step = Number(/STEP (\d+)\//.exec(text)?.[1]);
        const page = await memory.zoom(ctx, ref, { maxTokens: 100_000 });
        expect(page.kind).toBe("message");
        expect(page.kind === "message" && page.text).toBe(outputs.get(step)?.[0]);
      }
    } finally {
      await memory.close();
    }
  });
});
