import { beforeAll, describe, expect, it } from "vitest";
import { MEMORY_CONTINUED, MEMORY_HEAD } from "../../plugin/request/memory-message.js";
import type { CapturedRequest, ModelServer } from "../../scripts/model-server.js";
import { type Opencode2Env, runOpencode2, startService } from "../../scripts/opencode2-harness.js";
import { retrying } from "../helpers.js";
import type { PgPool } from "./v2-pool.js";
import { useV2World } from "./v2-world.js";

/**
 * The V2 request layout (plugin/v2/layout.ts, docs/caching.md "OpenCode V2"), with real `@opencode/cli` 2.1.2
 * processes against the Anthropic-simulated provider (V2's own cache marks, the scripted model's cache simulation):
 * terminal A publishes with standalone runs; terminal B's session runs its turns through one V2 background service.
 * Structural: every request of B begins with everything B's previous request sent (so the memory never comes before
 * V2's history), the memory leads the turn's user message, and nothing V2 already sends is repeated by it.
 */

// biome-ignore lint/suspicious/noExplicitAny: wire JSON as V2's Anthropic client sent it
type Json = any;

const world = useV2World({ installs: 2, install: { modelApi: "anthropic" }, setupTimeoutMs: 120_000 });
let db: ReturnType<typeof PgPool>;
let model: ModelServer;
let envA: Opencode2Env;
let envB: Opencode2Env;
beforeAll(async () => {
  ({ db, model } = world);
  [envA, envB] = world.envs as [Opencode2Env, Opencode2Env];
  await startService(envB);
}, 60_000);

function stripMarks(value: Json): Json {
  if (Array.isArray(value)) return value.map(stripMarks);
  if (typeof value !== "object" || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([k]) => k !== "cache_control")
      .map(([k, v]) => [k, stripMarks(v)]),
  );
}

/** System and messages as sent, cache marks stripped (the marks move to the newest message; the bytes do not). */
const serialized = (r: CapturedRequest) =>
  JSON.stringify(stripMarks({ system: r.body.system, messages: r.body.messages }));
const texts = (message: Json): string[] =>
  (Array.isArray(message?.content) ? message.content : [])
    .filter((c: Json) => c.type === "text")
    .map((c: Json) => c.text);
/** B's session's requests: a message of them is B's first prompt (A's requests may quote it, inside memory). */
const bRequests = () =>
  model
    .requests()
    .filter((r) => r.kind === "main" && (r.body.messages ?? []).some((m: Json) => texts(m)[0]?.startsWith("[B t1]")));

/** Waits until every turn of V2 session `hostSessionId` is published (by its own process or B's service). */
async function published(hostSessionId: string | undefined): Promise<void> {
  await retrying(
    async () => {
      const rows = await db.query<{ state: string; publication_state: string }>(
        `SELECT t.state, t.publication_state FROM optchat.turns t JOIN optchat.sessions s USING (session_id)
          WHERE s.host = 'opencode-v2' AND s.host_session_id = $1::text`,
        [hostSessionId],
      );
      if (rows.rows.length === 0 || rows.rows.some((r) => r.publication_state !== "published"))
        throw new Error(JSON.stringify(rows.rows));
    },
    60_000,
    `the turns of ${hostSessionId} published`,
  );
}

