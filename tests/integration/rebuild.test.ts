import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFakeSummarizer } from "../../src/compactor/providers/fake.js";
import type { Summarizer } from "../../src/compactor/summarizer.js";
import { FALLBACK_LABEL } from "../../src/core/fallback.js";
import { PROMPT_VERSION } from "../../src/core/summary.js";
import type { Config } from "../../src/memory/config.js";
import { rebuild, rebuildDepsOf } from "../../src/memory/rebuild.js";
import { type RunningCompactor, startWorker } from "../../src/memory/worker.js";
import { countFallbackNodes } from "../../src/store/compactor-calls.js";
import type { Session } from "../../src/store/sessions.js";
import type { Turn } from "../../src/store/turns.js";
import {
  eventually,
  LARGE_WINDOW,
  messageWriter,
  runCli,
  turnWriter,
  useTestMemory,
  waitForIdleQueues,
} from "../helpers.js";

// Issue 15 item 1: a node is rebuilt as a new revision (another model or prompt version, or a labelled fallback);
// views and publications move to the new revisions; a snapshot pinned before keeps resolving exactly what it pinned;
// a new request sees the new ones; --session, --scope and --prompt-version select what is rebuilt; the audit stays
// clean.

// Every merge built as soon as its lines exist (not only when a view wants it): the turns below are published over
// parents, and the rebuild is followed up whole trees.
const db = useTestMemory({ compactorMerges: "all" });
const WINDOW = LARGE_WINDOW;
let a: Session;
let b: Session;

/** A different compactor model: the fake's answers in capitals (same sizes), under its own identity. */
function betterModel(delayMs = 0): Summarizer {
  const fake = createFakeSummarizer(delayMs > 0 ? { delayMs } : {});
  return {
    ...fake,
    identity: "better-model/2",
    model: "better-model/2",
    async complete(prompt, options) {
      const answer = await fake.complete(prompt, options);
      return { ...answer, text: answer.text.toUpperCase() };
    },
  };
}

async function count(sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await db.memory.pool.query(sql, params);
  return Number(rows[0]?.n ?? 0);
}

/** The lines a shared zoom opens into, as text. */
async function zoomLines(turn: Turn | { sessionId: string; turnId: string }, ref: string): Promise<string> {
  const answer = await db.memory.zoom(turn, ref);
  if (answer.kind !== "lines") throw new Error(`${ref} opened into ${answer.kind}, not lines`);
  return JSON.stringify(answer.lines);
}

/** The cover texts a publication opens into, as text. */
async function zoomCover(turn: Turn | { sessionId: string; turnId: string }, ref: string): Promise<string> {
  const answer = await db.memory.zoom(turn, ref);
  if (answer.kind !== "publication") throw new Error(`${ref} opened into ${answer.kind}, not a publication`);
  return JSON.stringify(answer.cover);
}

const currentFallbacks = (sessionId?: string) =>
  count(
    `SELECT count(*) AS n FROM optchat.nodes n JOIN optchat.trees t ON t.tree_id = n.tree_id
      WHERE n.summarizer = 'fallback' AND NOT n.superseded AND ($1::text IS NULL OR t.session_id = $1::text)`,
    [sessionId ?? null],
  );

/** Current (newest) revisions of a session's nodes by summarizer. */
async function summarizersOf(sessionId: string): Promise<Record<string, number>> {
  const { rows } = await db.memory.pool.query(
    `SELECT n.summarizer, count(*)::int AS n FROM optchat.nodes n JOIN optchat.trees t ON t.tree_id = n.tree_id
      WHERE t.session_id = $1 AND NOT n.superseded GROUP BY 1`,
    [sessionId],
  );
  return Object.fromEntries(rows.map((r) => [r.summarizer, r.n]));
}

const writeTurn = turnWriter(db, Date.UTC(2026, 10, 22, 9));

