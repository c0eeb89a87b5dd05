import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CapturedRequest, ModelServer } from "../../scripts/model-server.js";
import type { OpencodeServer } from "../../scripts/opencode-harness.js";
import { anthropicBlocks, estimateTokensOfBytes } from "../../scripts/prompt-cache.js";
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

/**
 * Main requests of the turn whose prompt (a text block) starts with `marker`: the latest prompt of the request, since
 * later turns carry the earlier prompts too (as native messages).
 */
function turnRequests(marker: string): CapturedRequest[] {
  return model.requests().filter((r) => {
    if (r.kind !== "main") return false;
    const prompts = blocksOf(r).filter(({ block }) => block.type === "text" && /^(CL|OT|IS)-\d/.test(block.text));
    return prompts.at(-1)?.block.text.startsWith(marker) === true;
  });
}

async function ask(session: string, text: string, on: OpencodeServer = server): Promise<void> {
  await on.prompt(session, text);
  await on.waitIdle(session, WAIT);
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

const strip = (b: Block) => ({ ...b, cache_control: undefined });

/** A request's content blocks with their roles, cache marks stripped: what a later request must begin with. */
function plain(request: CapturedRequest): { role: string; block: Block }[] {
  return blocksOf(request).map(({ role, block }) => ({ role, block: strip(block) }));
}

/** Indices of the marked content blocks of a request's messages. */
function marks(request: CapturedRequest): number[] {
  return blocksOf(request)
    .map(({ block }, k) => (block.cache_control ? k : -1))
    .filter((k) => k >= 0);
}

describe("the injected memory's cache layout under OpenCode's Anthropic provider", { timeout: 240_000 }, () => {
  it("re-sends each turn's request as the head of the next, appends what others published, and marks where the docs say", async () => {
    const session = await server.createSession("cache layout");
    const other = await server.createSession("cache layout, the other session");
    await ask(session, "CL-1 Decision: the importer batches 500 rows. REPLY=Noted: 500 rows.");
    await waitPublished(1);
    await ask(session, 'CL-2 check TOOLS=[{"name":"bash","args":{"command":"echo cl-two","description":"e"}}] END');
    await waitPublished(2);
    await ask(other, "OT-1 Decision: the exporter writes CSV. REPLY=Noted: CSV.");
    await waitPublished(3);
    await ask(session, "CL-3 what batch size? REPLY=500.");
    // ~24 KB of output: past cacheEpochKeptTokens (6,000), so the next turn begins a new epoch.
    const big =
      'TOOLS=[{"name":"bash","args":{"command":"head -c 24000 /dev/zero | tr \'\\\\0\' z","description":"z"}}] END';
    await ask(session, `CL-4 long output ${big}`);
    await waitPublished(5);
    await ask(session, "CL-5 and the exporter? REPLY=CSV.");

    const [first] = turnRequests("CL-1");
    const second = turnRequests("CL-2");
    const [third] = turnRequests("CL-3");
    const [fourth] = turnRequests("CL-4");
    const [fifth] = turnRequests("CL-5");
    expect(second.length).toBe(2); // the tool call, then the answer
    for (const r of [first, third, fourth, fifth]) expect(r).toBeDefined();
    const one = layoutOf(first as CapturedRequest, "CL-1");

    // The epoch's first turn: the memory head (and any shared lines), the volatile part, then the person's prompt.
    expect(one.stable[0].text).toMatch(/^optchat memory\. /);
    expect(one.volatileAt).toBe(one.stable.length);
    expect(one.promptAt).toBe(one.volatileAt + 1);
    expect(one.volatile.text).toMatch(/^optchat memory, continued: shared memory as of publication 0/);
    const stableText = one.stable.map((b: Block) => b.text).join("");
    expect(stableText).not.toMatch(/snapshot|through=|earlier messages|<session_memory|<previous_exchange/);
    // OpenCode's marks at an epoch's first request: its system block, the end of the stable memory, the prompt.
    expect((first as CapturedRequest).body.system.map((b: Block) => b.cache_control !== undefined)).toEqual([true]);
    expect(marks(first as CapturedRequest)).toEqual([one.volatileAt - 1, one.promptAt]);

    // Within a turn: the tool loop's second request begins with the whole first one.
    const [step1, step2] = second as [CapturedRequest, CapturedRequest];
    expect(plain(step2).slice(0, plain(step1).length)).toEqual(plain(step1));
    // Across turns of an epoch: every request begins with the whole previous request, byte for byte: the memory as
    // first sent, the earlier turns as native messages, each user message led by the text it was first sent with.
    expect(plain(step1).slice(0, plain(first as CapturedRequest).length)).toEqual(plain(first as CapturedRequest));
    expect(plain(third as CapturedRequest).slice(0, plain(step2).length)).toEqual(plain(step2));
    expect(plain(fourth as CapturedRequest).slice(0, plain(third as CapturedRequest).length)).toEqual(
      plain(third as CapturedRequest),
    );

    // What the other session published since the previous turn leads this turn's prompt; the session's own
    // published turns are not appended (they are in the request as native messages).
    const texts = blocksOf(third as CapturedRequest).filter(({ block }) => block.type === "text");
    const promptAt = texts.findIndex(({ block }) => block.text.startsWith("CL-3"));
    const update = texts[promptAt - 1]?.block.text as string;
    expect(update).toMatch(/^optchat memory, continued: published to shared memory .*\n<shared_memory_update>\n/);
    expect(update).toContain("OT-1 Decision: the exporter writes CSV.");
    expect(update).not.toContain("CL-1");
    expect(update).not.toContain("CL-2");
    // Marks at a later turn's first request: the previous turn's last message and the prompt, the tail marks.
    const blocks3 = blocksOf(third as CapturedRequest);
    const prompt3 = blocks3.findIndex(({ block }) => block.type === "text" && block.text.startsWith("CL-3"));
    expect(marks(third as CapturedRequest)).toEqual([prompt3 - 2, prompt3]);
    // The simulated cache read everything the previous turn sent: it wrote only the reply, the update and the prompt.
    const usage3 = (third as CapturedRequest).cache;
    expect(usage3?.cacheReadTokens ?? 0).toBeGreaterThan(10 * (usage3?.cacheWriteTokens ?? 0));

    // A new epoch after the long output: fresh memory whose stable part extends the previous epoch's, block for
    // block (a cache entry ends there), the previous exchange in its volatile part, the long output left behind.
    const five = layoutOf(fifth as CapturedRequest, "CL-5");
    expect(five.stable.slice(0, one.stable.length).map(strip)).toEqual(one.stable.map(strip));
    expect(five.stable[1].text).toMatch(/^<shared_memory scope="[^"]+">\n/);
    // The shared lines, oldest first, in parts that end where an earlier rendering ended (plugin/request/shared-parts.ts):
    // fewer parts than lines, each part whole lines.
    const parts = five.stable.slice(2).map((b: Block) => b.text);
    const lines = parts.join("").split("\n").slice(0, -1);
    expect(lines.map((t: string) => t.split("|")[0])).toEqual(lines.map((_: string, k: number) => `pub:${k}+1`));
    expect(parts.length).toBeLessThan(lines.length);
    for (const part of parts) expect(part).toMatch(/^pub:\d+\+\d+\|[\s\S]*\n$/);
    expect(lines.join("\n")).toContain("OT-1 Decision");
    expect(five.volatile.text).toContain("</shared_memory>");
    expect(five.volatile.text).toContain("<previous_exchange");
    expect(marks(fifth as CapturedRequest)).toEqual([five.volatileAt - 1, five.promptAt]);
    expect(JSON.stringify((fifth as CapturedRequest).body)).not.toContain("z".repeat(2000));
    const usage5 = (fifth as CapturedRequest).cache;
    expect(usage5?.cacheReadTokens ?? 0).toBeGreaterThan(4 * (usage5?.cacheWriteTokens ?? 0));
  });
  it("leads an isolated session's stable memory with its session block, which the next epoch extends and reads", async () => {
    // Isolated: no shared block, so the session block holds the whole history (docs/caching.md "Without a shared
    // block"). Two turns per epoch: IS-3 and IS-5 each begin one.
    const isolated = await world.server(
      await world.env({ modelApi: "anthropic", pluginOptions: { scope: "isolated", cacheEpochTurns: 2 } }),
    );
    const session = await isolated.createSession("isolated cache layout");
    await ask(session, "IS-1 Decision: the parser uses a Pratt loop. REPLY=Noted: Pratt loop.", isolated);
    await ask(session, "IS-2 Decision: errors carry spans. REPLY=Noted: spans.", isolated);
    await ask(session, "IS-3 Decision: tokens are interned. REPLY=Noted: interned.", isolated);
    await ask(session, "IS-4 Decision: the AST is immutable. REPLY=Noted: immutable.", isolated);
    await ask(session, "IS-5 what did we decide about the parser? REPLY=A Pratt loop.", isolated);
    const [third] = turnRequests("IS-3");
    const [fifth] = turnRequests("IS-5");
    const three = layoutOf(third as CapturedRequest, "IS-3");
    const five = layoutOf(fifth as CapturedRequest, "IS-5");

    // The session block's opening and lines are stable memory; its closing and the turn's boundary are volatile.
    expect(three.stable[1].text).toMatch(/^<session_memory session="[^"]+" generation="0">\n/);
    const stable3 = three.stable.map((b: Block) => b.text).join("");
    expect(stable3).toContain("IS-1 Decision: the parser uses a Pratt loop.");
    expect(stable3).not.toMatch(/<\/session_memory>|through=|before record|<previous_exchange|<shared_memory/);
    expect(three.volatile.text).toMatch(/^optchat memory, continued: session memory before record \d+/);
    // No shared memory to date in an isolated scope: the status line says nothing of one.
    expect(three.volatile.text).not.toContain("shared memory");
    expect(three.volatile.text).toContain("</session_memory>");
    expect(marks(third as CapturedRequest)).toEqual([three.volatileAt - 1, three.promptAt]);

    // The next epoch's stable memory extends it block for block, and the simulated cache reads all of it.
    expect(five.stable.length).toBeGreaterThan(three.stable.length);
    expect(five.stable.slice(0, three.stable.length).map(strip)).toEqual(three.stable.map(strip));
    expect(five.stable.map((b: Block) => b.text).join("")).toContain("IS-3 Decision: tokens are interned.");
    const body3 = (third as CapturedRequest).body;
    const throughStable3 = (body3.tools?.length ?? 0) + (body3.system?.length ?? 0) + three.stable.length;
    // The simulator's count of the prefix ending with IS-3's stable memory (its tokens are the prefix's bytes / 3.5).
    const stablePrefixTokens = estimateTokensOfBytes(
      anthropicBlocks(body3)
        .slice(0, throughStable3)
        .reduce((sum, block) => sum + Buffer.byteLength(block.json), 0),
    );
    expect((fifth as CapturedRequest).cache?.cacheReadTokens ?? 0).toBeGreaterThanOrEqual(stablePrefixTokens);
  });
});
