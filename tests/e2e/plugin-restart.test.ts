import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { memoryLayout } from "../../plugin/request/memory-message.js";
import type { ModelServer } from "../../scripts/model-server.js";
import { type OpencodeEnv, runOpencode } from "../../scripts/opencode-harness.js";
import { omittedText } from "../../src/memory/assembly.js";
import { resolveConfig } from "../../src/memory/config.js";
import { openMemory } from "../../src/memory/service.js";
import { type PluginWorld, retrying, startPluginWorld } from "../helpers.js";
import { memoryText, requestsFor } from "./requests.js";

/**
 * Restarts and crashes with real OpenCode processes: a server killed mid-turn, a new process continuing the session,
 * a model with a small context window. Assertions are on captured requests, on what the user sees, and on the rows.
 */

const WAIT = 90_000;

let world: PluginWorld;
let database: PluginWorld["database"];
let db: pg.Pool;
let model: ModelServer;
let env: OpencodeEnv;

beforeAll(async () => {
  world = await startPluginWorld();
  ({ database, db, model } = world);
  // Memory rendered afresh at every turn (no cache epoch, docs/caching.md): RST-2's request then carries RST-2's own
  // assembly, which the first test renders again after the restart.
  env = await world.env({ pluginOptions: { cacheEpochTurns: 1 } });
}, 120_000);

afterAll(async () => {
  await world?.close();
});

async function count(sql: string, params: unknown[] = []): Promise<number> {
  return Number((await db.query(sql, params)).rows[0]?.n ?? 0);
}

/** Waits until there are at least `atLeast` publications. */
async function published(atLeast: number, what: string): Promise<void> {
  await retrying(
    async () => {
      const n = await count("SELECT count(*)::int AS n FROM optchat.publications");
      if (n < atLeast) throw new Error(`${n} publications`);
    },
    WAIT,
    what,
  );
}

async function nodeRows(): Promise<string[]> {
  const result = await db.query<{ row: string }>(
    "SELECT tree_id || ':' || level || ':' || idx || ':' || revision || ':' || md5(text) AS row FROM optchat.nodes ORDER BY 1",
  );
  return result.rows.map((r) => r.row);
}

