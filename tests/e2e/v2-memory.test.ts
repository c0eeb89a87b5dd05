import { readdirSync, readFileSync, rmSync } from "node:fs";
import pg from "pg";
import { beforeAll, describe, expect, it } from "vitest";
import type { ModelServer } from "../../scripts/model-server.js";
import {
  cleanupOpencode2Env,
  createOpencode2Env,
  OPTCHAT_V2_PLUGIN_DIR,
  type Opencode2Env,
  runOpencode2,
} from "../../scripts/opencode2-harness.js";
import { embeddedUrl } from "../../src/embedded/paths.js";
import { stopEmbeddedServer } from "../../src/embedded/server.js";
import { resolveConfig } from "../../src/memory/config.js";
import { retrying } from "../helpers.js";
import { useV2World } from "./v2-world.js";

/**
 * The V2 host (plugin/v2) with real `@opencode/cli` 2.1.2 processes (`opencode run --standalone`), the scripted model
 * and a fresh database: two "terminals" (one V2 database, one project). Assertions are on what the model received and
 * on what optchat stored.
 */

const DECISION = "We need a persistent queue for the importer. Decision: no Redis; use Postgres LISTEN/NOTIFY";
const world = useV2World({ installs: 2 });
let db: pg.Pool;
let model: ModelServer;
let envA: Opencode2Env;
let envB: Opencode2Env;
beforeAll(() => {
  ({ db, model } = world);
  [envA, envB] = world.envs as [Opencode2Env, Opencode2Env];
});

const mainRequests = () => model.requests().filter((request) => request.kind === "main");

describe("optchat on OpenCode V2 (real @opencode/cli 2.1.2 processes)", () => {
  it("A's turn is stored whole; B's first request holds A's decision, injected through `context`", async () => {
    const a = await runOpencode2(envA, `${DECISION}\nREPLY=Noted: Postgres LISTEN/NOTIFY, no Redis.`);
    expect(a.code, a.stderr).toBe(0);
    const stored = await retrying(
      async () => {
        const rows = await db.query(
          `SELECT t.state, count(r.*)::int AS records FROM optchat.turns t
             JOIN optchat.sessions s ON s.session_id = t.session_id
             LEFT JOIN optchat.records r ON r.session_id = t.session_id AND r.turn_id = t.turn_id
            WHERE s.host = 'opencode-v2' AND s.host_session_id = $1::text GROUP BY t.state`,
          [a.sessionId],
        );
        if (rows.rows[0]?.state !== "completed") throw new Error(`A's turn: ${JSON.stringify(rows.rows)}`);
        return rows.rows[0];
      },
      30_000,
      "A's turn completed",
    );
    expect(stored.records).toBe(2);

    model.clear();
    const b = await runOpencode2(envB, "What did we decide about the importer's queue?");
    expect(b.code, b.stderr).toBe(0);
    const first = mainRequests()[0];
    expect(first).toBeDefined();
    const messages = JSON.stringify(first?.body.messages);
    expect(messages).toContain("optchat memory.");
    expect(messages).toContain("no Redis; use Postgres LISTEN/NOTIFY");
  }, 180_000);

  it("B zooms from the injected line down to A's exact words with memory_zoom", async () => {
    model.clear();
    const b = await runOpencode2(envB, "Where was the queue decided?");
    expect(b.code, b.stderr).toBe(0);
    const memory = JSON.stringify(mainRequests()[0]?.body.messages);
    expect(JSON.stringify(mainRequests()[0]?.body.tools ?? [])).toContain("memory_zoom");
    let ref = /([\w:+-]+)\|user: We need a persistent queue/.exec(
      JSON.parse(memory)
        .map((m: { content: unknown }) => JSON.stringify(m.content))
        .join("\n")
        .replaceAll("\\n", "\n"),
    )?.[1];
    expect(ref, memory.slice(0, 2000)).toBeDefined();
    const seen: string[] = [];
    for (let zoom = 0; zoom < 3 && ref; zoom++) {
      model.clear();
      const call = [{ name: "memory_zoom", args: { ref } }];
      const run = await runOpencode2(envB, `zoom TOOLS=${JSON.stringify(call)} END`, { session: b.sessionId });
      expect(run.code, run.stderr).toBe(0);
      // What the model received as the tool's result (the request after the call).
      const result = JSON.stringify(mainRequests().at(-1)?.body.messages.at(-1)?.content ?? "")
        .replaceAll("\\n", "\n")
        .replaceAll('\\"', '"');
      seen.push(`${ref} -> ${result.slice(0, 300)}`);
      if (result.includes(`<original_message`) && result.includes("no Redis; use Postgres LISTEN/NOTIFY")) return;
      const visited = new Set(seen.map((line) => line.split(" -> ")[0]));
      ref = [...result.matchAll(/(mem_\w+:\d+:\d+(?:\+\d+)?)/g)].map((m) => m[1]).find((r) => r && !visited.has(r));
    }
    throw new Error(`A's exact words not reached in 3 zooms:\n${seen.join("\n")}`);
  }, 240_000);

  it("a tool loop is ingested completely: every call and result, then the reply", async () => {
    model.clear();
    const calls = [1, 2, 3].map((n) => ({ name: "shell", args: { command: `echo loop-step-${n}` } }));
    const run = await runOpencode2(envA, `loop TOOLS=${JSON.stringify(calls)} END`);
    expect(run.code, run.stderr).toBe(0);
    const kinds = await retrying(
      async () => {
        const rows = await db.query(
          `SELECT r.kind, t.state FROM optchat.records r
             JOIN optchat.sessions s ON s.session_id = r.session_id
             JOIN optchat.turns t ON t.session_id = r.session_id AND t.turn_id = r.turn_id
            WHERE s.host_session_id = $1::text ORDER BY r.seq`,
          [run.sessionId],
        );
        if (rows.rows.at(-1)?.state !== "completed") throw new Error("turn not completed yet");
        return rows.rows.map((row) => row.kind);
      },
      30_000,
      "the tool loop's records",
    );
    expect(kinds).toEqual([
      "user",
      "tool_call",
      "tool_result",
      "tool_call",
      "tool_result",
      "tool_call",
      "tool_result",
      "assistant",
    ]);
  }, 180_000);
});

