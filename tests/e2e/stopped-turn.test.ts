import { setTimeout as delay } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DONE_PREFIX, longTaskPrompt, stepRuns } from "../../scripts/diligent-agent.js";
import type { CapturedRequest } from "../../scripts/model-server.js";
import type { OpencodeServer } from "../../scripts/opencode-harness.js";
import { type PluginWorld, startPluginWorld } from "../helpers.js";

/**
 * A turn stopped by a single result larger than the window, and the "continue" turn after it, with real OpenCode
 * (issue 36 deliver 4). The diligent scripted agent (scripts/diligent-agent.ts) calls bash for the first step whose
 * output it cannot see, so a hand-on that lost progress shows as a repeated step. Step 4 prints 45 KB (under OpenCode's
 * 50 KB truncation), far more than a 24k window holds beside the instructions and tools.
 */

const WINDOW = 24_000;
const BIG = { step: 4, bytes: 45_000 };

let world: PluginWorld;
let server: OpencodeServer;
/** The OpenCode sessions the tests ran, in order. */
const hostSessions: string[] = [];

beforeAll(async () => {
  world = await startPluginWorld();
  server = await world.server(await world.env({ modelApi: "anthropic", contextLimit: WINDOW, outputLimit: 4_000 }));
}, 120_000);

afterAll(async () => {
  await world?.close();
});

// biome-ignore lint/suspicious/noExplicitAny: OpenCode's message JSON
type Json = any;

/** How many times each step ran in the session (OpenCode's own record of what ran). */
function runsOf(messages: Json[]): Map<number, number> {
  return new Map([...stepRuns(messages)].map(([step, outputs]) => [step, outputs.length]));
}

async function publishedTurns(session: string): Promise<number> {
  const { rows } = await world.db.query<{ n: string }>(
    `SELECT count(*) AS n FROM optchat.turns t JOIN optchat.sessions s USING (session_id)
      WHERE s.host_session_id = $1::text AND t.publication_state = 'published'`,
    [session],
  );
  return Number(rows[0]?.n ?? 0);
}

/** Runs the stopped turn, then "continue" (after its publication when asked); returns what the continue turn got. */
async function stopThenContinue(title: string, afterPublication: boolean, steps: number) {
  const session = await server.createSession(title);
  hostSessions.push(session);
  const prompt = longTaskPrompt(steps, 1024, BIG);
  await server.prompt(session, prompt);
  await server.waitIdle(session, 240_000);
  const stopped: Json[] = await server.messages(session);
  const last = stopped.at(-1);
  // The turn stopped at the request after the big result, and says why, that nothing was lost and what to do.
  expect(last.info.role).toBe("assistant");
  const error = String(last.info.error?.data?.message ?? "");
  expect(error).toMatch(/result alone is too large/);
  expect(error).toMatch(/Nothing was lost/);
  expect(error).toMatch(/send "continue"/);
  expect([...runsOf(stopped).entries()].sort((a, b) => a[0] - b[0])).toEqual([
    [1, 1],
    [2, 1],
    [3, 1],
    [4, 1],
  ]);
  if (afterPublication) {
    const until = Date.now() + 120_000;
    while ((await publishedTurns(session)) < 1 && Date.now() < until) await delay(250);
    expect(await publishedTurns(session)).toBe(1);
  }
  const from = (world.model.requests().at(-1)?.index ?? 0) + 1;
  await server.prompt(session, "continue");
  await server.waitIdle(session, 240_000);
  const messages: Json[] = await server.messages(session);
  const requests = world.model.requests().filter((r: CapturedRequest) => r.kind === "main" && r.index >= from);
  return { session, messages, requests, prompt };
}

describe("a turn stopped mid-way hands on its position (issue 36)", { timeout: 900_000 }, () => {
  for (const afterPublication of [false, true]) {
    const when = afterPublication ? "after the stopped turn was published" : "at once";
    it(`a turn stopped by one oversized result says so, and "continue" ${when} resumes with no step repeated`, async () => {
      const title = `stopped ${afterPublication ? "published" : "at once"}`;
      // Another step count for each session: the diligent agent reads a task's steps only (memory shows both).
      const STEPS = afterPublication ? 9 : 8;
      const { messages, requests } = await stopThenContinue(title, afterPublication, STEPS);
      // Every step ran exactly once over the two turns, and the agent saw them all.
      const runs = runsOf(messages);
      const errors = messages.map((m) => m.info.error?.data?.message).filter(Boolean);
      expect(
        [...runs.keys()].sort((a, b) => a - b),
        JSON.stringify(errors),
      ).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
      for (const count of runs.values()) expect(count).toBe(1);
      const last = messages.at(-1);
      expect(last.info.error).toBeUndefined();
      expect(last.parts.find((p: Json) => p.type === "text")?.text).toContain(DONE_PREFIX);
      // The continue turn's first request carried the hand-on: the error and the big step's line with its ref.
      const first = JSON.stringify(requests[0]?.body.messages ?? []);
      expect(first).toContain('<stopped_turn state=\\"failed\\"');
      expect(first).toMatch(/error: The model request failed/);
      expect(first).toMatch(new RegExp(`\\d+\\+1\\|bash .{0,800}STEP 4/${STEPS} DONE`));
      for (const request of requests) expect(request.cache?.inputTokens ?? 0).toBeLessThanOrEqual(WINDOW);
    });
  }

  it("a session's first request is sized with what an earlier session of the same agent and model measured", async () => {
    expect(hostSessions).toHaveLength(2);
    const budgets = async (host: string) =>
      (
        await world.db.query<{ b: { instructionsTokens: number } }>(
          `SELECT i.detail->'budget' AS b FROM optchat.injections i JOIN optchat.sessions s USING (session_id)
            WHERE s.host_session_id = $1::text AND i.status = 'injected' ORDER BY i.injection_id`,
          [host],
        )
      ).rows.map((r) => r.b.instructionsTokens);
    const [first, second] = [await budgets(hostSessions[0] as string), await budgets(hostSessions[1] as string)];
    // The first session's own first request had only the estimate; the second starts from the first's measurement.
    expect(first[0]).not.toBe(first.at(-1));
    expect(second[0]).toBe(first.at(-1));
  });
});
