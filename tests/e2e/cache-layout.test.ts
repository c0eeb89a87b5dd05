import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CapturedRequest, ModelServer } from "../../scripts/model-server.js";
import type { OpencodeServer } from "../../scripts/opencode-harness.js";
import { type PluginWorld, retrying, startPluginWorld } from "../helpers.js";

/**
 * The cache-stable request layout (docs/caching.md) as real OpenCode 1.18.33 sends it through its own
 * @ai-sdk/anthropic provider to the scripted model's Anthropic endpoint: where the memory goes, where OpenCode's
 * cache marks land, and what stays byte-identical from one turn to the next. Structure only, no timing.
 */

const WAIT = 90_000;

// biome-ignore lint/suspicious/noExplicitAny: Anthropic wire JSON, read field by field
type Block = any;

let world: PluginWorld;
let db: pg.Pool;
let model: ModelServer;
let server: OpencodeServer;

beforeAll(async () => {
  world = await startPluginWorld();
  ({ db, model } = world);
  server = await world.server(await world.env({ modelApi: "anthropic" }));
}, 180_000);

afterAll(async () => {
  await world?.close();
});

/** Every content block of a request's messages, in order, with the role of its message. */
function blocksOf(request: CapturedRequest): { role: string; block: Block }[] {
  return (request.body.messages as { role: string; content: Block[] | string }[]).flatMap((m) =>
    (typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content).map((block) => ({
      role: m.role,
      block,
    })),
  );
}

/** Main requests of the turn whose prompt (a text block) starts with `marker`. */
function turnRequests(marker: string): CapturedRequest[] {
  return model
    .requests()
    .filter(
      (r) =>
        r.kind === "main" && blocksOf(r).some(({ block }) => block.type === "text" && block.text.startsWith(marker)),
    );
}

async function ask(session: string, text: string): Promise<void> {
  await server.prompt(session, text);
  await server.waitIdle(session, WAIT);
}

async function waitPublished(count: number): Promise<void> {
  await retrying(
    async () => {
      const { rows } = await db.query("SELECT count(*)::int AS n FROM optchat.publications");
      if ((rows[0]?.n ?? 0) < count) throw new Error(`${rows[0]?.n} publications`);
    },
    WAIT,
    `${count} publications`,
  );
}

/** The memory's parts in a turn's first request: stable (the memory message's blocks), volatile, the prompt. */
function layoutOf(request: CapturedRequest, marker: string) {
  const texts = blocksOf(request).filter(({ block }) => block.type === "text");
  const promptAt = texts.findIndex(({ block }) => block.text.startsWith(marker));
  const volatileAt = texts.findIndex(({ block }) => block.text.startsWith("optchat memory, continued:"));
  return {
    stable: texts.slice(0, volatileAt).map(({ block }) => block),
    volatile: texts[volatileAt]?.block,
    prompt: texts[promptAt]?.block,
    volatileAt,
    promptAt,
  };
}

describe("the injected memory's cache layout under OpenCode's Anthropic provider", { timeout: 240_000 }, () => {
  it("keeps the stable memory byte-identical across turns, marks its end, and sends volatile text after it", async () => {
    const session = await server.createSession("cache layout");
    await ask(session, "CL-1 Decision: the importer batches 500 rows. REPLY=Noted: 500 rows.");
    await waitPublished(1);
    await ask(session, 'CL-2 check TOOLS=[{"name":"bash","args":{"command":"echo cl-two","description":"e"}}] END');
    await waitPublished(2);
    await ask(session, "CL-3 what batch size? REPLY=500.");

    const second = turnRequests("CL-2");
    const third = turnRequests("CL-3");
    expect(second.length).toBe(2); // the tool call, then the answer
    expect(third.length).toBe(1);
    const two = layoutOf(second[0] as CapturedRequest, "CL-2");
    const three = layoutOf(third[0] as CapturedRequest, "CL-3");

    // Order: the memory head, the shared block's lines, then the volatile part, then the person's prompt, last.
    expect(three.stable[0].text).toMatch(/^optchat memory\. /);
    expect(three.stable[1].text).toMatch(/^<shared_memory scope="[^"]+">\n/);
    expect(three.stable.slice(2).map((b: Block) => b.text.split("|")[0])).toEqual(["pub:0+1", "pub:1+1"]);
    expect(three.volatileAt).toBe(three.stable.length);
    expect(three.promptAt).toBe(three.volatileAt + 1);
    expect(three.volatile.text).toMatch(/^optchat memory, continued: shared memory as of publication 2/);
    expect(three.volatile.text).toContain("</shared_memory>");

    // Nothing per-turn in the stable part: no counters, snapshot numbers or session attributes.
    const stableText = three.stable.map((b: Block) => b.text).join("");
    expect(stableText).not.toMatch(/snapshot|through=|earlier messages|<session_memory|<previous_exchange/);

    // The session's own published turns are not sent twice: CL-1 and CL-2 are in the shared lines only.
    const sessionBlock = /<session_memory[\s\S]*?<\/session_memory>/.exec(three.volatile.text)?.[0] ?? "";
    expect(sessionBlock).not.toBe("");
    expect(sessionBlock).not.toContain("CL-1");
    expect(sessionBlock).not.toContain("CL-2");
    expect(stableText).toContain("CL-1 Decision");

    // Across turns: turn 2's stable memory is a prefix of turn 3's, block for block, up to the first new line.
    const strip = (b: Block) => ({ ...b, cache_control: undefined });
    expect(three.stable.slice(0, two.stable.length).map(strip)).toEqual(two.stable.map(strip));
    expect(three.stable.length).toBe(two.stable.length + 1);

    // OpenCode's marks (docs/caching.md): its system block, the end of the stable memory and the prompt at a turn's
    // start; nothing else, within Anthropic's 4.
    const body = (third[0] as CapturedRequest).body;
    expect(body.system.map((b: Block) => b.cache_control !== undefined)).toEqual([true]);
    const marked = blocksOf(third[0] as CapturedRequest)
      .map(({ block }, k) => (block.cache_control ? k : -1))
      .filter((k) => k >= 0);
    expect(marked).toEqual([three.volatileAt - 1, three.promptAt]);
    // The simulated cache read the previous turn's entry at the end of its stable memory: what it wrote is the new
    // shared line, the volatile part and the prompt, far less than it read.
    const usage = (third[0] as CapturedRequest).cache;
    expect(usage?.cacheReadTokens ?? 0).toBeGreaterThan(4 * (usage?.cacheWriteTokens ?? 0));

    // Within a turn: the tool loop's second request repeats the first one's memory byte for byte.
    const again = layoutOf(second[1] as CapturedRequest, "CL-2");
    expect(again.stable.map(strip)).toEqual(two.stable.map(strip));
    expect(again.volatile.text).toBe(two.volatile.text);
  });
});