describe("the V2 host on the embedded PostgreSQL (no DATABASE_URL)", () => {
  it("the first V2 process starts the embedded server; A's turn lands there and B's first request holds it", async () => {
    // Short: the server's Unix socket lives under it.
    const dataDir = `/tmp/optchat-v2e-${process.pid}`;
    const embedded = resolveConfig({ env: { OPTCHAT_DATA_DIR: dataDir } }).embedded;
    if (!embedded) throw new Error("no embedded server configured");
    const extraEnv = {
      DATABASE_URL: "",
      OPTCHAT_LEGACY_DATABASE_URL: "",
      OPTCHAT_DATA_DIR: dataDir,
      OPTCHAT_READINESS_WAIT_MS: "30000",
    };
    const a = await createOpencode2Env({ modelUrl: model.url, plugins: [OPTCHAT_V2_PLUGIN_DIR], extraEnv });
    const b = await createOpencode2Env({
      modelUrl: model.url,
      plugins: [OPTCHAT_V2_PLUGIN_DIR],
      extraEnv,
      shareDataWith: a,
    });
    try {
      const first = await runOpencode2(a, "Embedded note: the importer retries three times.\nREPLY=Noted.", {
        timeoutMs: 180_000,
      });
      expect(first.code, first.stderr).toBe(0);
      const client = new pg.Client({ connectionString: embeddedUrl(embedded.socketDir) });
      await client.connect();
      try {
        await retrying(
          async () => {
            const rows = await client.query(
              `SELECT t.state FROM optchat.turns t JOIN optchat.sessions s ON s.session_id = t.session_id
                WHERE s.host = 'opencode-v2' AND s.host_session_id = $1::text`,
              [first.sessionId],
            );
            if (rows.rows[0]?.state !== "completed") throw new Error(`A's turn: ${JSON.stringify(rows.rows)}`);
          },
          30_000,
          "A's turn completed in the embedded server",
        );
      } finally {
        await client.end();
      }
      model.clear();
      const second = await runOpencode2(b, "How often does the importer retry?");
      expect(second.code, second.stderr).toBe(0);
      expect(JSON.stringify(mainRequests()[0]?.body.messages)).toContain("the importer retries three times");
    } finally {
      for (const env of [b, a]) await cleanupOpencode2Env(env);
      try {
        await stopEmbeddedServer(embedded);
        // The postmaster is gone once stopEmbeddedServer returns; its idle supervisor follows it within moments.
        await retrying(
          async () => {
            const left = postgresOf(dataDir);
            if (left.length > 0) throw new Error(`still running: ${left.join(", ")}`);
          },
          15_000,
          "the embedded server's processes ended",
        );
      } finally {
        rmSync(dataDir, { recursive: true, force: true });
      }
    }
  }, 300_000);
});

/** Pids of the embedded server's processes (postmaster and backends) of `dataDir`. */
function postgresOf(dataDir: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").join(" ").includes(dataDir))
        found.push(Number(entry));
    } catch {}
  }
  return found;
}