async function turn(session: Session, turnId: string, words: string): Promise<void> {
  const before = await count("SELECT count(*) AS n FROM optchat.publications");
  // Over 512 bytes: no message is its own free line, so each needs the model (or a fallback).
  const long = "the importer moves to the durable broker queue; ".repeat(12);
  await writeTurn(session, turnId, [`please ${words} ${long}`, `done: ${words} ${long}`]);
  await eventually(
    async () => ((await count("SELECT count(*) AS n FROM optchat.publications")) > before ? true : undefined),
    30_000,
    `publication of ${turnId}`,
  );
}

/**
 * A turn finished only once the parent of its two records (0+2) is built, so its publication's cover is that one node
 * (the coarsest built cover, compactor/publish.ts): a summary of the session's own tree another session may open.
 */
async function turnOverOneNode(session: Session, turnId: string, words: string): Promise<void> {
  const write = messageWriter(db, Date.UTC(2026, 10, 22, 8));
  const long = "the importer moves to the durable broker queue; ".repeat(12);
  await db.memory.admitTurn({ sessionId: session.sessionId, turnId, publishes: true });
  // Message ids of their own: the other turns' writer numbers its messages m1, m2, … in every session.
  await write(session, turnId, "user", `please ${words} ${long}`, { messageId: `${turnId}-user` });
  // The first message summarized alone (the budget's one call), so its neighbour is a fallback, not in the same run.
  await db.memory.settle(session.sessionId, { timeoutMs: 30_000 });
  await write(session, turnId, "assistant", `done: ${words} ${long}`, { messageId: `${turnId}-assistant` });
  const parentBuilt = `SELECT count(*) AS n FROM optchat.nodes n JOIN optchat.trees t ON t.tree_id = n.tree_id
                        WHERE t.session_id = $1 AND n.level = 1 AND n.idx = 0`;
  await eventually(
    async () => ((await count(parentBuilt, [session.sessionId])) > 0 ? true : undefined),
    30_000,
    `node 0+2 of ${turnId}`,
  );
  await db.memory.finishTurn({ sessionId: session.sessionId, turnId }, "completed");
  await eventually(
    async () =>
      (await count("SELECT count(*) AS n FROM optchat.publications WHERE turn_id = $1", [turnId])) > 0
        ? true
        : undefined,
    30_000,
    `publication of ${turnId}`,
  );
}

async function contextText(turn: Pick<Turn, "sessionId" | "turnId">): Promise<{ shared: string; own: string }> {
  const context = await db.memory.assembleContext(turn, WINDOW);
  const block = (name: string) => context.blocks.find((x) => x.name === name)?.text ?? "";
  return { shared: block("shared_memory"), own: block("session_memory") };
}

let pinned: Turn;
let pinnedBefore: { shared: string; own: string };
/** What the pinned turn's zoom of a shared summary showed before any rebuild. */
let pinnedZoomBefore: string;
/** And of its own session's summary (read by the turn's ids: the own view is pinned at the first assembly). */
let pinnedOwnZoomBefore: string;
/** And of a publication of B, into its source cover. */
let pinnedCoverBefore: string;
/** And of A's own session tree, which B sees through A's publication (no view of it is pinned). */
let pinnedForeignZoomBefore: string;
/** The summaries a search from the pinned turn found (refs and excerpts). */
let pinnedSearchBefore: string;
/** A turn of A admitted before the rebuilds that never assembled its context (so pinned no own view). */
let early: Turn;
let earlyOwnZoomBefore: string;

/** What a search shows: refs and excerpts of summary hits. */
async function summaryHits(turn: Turn, query: string): Promise<string> {
  const answer = await db.memory.search(turn, { query });
  return JSON.stringify(answer.hits.filter((h) => h.source !== "message").map((h) => [h.ref, h.excerpt]));
}

