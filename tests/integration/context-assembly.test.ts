import { beforeAll, describe, expect, it } from "vitest";
import { estimateTokens } from "../../src/core/context.js";
import { omittedText } from "../../src/memory/assembly.js";
import { startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import { MEDIUM_WINDOW, messageWriter, retrying, useTestMemory } from "../helpers.js";

const db = useTestMemory({ viewBytes: 4000 });
let session: Session;
const writeMessage = messageWriter(db, Date.UTC(2026, 10, 21, 9));

async function ingest(turnId: string, kind: "user" | "assistant", text: string) {
  await writeMessage(session, turnId, kind, text);
}

const WINDOW = MEDIUM_WINDOW;

beforeAll(async () => {
  session = await db.memory.openSession({ host: "test", hostSessionId: "ctx", projectId: "prj_ctx" });
});

describe("context assembly", () => {
  it("reports MEMORY_NOT_READY in strict mode while the compactor lags, and says what is missing in partial mode", async () => {
    // No worker is running: the first turn's messages stay unsummarized.
    await db.memory.admitTurn({ sessionId: session.sessionId, turnId: "t1" });
    await ingest("t1", "user", `Please document the retry policy: ${"three attempts, ten seconds apart. ".repeat(30)}`);
    await ingest("t1", "assistant", "Documented in docs/retries.md.");
    await db.memory.finishTurn({ sessionId: session.sessionId, turnId: "t1" }, "completed");
    await db.memory.admitTurn({ sessionId: session.sessionId, turnId: "t2", query: "what did we decide?" });
    const ctx = { sessionId: session.sessionId, turnId: "t2" };

    const strict = db.memory.assembleContext(ctx, { ...WINDOW, waitMs: 300 });
    await expect(strict).rejects.toMatchObject({ code: "MEMORY_NOT_READY", details: { pending: 2, firstPending: 0 } });
    const partial = await db.memory.assembleContext(ctx, { ...WINDOW, waitMs: 300, readiness: "partial" });
    expect(partial.omitted.map(omittedText).join(" ")).toMatch(/session memory: .*not summarized yet/);
    // Typed: the session's history is not complete, so a host keeps the native messages it would stand for; and an
    // incomplete assembly is never handed back as an earlier step's.
    expect(partial.omitted).toContainEqual({
      block: "session memory",
      reason: expect.stringMatching(/not summarized/),
    });
    expect(partial.historyComplete).toBe(false);
    const again = await db.memory.assembleContext(
      ctx,
      { ...WINDOW, waitMs: 0, readiness: "partial" },
      { previous: partial },
    );
    expect(again.reused).toBe(false);
    // The session block says what is missing and shows no placeholder or cut text; the sources are intact. (The
    // previous exchange, verbatim by design, is a separate block.)
    const own = partial.blocks.find((b) => b.name === "session_memory")?.text ?? "";
    expect(own).toContain("Partial: some earlier messages are not summarized yet");
    expect(own).not.toMatch(/^\d+\+\d+\|/m);
    expect(own).not.toContain("not summarized yet: zoom it");
    expect((await db.memory.listRecords(session.sessionId)).length).toBe(2);
  });

  it("once summarized, gives the own history up to the turn, the previous exchange labelled as a rendering, within budget", async () => {
    const worker = await startWorker(db.memory, db.config, () => {});
    try {
      await db.memory.settle(session.sessionId, { timeoutMs: 20_000 });
      const ctx = { sessionId: session.sessionId, turnId: "t2" };
      await ingest("t2", "user", "what did we decide?");
      const context = await db.memory.assembleContext(ctx, WINDOW);
      const own = context.blocks.find((b) => b.name === "session_memory");
      expect(own?.text).toContain(`<session_memory session="${session.sessionId}" generation="0">`);
      // The turn's boundary (the session's records before it) is served with the snapshot, not in the block's tag.
      expect(context.snapshot.ownBoundary).toBe(2);
      // The long user message is summarized (a cut line): the session block keeps its line.
      expect(own?.text).toMatch(/\n0\+1\|user: Please document the retry policy: .* \.\.\.\n/);
      // The current request is not part of the own history: it appears once, as live dialogue, from the host.
      expect(own?.text).not.toContain("what did we decide?");
      const previous = context.blocks.find((b) => b.name === "previous_exchange");
      expect(previous?.text).toContain("A detailed rendering of the last exchange");
      expect(previous?.text).toContain("assistant: Documented in docs/retries.md.");
      // No shared block at this snapshot (nothing was published when t2 was admitted): the session block holds the
      // whole history and leads the cache-stable memory, so it keeps even the lines the previous exchange repeats
      // (docs/caching.md "Without a shared block"; the next test drops them next to a shared block).
      expect(context.blocks.map((b) => b.name)).toEqual(["session_memory", "previous_exchange"]);
      expect(own?.text).toContain("1+1|assistant: Documented in docs/retries.md.");
      const without = await db.memory.assembleContext(ctx, { ...WINDOW, previousExchange: false });
      expect(without.blocks.find((b) => b.name === "session_memory")?.text).toContain(
        "1+1|assistant: Documented in docs/retries.md.",
      );
      expect(without.blocks.map((b) => b.name)).toEqual(["session_memory"]);
      expect(context.tokens.used).toBe(context.blocks.reduce((sum, b) => sum + estimateTokens(b.text), 0));
      expect(context.tokens.used).toBeLessThanOrEqual(context.tokens.available);
      expect(context.tokens.available).toBe(100_000 - 3000 - 1000 - 4000 - 1000);
      // Every step of the turn sees the same memory.
      expect((await db.memory.assembleContext(ctx, WINDOW)).blocks).toEqual(context.blocks);
      // Prepared before the budget was known (the plugin does at admission), then fitted: the very same memory.
      const prepared = await db.memory.prepareContext(ctx, {});
      expect(await db.memory.assembleContext(ctx, WINDOW, { prepared })).toEqual(context);
    } finally {
      await worker.stop();
    }
  });

  it("next to a shared block, leaves out of the session block the lines the previous exchange repeats word for word", async () => {
    const other = await db.memory.openSession({ host: "test", hostSessionId: "ctx-shared", projectId: "prj_shared" });
    const say = (turnId: string, kind: "user" | "assistant", text: string) => writeMessage(other, turnId, kind, text);
    const worker = await startWorker(db.memory, db.config, () => {});
    try {
      await db.memory.admitTurn({ sessionId: other.sessionId, turnId: "s1", publishes: true });
      await say("s1", "user", "Which port does the gateway use?");
      await say("s1", "assistant", "Port 8443.");
      await db.memory.finishTurn({ sessionId: other.sessionId, turnId: "s1" }, "completed");
      // This session's own publication (the file's earlier tests publish in another scope).
      await retrying(
        async () => {
          const { rows } = await db.memory.pool.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM optchat.publications WHERE session_id = $1::text",
            [other.sessionId],
          );
          if (rows[0]?.n !== 1) throw new Error(`${rows[0]?.n} publications of s1`);
        },
        30_000,
        "s1 published",
      );
      // A turn that is never published (publishes: false): its lines stay in the session block.
      await db.memory.admitTurn({ sessionId: other.sessionId, turnId: "s2", publishes: false });
      await say("s2", "user", "And the timeout?");
      await say("s2", "assistant", "Thirty seconds.");
      await db.memory.finishTurn({ sessionId: other.sessionId, turnId: "s2" }, "completed");
      await db.memory.settle(other.sessionId, { timeoutMs: 20_000 });
      const ctx = { sessionId: other.sessionId, turnId: "s3" };
      await db.memory.admitTurn({ ...ctx, publishes: true });
      const context = await db.memory.assembleContext(ctx, WINDOW);
      expect(context.blocks.map((b) => b.name)).toEqual(["shared_memory", "session_memory", "previous_exchange"]);
      expect(context.blocks[0]?.text).toContain("Port 8443.");
      // Each of s2's messages is a free line, word for word: sent once, in the previous exchange (docs/caching.md).
      const own = context.blocks[1]?.text ?? "";
      expect(own).not.toContain("Thirty seconds.");
      expect(own).not.toContain("And the timeout?");
      expect(context.blocks[2]?.text).toContain("assistant: Thirty seconds.");
      const without = await db.memory.assembleContext(ctx, { ...WINDOW, previousExchange: false });
      expect(without.blocks.find((b) => b.name === "session_memory")?.text).toContain("3+1|assistant: Thirty seconds.");
    } finally {
      await worker.stop();
    }
  });

  it("fits a small window by projecting the view, and refuses a tiny one explicitly", async () => {
    // An isolated session: no shared block, so the whole budget is the session's own (the split is tested elsewhere).
    session = await db.memory.openSession({
      host: "test",
      hostSessionId: "ctx-solo",
      projectId: "prj_ctx",
      sharing: "isolated",
    });
    const worker = await startWorker(db.memory, db.config, () => {});
    try {
      for (let t = 3; t < 12; t++) {
        await db.memory.admitTurn({ sessionId: session.sessionId, turnId: `t${t}` });
        await ingest(`t${t}`, "user", `Step ${t}: ${"configure the importer and its queue carefully ".repeat(4)}`);
        await ingest(`t${t}`, "assistant", `Done with step ${t}: ${"changed files and ran the tests ".repeat(4)}`);
        await db.memory.finishTurn({ sessionId: session.sessionId, turnId: `t${t}` }, "completed");
      }
      await db.memory.settle(session.sessionId, { timeoutMs: 30_000 });
      await db.memory.admitTurn({ sessionId: session.sessionId, turnId: "t12" });
      const ctx = { sessionId: session.sessionId, turnId: "t12" };
      const roomy = await db.memory.assembleContext(ctx, { ...WINDOW, previousExchange: false });
      const ownTokens = roomy.tokens.own;
      const small = { ...WINDOW, windowTokens: 9000 + Math.floor(ownTokens * 0.7), previousExchange: false };
      const fitted = await db.memory.assembleContext(ctx, small);
      // One preparation serves any budget, the projected one included, exactly as a fresh assembly does; one made
      // with another previous-exchange setting is not used for this one.
      const prepared = await db.memory.prepareContext(ctx, { previousExchange: false });
      expect(await db.memory.assembleContext(ctx, small, { prepared })).toEqual(fitted);
      expect(await db.memory.assembleContext(ctx, { ...WINDOW, previousExchange: false }, { prepared })).toEqual(roomy);
      // An earlier step's complete assembly is handed back as it is while it fits, and assembled afresh once it does
      // not (the later steps of a turn have a shrinking budget).
      expect(roomy.historyComplete).toBe(true);
      const reused = await db.memory.assembleContext(ctx, { ...WINDOW, previousExchange: false }, { previous: roomy });
      expect(reused).toEqual({ ...roomy, reused: true });
      expect(await db.memory.assembleContext(ctx, small, { previous: roomy })).toEqual(fitted);
      const other = await db.memory.prepareContext(ctx, { previousExchange: true });
      expect(await db.memory.assembleContext(ctx, small, { prepared: other })).toEqual(fitted);
      expect(fitted.tokens.used).toBeLessThanOrEqual(fitted.tokens.available);
      expect(fitted.tokens.own).toBeLessThan(ownTokens);
      const ownBlock = fitted.blocks.find((b) => b.name === "session_memory")?.text ?? "";
      const lines = ownBlock.split("\n").filter((line) => /^\d+\+\d+\|/.test(line));
      expect(lines.length).toBeGreaterThan(0);
      const tiny = db.memory.assembleContext(ctx, { ...WINDOW, windowTokens: 9050, previousExchange: false });
      await expect(tiny).rejects.toMatchObject({ code: "BUDGET_EXCEEDED" });
      await expect(tiny).rejects.toThrow(/larger context window/);
    } finally {
      await worker.stop();
    }
  });
});

describe("token estimates", () => {
  it("are not bytes: CJK text costs more tokens per byte than ASCII, and both are over-estimated", () => {
    const ascii = "the importer uses the durable queue ".repeat(20);
    const cjk = "部署脚本用而不是数据库迁移".repeat(20);
    expect(estimateTokens(ascii)).toBeGreaterThanOrEqual(Math.ceil(ascii.length / 4));
    expect(estimateTokens(cjk)).toBeGreaterThanOrEqual([...cjk].length);
    expect(estimateTokens(cjk) / Buffer.byteLength(cjk)).toBeGreaterThan(
      estimateTokens(ascii) / Buffer.byteLength(ascii),
    );
  });
});