// Real OpenCode processes on 2 cores under a parallel suite: a test takes 2-30 s; the default 60 s is too tight.
describe("restarts with real OpenCode processes", { timeout: 180_000 }, () => {
  it("reconciles a turn killed with its process, duplicates nothing, and serves byte-identical memory afterwards", async () => {
    const first = await world.server(env);
    const session = await first.createSession("restart");
    for (const marker of ["RST-1", "RST-2"]) {
      await first.prompt(session, `${marker} remember the number ${marker.length * 7} REPLY=noted ${marker}`);
      await first.waitIdle(session, WAIT);
    }
    await published(2, "both turns published");
    const captured = memoryText(requestsFor(model.requests(), "RST-2").at(-1) as never) as string;
    const turnRows = await db.query<{ session_id: string; turn_id: string }>(
      `SELECT t.session_id, t.turn_id FROM optchat.turns t ORDER BY admitted_at`,
    );
    const rst2 = turnRows.rows[1] as { session_id: string; turn_id: string };

    await first.prompt(session, "RST-3 SLOW=30 killed mid-answer");
    await retrying(
      async () => {
        if (requestsFor(model.requests(), "RST-3").length < 1) throw new Error("not sent yet");
      },
      WAIT,
      "the slow request",
    );
    await first.kill("SIGKILL");
    const recordsBefore = await count("SELECT count(*)::int AS n FROM optchat.records");
    const nodesBefore = await nodeRows();

    // A new process continues the session: the killed turn ends as interrupted, nothing is sealed twice.
    const second = await world.server(env);
    await second.prompt(session, "RST-4 after the restart REPLY=back");
    await second.waitIdle(session, WAIT);
    // The plugin records an outcome from OpenCode's events, just after the turn goes idle.
    await retrying(
      async () => {
        const states = await db.query<{ state: string }>("SELECT state FROM optchat.turns ORDER BY admitted_at");
        expect(states.rows.map((r) => r.state)).toEqual(["completed", "completed", "interrupted", "completed"]);
      },
      WAIT,
      "the four turns' outcomes",
    );
    expect(await count("SELECT count(*)::int AS n FROM optchat.sessions")).toBe(1);
    // RST-4's user message and its answer are the only new records.
    expect(await count("SELECT count(*)::int AS n FROM optchat.records")).toBe(recordsBefore + 2);
    await published(4, "all four turns published");
    expect(
      await count(
        "SELECT count(*)::int AS n FROM (SELECT turn_id FROM optchat.publications GROUP BY turn_id HAVING count(*) > 1) d",
      ),
    ).toBe(0);

    // Restart: nodes built before keep their content, and RST-2's pinned memory renders byte for byte as captured.
    const nodesAfter = new Set(await nodeRows());
    for (const row of nodesBefore) expect(nodesAfter.has(row), `node ${row} unchanged`).toBe(true);
    const injection = await db.query<{ detail: { budget: Record<string, number> } }>(
      "SELECT detail FROM optchat.injections WHERE turn_id = $1::text AND status = 'injected' ORDER BY injection_id DESC LIMIT 1",
      [rst2.turn_id],
    );
    const budget = injection.rows[0]?.detail.budget as Record<string, number>;
    const memory = await openMemory(resolveConfig({ overrides: { databaseUrl: database.url } }));
    try {
      const again = await memory.assembleContext(
        { sessionId: rst2.session_id, turnId: rst2.turn_id },
        {
          windowTokens: budget.windowTokens as number,
          instructionsTokens: budget.instructionsTokens as number,
          activeTokens: budget.activeTokens as number,
          outputTokens: budget.outputTokens as number,
          reserveTokens: budget.reserveTokens as number,
          previousExchange: true,
        },
      );
      expect(again.blocks.length).toBeGreaterThan(0);
      // The cache layout (docs/caching.md): the stable memory opens the capture byte for byte; the shared block's
      // closing tag and the other blocks follow in the volatile part.
      const { publicationHighWater, ownBoundary } = again.snapshot;
      const omitted = again.omitted.map(omittedText);
      const layout = memoryLayout(again.blocks, omitted, { replaced: 0, publicationHighWater, ownBoundary });
      expect(captured.startsWith(layout.stable.join(""))).toBe(true);
      const leading = again.blocks.find((b) => b.name === "shared_memory") ?? again.blocks[0];
      for (const b of again.blocks) if (b !== leading) expect(captured).toContain(b.text);
    } finally {
      await memory.close();
    }
  });

  it("gives a small-window model a bounded request, and a too-small one an explicit error", async () => {
    // Same project (so the same shared memory) as the first test's sessions, a smaller model.
    const small = await world.env({
      pluginOptions: { toolsTokens: 2000 },
      contextLimit: 24_000,
      outputLimit: 2_000,
      shareDataWith: env,
    });
    const bounded = await runOpencode(small, "SMALL-1 what do you remember? REPLY=ok", { timeoutMs: 90_000 });
    expect(bounded.code).toBe(0);
    const request = requestsFor(model.requests(), "SMALL-1").at(-1) as never;
    const bytes = Buffer.byteLength(JSON.stringify((request as { body: unknown }).body));
    // Conservatively 1 token per 3 bytes of JSON (the estimator the plugin uses), within the window minus the answer.
    expect(Math.ceil(bytes / 3)).toBeLessThanOrEqual(24_000 - 2_000);
    expect(memoryText(request)).toContain("<shared_memory");

    const tiny = await world.env({ contextLimit: 6_000, outputLimit: 1_000, shareDataWith: small });
    const refused = await runOpencode(tiny, "TINY-1 hello", { timeoutMs: 90_000 });
    expect(refused.code).not.toBe(0);
    expect(refused.stdout + refused.stderr).toContain("does not fit the model's context window");
    expect(requestsFor(model.requests(), "TINY-1").length).toBe(0);
  });

  it("refuses every prompt with the bad setting named when the configuration is invalid (the plugin in its thread)", async () => {
    const bad = await world.env({ extraEnv: { OPTCHAT_MODE: "bogus" }, shareDataWith: env });
    const refused = await runOpencode(bad, "BAD-1 hello REPLY=ok", { timeoutMs: 90_000 });
    expect(refused.code).not.toBe(0);
    // The thread reports the configuration error (stderr), and the prompt never reaches the model.
    expect(refused.stderr).toContain("OPTCHAT_MODE");
    expect(refused.stderr).toContain("not replace or augment");
    expect(requestsFor(model.requests(), "BAD-1").length).toBe(0);
  });
});