beforeAll(async () => {
  // A budget of one token: the first model call spends it, every node after it is a labelled fallback.
  const capped: Config = Object.freeze({ ...db.config, budgetDailyTokens: 1, budgetDailyUsd: 0 });
  let worker: RunningCompactor | undefined = await startWorker(db.memory, capped, () => {});
  try {
    a = await db.memory.openSession({ host: "test", hostSessionId: "A", projectId: "prj_rebuild" });
    b = await db.memory.openSession({ host: "test", hostSessionId: "B", projectId: "prj_rebuild" });
    for (let k = 0; k < 3; k++) {
      if (k === 0) await turnOverOneNode(a, "a0", "alpha 0 wombat");
      else await turn(a, `a${k}`, `alpha ${k} wombat`);
      await turn(b, `b${k}`, `beta ${k} parser`);
    }
    await waitForIdleQueues(db.memory.pool);
    await worker.stop();
    worker = undefined;
  } finally {
    await worker?.stop();
  }
  pinned = await db.memory.admitTurn({ sessionId: b.sessionId, turnId: "b-pinned", publishes: true });
  pinnedBefore = await contextText(pinned);
  pinnedZoomBefore = await zoomLines(pinned, "pub:0+2");
  pinnedOwnZoomBefore = await zoomLines({ sessionId: b.sessionId, turnId: "b-pinned" }, "0+2");
  pinnedCoverBefore = await zoomCover(pinned, "pub:1+1");
  pinnedForeignZoomBefore = await zoomLines(pinned, `${a.sessionId}:0:0+2`);
  // "summarized" occurs only in fallback lines ("[not summarized by a model — zoom to read]"), never in a record.
  pinnedSearchBefore = await summaryHits(pinned, "summarized");
  early = await db.memory.admitTurn({ sessionId: a.sessionId, turnId: "a-early", publishes: true });
  earlyOwnZoomBefore = await zoomLines(early, "0+2");
}, 120_000);

afterAll(async () => {
  await db.memory.pool.query("SELECT 1");
});