describe("the V2 request layout across turns (real @opencode/cli 2.1.2, Anthropic-simulated cache)", () => {
  it("each request of B extends the previous one; the memory leads the turn's user message; no history twice", async () => {
    const a1 = await runOpencode2(envA, "ALPHA-1 note: the importer uses LISTEN/NOTIFY.\nREPLY=Noted ALPHA-1.");
    expect(a1.code, a1.stderr).toBe(0);
    await published(a1.sessionId);
    const calls = [{ name: "shell", args: { command: "echo b-one" } }];
    const b1 = await runOpencode2(envB, `[B t1] check TOOLS=${JSON.stringify(calls)} END`, { standalone: false });
    expect(b1.code, b1.stderr).toBe(0);
    const a2 = await runOpencode2(envA, "ALPHA-2 note: the exporter writes CSV.\nREPLY=Noted ALPHA-2.");
    expect(a2.code, a2.stderr).toBe(0);
    await published(a2.sessionId);
    const b2 = await runOpencode2(envB, "[B t2] and now? REPLY=ok B2.", { standalone: false, session: b1.sessionId });
    expect(b2.code, b2.stderr).toBe(0);
    const b3 = await runOpencode2(envB, "[B t3] anything else? REPLY=ok B3.", {
      standalone: false,
      session: b1.sessionId,
    });
    expect(b3.code, b3.stderr).toBe(0);

    const requests = bRequests();
    // Turn 1: the tool call's step and the step after its result; turns 2 and 3: one request each.
    expect(requests.length).toBe(4);
    const [t1a, t1b, t2, t3] = requests as [CapturedRequest, CapturedRequest, CapturedRequest, CapturedRequest];

    // Every request begins with everything the previous one sent (its closing `]}` aside): V2's history first and in
    // place, the memory inside it where it was first sent, nothing before it that changes from turn to turn.
    for (const [earlier, later] of [
      [t1a, t1b],
      [t1b, t2],
      [t2, t3],
    ] as const) {
      const before = serialized(earlier);
      expect(
        serialized(later).startsWith(before.slice(0, -2)),
        `${before.slice(-400)}\n---\n${serialized(later)}`,
      ).toBe(true);
    }

    // Turn 1's request: the rendering (head, A's turn) as a user message of its own, then the person's words.
    const first = t1a.body.messages as Json[];
    expect(first.map((m) => m.role)).toEqual(["user", "user"]);
    const [rendering] = texts(first[0]);
    expect(rendering?.startsWith(MEMORY_HEAD)).toBe(true);
    expect(rendering).toContain("ALPHA-1 note: the importer uses LISTEN/NOTIFY");
    expect(texts(first[1])).toEqual([expect.stringMatching(/^\[B t1\]/)]);

    // Turn 2: what A published since, just before the words; turn 3: nothing new, the words after B's reply.
    const [update] = texts((t2.body.messages as Json[]).at(-2));
    expect(update?.startsWith(MEMORY_CONTINUED)).toBe(true);
    expect(update).toContain("<shared_memory_update>");
    expect(update).toContain("ALPHA-2 note: the exporter writes CSV");
    expect(update).not.toContain("ALPHA-1");
    expect(texts((t2.body.messages as Json[]).at(-1))).toEqual([expect.stringMatching(/^\[B t2\]/)]);
    const tail3 = (t3.body.messages as Json[]).slice(-2);
    expect(tail3.map((m) => m.role)).toEqual(["assistant", "user"]);
    expect(texts(tail3[1])).toEqual([expect.stringMatching(/^\[B t3\]/)]);

    // Nothing V2 sends is sent again by the memory: B's own turns appear once (V2's messages), no session block, no
    // previous exchange; the rendering is sent once.
    const all = JSON.stringify(t3.body.messages);
    expect(all.split("[B t1]").length - 1).toBe(1);
    expect(all.split("[B t2]").length - 1).toBe(1);
    const memory = (t3.body.messages as Json[]).flatMap(texts).filter((t) => t.startsWith("optchat memory"));
    expect(memory.length).toBe(2);
    for (const text of memory) expect(text).not.toMatch(/\[B t\d\]|b-one/);
    expect(all).not.toContain("<session_memory");
    expect(all).not.toContain("<previous_exchange");
    expect(all.split("optchat memory. What follows").length - 1).toBe(1);

    // The simulated Anthropic cache reads back all of the previous request at each step and turn: V2's own marks
    // (last tool, system[0], system[3], the last message) are enough once nothing before them changes.
    for (const [earlier, later] of [
      [t1a, t1b],
      [t1b, t2],
      [t2, t3],
    ] as const) {
      expect(later.cache?.cacheReadTokens).toBe(earlier.cache?.inputTokens);
    }
  }, 420_000);
});
