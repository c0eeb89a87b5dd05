import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DONE_PREFIX, longTaskPrompt, stepRuns } from "../../scripts/diligent-agent.js";
import type { CapturedRequest } from "../../scripts/model-server.js";
import { FAKE_MODEL, type OpencodeServer } from "../../scripts/opencode-harness.js";
import { type PluginWorld, startPluginWorld } from "../helpers.js";

/**
 * Execution checkpoints meeting OpenCode's own machinery, with real OpenCode (issue 36 delivers 3 and 5): a subagent
 * session (the task tool) runs a long turn checkpointed like any session, and OpenCode's native compaction of a
 * checkpointed session summarizes the native transcript, never optchat's synthetic view, after which the session goes
 * on. The diligent scripted agent (scripts/diligent-agent.ts) repeats any step whose output a request lost.
 */

let world: PluginWorld;
let server: OpencodeServer;
const WINDOW = 32_000;

beforeAll(async () => {
  world = await startPluginWorld();
  server = await world.server(await world.env({ modelApi: "anthropic", contextLimit: WINDOW, outputLimit: 4_000 }));
}, 120_000);

afterAll(async () => {
  await world?.close();
});

// biome-ignore lint/suspicious/noExplicitAny: OpenCode's message JSON, wire JSON
type Json = any;

/** How many times each step ran in the session (OpenCode's own record of what ran). */
function runsOf(messages: Json[]): Map<number, number> {
  return new Map([...stepRuns(messages)].map(([step, outputs]) => [step, outputs.length]));
}

function expectEveryStepOnce(messages: Json[], steps: number): void {
  const runs = runsOf(messages);
  expect([...runs.keys()].sort((a, b) => a - b)).toEqual(Array.from({ length: steps }, (_, i) => i + 1));
  for (const count of runs.values()) expect(count).toBe(1);
}

const wire = (r: CapturedRequest) => JSON.stringify(r.body.messages ?? []);

describe("long turns meet OpenCode's subagents and native compaction (issue 36)", { timeout: 900_000 }, () => {
  it("a subagent's long turn (the task tool) is checkpointed like any session: one turn, no step repeated, every request within the window", async () => {
    const steps = 24;
    const prompt = longTaskPrompt(steps, 4096);
    const from = (world.model.requests().at(-1)?.index ?? 0) + 1;
    const session = await server.createSession("parent of a long subagent");
    const call = { name: "task", args: { description: "long child", prompt, subagent_type: "general" } };
    await server.prompt(session, `SUB-LONG TOOLS=${JSON.stringify([call])} END`);
    await server.waitIdle(session, 600_000);

    const { rows } = await world.db.query<{ host_session_id: string }>(
      "SELECT host_session_id FROM optchat.sessions WHERE parent_session_id IS NOT NULL",
    );
    expect(rows).toHaveLength(1);
    const child: Json[] = await server.messages(rows[0]?.host_session_id as string);
    expectEveryStepOnce(child, steps);
    expect(child.filter((m) => m.info.role === "user")).toHaveLength(1);
    expect(child.at(-1).parts.find((p: Json) => p.type === "text")?.text).toContain(DONE_PREFIX);
    // The parent got the child's report.
    const parent: Json[] = await server.messages(session);
    expect(JSON.stringify(parent)).toContain(DONE_PREFIX);

    const childRequests = world.model
      .requests()
      .filter(
        (r: CapturedRequest) =>
          r.index >= from && r.kind === "main" && wire(r).includes(prompt) && !wire(r).includes("SUB-LONG"),
      );
    expect(childRequests.length).toBe(steps + 1);
    for (const r of childRequests) expect(r.cache?.inputTokens ?? 0).toBeLessThanOrEqual(WINDOW);
    // The child's steps outgrew their share: its later requests carry a checkpoint after the prompt.
    expect(childRequests.some((r) => wire(r).includes("<turn_checkpoint"))).toBe(true);
  });

  it("native compaction of a checkpointed session summarizes OpenCode's own transcript, never the synthetic view, and the session goes on", async () => {
    const steps = 14;
    const prompt = longTaskPrompt(steps, 4096);
    const session = await server.createSession("compacted long turn");
    await server.prompt(session, prompt);
    await server.waitIdle(session, 600_000);
    const before: Json[] = await server.messages(session);
    expectEveryStepOnce(before, steps);
    const turnRequests = world.model
      .requests()
      .filter((r: CapturedRequest) => r.kind === "main" && wire(r).includes(prompt));
    expect(turnRequests.some((r) => wire(r).includes("<turn_checkpoint"))).toBe(true);

    // OpenCode's /compact (the summarize endpoint): its request is the native transcript.
    const from = (world.model.requests().at(-1)?.index ?? 0) + 1;
    const response = await fetch(`${server.url}/session/${session}/summarize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(FAKE_MODEL),
    });
    expect(response.ok).toBe(true);
    await server.waitIdle(session, 120_000);
    const summaries = world.model.requests().filter((r: CapturedRequest) => r.index >= from && r.kind === "summary");
    expect(summaries).toHaveLength(1);
    const summary = JSON.stringify((summaries[0] as CapturedRequest).body);
    expect(summary).not.toContain("<turn_checkpoint");
    expect(summary).not.toContain("optchat memory");
    // OpenCode renders its own transcript for the summary (the older steps, the latest kept aside as they are): the
    // steps it holds are there in order from the first, each with its output as OpenCode stored it.
    const held = [...summary.matchAll(/\[Tool result\]: STEP (\d+)\/14 DONE/g)].map((m) => Number(m[1]));
    expect(held.length).toBeGreaterThan(0);
    expect(held).toEqual(Array.from({ length: held.length }, (_, i) => i + 1));
    expect(summary).toContain(prompt);

    // The session goes on after the native summary: the next turn is answered, and the summary is kept as a note.
    await server.prompt(session, "AFTER-COMPACTION REPLY=still here");
    await server.waitIdle(session, 120_000);
    const after: Json[] = await server.messages(session);
    expect(after.at(-1).info.error).toBeUndefined();
    expect(after.at(-1).parts.find((p: Json) => p.type === "text")?.text).toBe("still here");
    const notes = await world.db.query<{ n: string }>(
      `SELECT count(*) AS n FROM optchat.records r JOIN optchat.sessions s USING (session_id) JOIN optchat.blobs b ON b.hash = r.payload_hash
        WHERE s.host_session_id = $1::text AND r.kind = 'note' AND convert_from(b.content, 'UTF8') LIKE '[OpenCode native compaction summary]%'`,
      [session],
    );
    expect(Number(notes.rows[0]?.n)).toBe(1);
  });
});