describe("optchat rebuild", () => {
  it("starts from labelled fallbacks in both sessions and the shared tree", async () => {
    expect(await currentFallbacks(a.sessionId)).toBeGreaterThan(0);
    expect(await currentFallbacks(b.sessionId)).toBeGreaterThan(0);
    expect(await countFallbackNodes(db.memory.pool, new Date(0))).toBe(await currentFallbacks());
    expect(pinnedBefore.shared).toContain(FALLBACK_LABEL);
    expect((await db.memory.audit()).violations).toEqual([]);
  });

  it("--session replaces only that session's fallbacks, and the shared leaves derived from them", async () => {
    const fallbacksOfB = await currentFallbacks(b.sessionId);
    const report = await rebuild(rebuildDepsOf(db.memory.pool, db.config, createFakeSummarizer()), {
      sessionId: a.sessionId,
    });
    expect(report.fallbacksReplaced).toBeGreaterThan(0);
    expect(report.trees.map((t) => t.kind).sort()).toEqual(["session", "shared"]);
    expect(await currentFallbacks(a.sessionId)).toBe(0);
    expect(await currentFallbacks(b.sessionId)).toBe(fallbacksOfB);
    // B's publications' shared leaves were not derived from A: they still show B's fallback lines.
    expect(
      await count(
        `SELECT count(*) AS n FROM optchat.publications p JOIN optchat.trees t ON t.kind = 'shared' AND t.scope_id = p.scope_id
           JOIN optchat.nodes n ON n.tree_id = t.tree_id AND n.level = 0 AND n.idx = p.publication_seq AND NOT n.superseded
          WHERE p.session_id = $1 AND strpos(n.text, $2) > 0`,
        [b.sessionId, FALLBACK_LABEL],
      ),
    ).toBe(3);
    // A's publications' shared leaves now hash A's new cover texts (the audit's derivation check), and the old
    // revisions stay for the views that pinned them.
    expect((await db.memory.audit()).violations).toEqual([]);
    expect(await count("SELECT count(*) AS n FROM optchat.nodes WHERE superseded")).toBeGreaterThan(0);
  });

  it("--scope replaces every fallback; a pinned snapshot still reads exactly what it pinned", async () => {
    const report = await rebuild(rebuildDepsOf(db.memory.pool, db.config, createFakeSummarizer()), {
      scopeId: a.scopeId,
    });
    expect(report.revisions).toBeGreaterThan(0);
    expect(await currentFallbacks()).toBe(0);
    // What optchat status, optchat cost and memory_inspect count: no fallback is left to report.
    expect(await countFallbackNodes(db.memory.pool, new Date(0))).toBe(0);
    expect((await db.memory.audit()).violations).toEqual([]);
    // The turn pinned before both rebuilds: its shared view revision and its own view revision resolve to the
    // revisions of their events, fallbacks included.
    expect(await contextText(pinned)).toEqual(pinnedBefore);
    // Its zoom of a shared summary opens into the revisions its pinned view resolves to.
    expect(pinnedZoomBefore).toContain(FALLBACK_LABEL);
    expect(await zoomLines(pinned, "pub:0+2")).toBe(pinnedZoomBefore);
    expect(pinnedOwnZoomBefore).toContain(FALLBACK_LABEL);
    expect(await zoomLines({ sessionId: b.sessionId, turnId: "b-pinned" }, "0+2")).toBe(pinnedOwnZoomBefore);
    // A publication opens into the cover its pinned leaf revision was made from (by its input hashes).
    expect(pinnedCoverBefore).toContain(FALLBACK_LABEL);
    expect(await zoomCover(pinned, "pub:1+1")).toBe(pinnedCoverBefore);
    // Reads no pinned view covers resolve to the snapshot's revision epoch (migration 014): a zoom into another
    // session's tree, into the own tree of a turn that never assembled, and search over summaries.
    expect(pinnedForeignZoomBefore).toContain(FALLBACK_LABEL);
    expect(await zoomLines(pinned, `${a.sessionId}:0:0+2`)).toBe(pinnedForeignZoomBefore);
    expect(earlyOwnZoomBefore).toContain(FALLBACK_LABEL);
    expect(await zoomLines(early, "0+2")).toBe(earlyOwnZoomBefore);
    expect(pinnedSearchBefore).toContain(FALLBACK_LABEL);
    expect(await summaryHits(pinned, "summarized")).toBe(pinnedSearchBefore);
    await db.memory.finishTurn(early, "completed");
  });

  it("a new request sees the new revisions", async () => {
    await db.memory.finishTurn({ sessionId: b.sessionId, turnId: "b-pinned" }, "completed");
    const fresh = await db.memory.admitTurn({ sessionId: b.sessionId, turnId: "b-next", publishes: false });
    const now = await contextText(fresh);
    expect(now.shared).not.toContain(FALLBACK_LABEL);
    expect(now.own).not.toContain(FALLBACK_LABEL);
    expect(now.shared).toContain("alpha");
    expect(await zoomLines(fresh, "pub:0+2")).not.toContain(FALLBACK_LABEL);
    expect(await zoomLines({ sessionId: b.sessionId, turnId: "b-next" }, "0+2")).not.toContain(FALLBACK_LABEL);
    expect(await zoomCover(fresh, "pub:1+1")).not.toContain(FALLBACK_LABEL);
    expect(await zoomLines(fresh, `${a.sessionId}:0:0+2`)).not.toContain(FALLBACK_LABEL);
    await db.memory.finishTurn({ sessionId: b.sessionId, turnId: "b-next" }, "completed");
    // Search finds each node once, as its newest revision: a superseded one is not searched by a new snapshot.
    const hits = await db.memory.search(fresh, { query: "wombat" });
    const refs = hits.hits.map((h) => h.ref);
    expect(new Set(refs).size).toBe(refs.length);
    expect(await summaryHits(fresh, "summarized")).toBe("[]");
  });

  it("rebuilding what is current changes nothing", async () => {
    const report = await rebuild(rebuildDepsOf(db.memory.pool, db.config, createFakeSummarizer()), {});
    expect(report.revisions).toBe(0);
    expect(report.trees).toEqual([]);
  });

  it("moves to another compactor model: --prompt-version selects what was written with that version", async () => {
    // A version no summary was written with is refused, not reported as "every summary is current" (issue 40).
    await expect(
      rebuild(rebuildDepsOf(db.memory.pool, db.config, betterModel()), {
        scopeId: a.scopeId,
        promptVersion: "optchat-compact-0",
      }),
    ).rejects.toMatchObject({ code: "INPUT_INVALID", message: expect.stringContaining(PROMPT_VERSION) });
    const before = await summarizersOf(a.sessionId);
    expect(before["fake-extractive/1"]).toBeGreaterThan(0);
    const moved = await rebuild(rebuildDepsOf(db.memory.pool, db.config, betterModel()), {
      scopeId: a.scopeId,
      promptVersion: PROMPT_VERSION,
    });
    expect(moved.summarizer).toBe("better-model/2");
    expect(moved.calls).toBeGreaterThan(0);
    expect((await summarizersOf(a.sessionId))["fake-extractive/1"]).toBeUndefined();
    expect((await summarizersOf(b.sessionId))["fake-extractive/1"]).toBeUndefined();
    expect((await db.memory.audit()).violations).toEqual([]);
    // Every model call of the rebuild is in the cost ledger, under the new model.
    expect(
      await count(
        "SELECT count(*) AS n FROM optchat.compactor_calls WHERE model = 'better-model/2' AND job_id IS NULL",
      ),
    ).toBe(moved.calls);
  });

  it("optchat rebuild from the command line (dry, JSON)", async () => {
    const env = { DATABASE_URL: db.url, OPTCHAT_SUMMARIZER: "fake", OPTCHAT_COMPACTOR_MERGES: "all" };
    const result = await runCli(["rebuild", "--scope", a.scopeId, "--json"], env);
    expect(result.code).toBe(0);
    const answer = JSON.parse(result.stdout);
    // Back from better-model/2 to the fake: every model-written node of the scope is rebuilt.
    expect(answer).toMatchObject({ ok: true, summarizer: "fake-extractive/1" });
    expect(answer.revisions).toBeGreaterThan(0);
    const again = await runCli(["rebuild", "--session", a.sessionId], env);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain("nothing to rebuild");
    const bad = await runCli(["rebuild", "--scope"], env);
    expect(bad.code).not.toBe(0);
    expect((await db.memory.audit()).violations).toEqual([]);
  }, 60_000);

  it("runs while the compactor builds and publishes new turns: the commit derives from what is stored then", async () => {
    const worker = await startWorker(db.memory, db.config, () => {});
    try {
      // Each rebuild call takes 20 ms: turns are ingested, summarized and published while the texts are computed, so
      // the commit finds parents and publications built meanwhile over inputs it rebuilt.
      const rebuilding = rebuild(rebuildDepsOf(db.memory.pool, db.config, betterModel(20)), { scopeId: a.scopeId });
      for (let k = 3; k < 6; k++) await turn(a, `a${k}`, `alpha ${k} wombat`);
      const report = await rebuilding;
      expect(report.revisions).toBeGreaterThan(0);
      await waitForIdleQueues(db.memory.pool);
    } finally {
      await worker.stop();
    }
    expect((await db.memory.audit()).violations).toEqual([]);
  }, 120_000);

  it("forgetting a session after rebuilds removes every revision derived from it", async () => {
    await db.memory.forget({ sessionIds: [a.sessionId] });
    expect(await count("SELECT count(*) AS n FROM optchat.nodes WHERE lower(text) LIKE '%wombat%'")).toBe(0);
    const worker = await startWorker(db.memory, db.config, () => {});
    try {
      await waitForIdleQueues(db.memory.pool);
    } finally {
      await worker.stop();
    }
    expect((await db.memory.audit()).violations).toEqual([]);
  }, 60_000);
});
