import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type PluginWorld, retrying, startPluginWorld } from "../helpers.js";

/**
 * Issue 13 item 2 with real OpenCode 1.18.33: with OPTCHAT_SUMMARIZER=auto (the default) the embedded compactor uses the
 * model OpenCode has, with OpenCode's credentials. The scripted model stands for the provider on both wires.
 */

const WAIT = 90_000;
// Over 512 bytes: its leaf needs a compactor call.
const LONG = `Keep the importer on the durable broker queue; retries stay at three. ${"Because ops already watch the broker. ".repeat(16)} REPLY=noted`;

let world: PluginWorld;

beforeAll(async () => {
  world = await startPluginWorld();
}, 60_000);

afterAll(async () => {
  await world?.close();
});

async function compactorCalls(): Promise<{ provider: string; model: string; outcome: string }[]> {
  const result = await world.db.query("SELECT provider, model, outcome FROM optchat.compactor_calls ORDER BY call_id");
  return result.rows;
}

describe("the compactor's model comes from OpenCode", { timeout: 180_000 }, () => {
  it("uses small_model with its provider's baseURL and key (an OpenAI-compatible provider)", async () => {
    const env = await world.env({ extraEnv: { OPTCHAT_SUMMARIZER: "auto" } });
    const server = await world.server(env);
    const session = await server.createSession("small_model");
    await server.prompt(session, LONG);
    await server.waitIdle(session, WAIT);
    const calls = await retrying(
      async () => {
        const rows = await compactorCalls();
        if (rows.length === 0) throw new Error("no compactor call recorded yet");
        return rows;
      },
      WAIT,
      "a compactor call through OpenCode's small_model",
    );
    expect(calls[0]).toMatchObject({ provider: "openai-compatible", model: "fake", outcome: "ok" });
    const request = world.model.requests().find((r) => r.kind === "compactor");
    expect(request?.api).toBe("openai");
    // OpenCode's provider options carried the credential: apiKey "x" from opencode.json.
    expect(request?.body.model).toBe("fake");
    await server.stop();
  });

  it("without small_model uses the documented cheap model of the main model's provider (Anthropic wire)", async () => {
    await world.db.query("DELETE FROM optchat.compactor_calls");
    world.model.clear();
    const env = await world.env({ modelApi: "anthropic", smallModel: null, extraEnv: { OPTCHAT_SUMMARIZER: "auto" } });
    const server = await world.server(env);
    const session = await server.createSession("main provider");
    // Two turns: the second one's leaf has the first turn's lines as its context.
    for (const subject of ["exporter", "scheduler"]) {
      await server.prompt(session, LONG.replace("importer", subject));
      await server.waitIdle(session, WAIT);
    }
    // Until the second turn's leaf was summarized: the first call with context (merges are made only when a view
    // needs them, so no other call need carry one before it).
    const hasContext = () =>
      world.model.requests().some((r) => r.kind === "compactor" && r.body.messages[0].content.length > 1);
    const calls = await retrying(
      async () => {
        const rows = await compactorCalls();
        if (rows.length < 2 || !hasContext())
          throw new Error(`${rows.length} compactor call(s) recorded so far, none with context yet`);
        return rows;
      },
      WAIT,
      "compactor calls through the main provider's cheap default",
    );
    expect(calls[0]).toMatchObject({ provider: "anthropic", model: "claude-haiku-4-5", outcome: "ok" });
    const requests = world.model.requests().filter((r) => r.kind === "compactor");
    for (const request of requests) {
      expect(request.api).toBe("anthropic");
      expect(request.body.model).toBe("claude-haiku-4-5");
    }
    // Every call marks the system prompt, the same in every call (docs/compactor.md "Cache marks and the scale
    // line"); a call with context sends it first, before the step (a short context is one open block, unmarked).
    for (const request of requests) expect(JSON.stringify(request.body.system)).toContain("cache_control");
    const withContext = requests.find((r) => r.body.messages[0].content.length > 1);
    expect(withContext?.body.messages[0].content[0].text.startsWith("<chat>\n")).toBe(true);
    await server.stop();
  });
});
