import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type OpencodeEnv, type OpencodeServer, runOpencode } from "../../scripts/opencode-harness.js";
import { type PluginWorld, refuseConnections, retrying, startPluginWorld, startWorkerProcess } from "../helpers.js";
import { requestsFor } from "./requests.js";

/**
 * Issue 9 item 1 with real OpenCode 1.18.33 processes: a reply that finished just before OpenCode closed must be
 * stored once and its turn published as completed, whether the closing process flushed it or the next process found it
 * in OpenCode's own transcript.
 */

const WAIT = 90_000;

let world: PluginWorld;
let db: pg.Pool;
let env: OpencodeEnv;

beforeAll(async () => {
  world = await startPluginWorld();
  ({ db } = world);
  env = await world.env();
}, 120_000);

afterAll(async () => {
  await world?.close();
});

async function recordsOf(hostSessionId: string): Promise<{ kind: string; message: string; content: string }[]> {
  const result = await db.query<{ kind: string; message: string; content: string }>(
    `SELECT r.kind, r.attributes->>'hostMessageId' AS message, convert_from(b.content, 'UTF8') AS content
       FROM optchat.records r JOIN optchat.sessions s ON s.session_id = r.session_id
       JOIN optchat.blobs b ON b.hash = r.payload_hash
      WHERE s.host_session_id = $1::text ORDER BY r.seq`,
    [hostSessionId],
  );
  return result.rows;
}

async function turnsOf(hostSessionId: string): Promise<{ turn_id: string; state: string; outcome: string | null }[]> {
  const result = await db.query<{ turn_id: string; state: string; outcome: string | null }>(
    `SELECT t.turn_id, t.state, p.outcome FROM optchat.turns t
       JOIN optchat.sessions s ON s.session_id = t.session_id
       LEFT JOIN optchat.publications p ON p.session_id = t.session_id AND p.turn_id = t.turn_id
      WHERE s.host_session_id = $1::text ORDER BY t.admitted_at`,
    [hostSessionId],
  );
  return result.rows;
}

/** Resolves as soon as the server has sent a finished assistant message (event `seen` on), not after its idle waits. */
async function finishedAnswer(server: OpencodeServer, seen: number): Promise<void> {
  await retrying(
    async () => {
      const done = server
        .events()
        .slice(seen)
        .some((event) => {
          const info = event.properties.info as { role?: string; time?: { completed?: number } } | undefined;
          return event.type === "message.updated" && info?.role === "assistant" && info.time?.completed;
        });
      if (!done) throw new Error("no finished assistant message yet");
    },
    WAIT,
    "the finished answer",
  );
}

// Real OpenCode processes on 2 cores under a parallel suite: a test takes 5-30 s, minutes under heavy load.
describe("closing OpenCode right after a reply", { timeout: 400_000 }, () => {
  it("stores a reply finished just before dispose + SIGTERM once, and publishes its turn as completed", async () => {
    const first = await world.server(env);
    const session = await first.createSession("close");
    const seen = first.events().length;
    await first.prompt(session, "CLOSE-1 we decided to use sqlite for the cache REPLY=decision noted: sqlite cache");
    // Closed as soon as OpenCode has the finished answer (the issue's ~250 ms), not after the harness's idle waits.
    await finishedAnswer(first, seen);
    await first.stop();

    const second = await world.server(env);
    await second.prompt(session, "CLOSE-2 what did we decide? REPLY=sqlite");
    await second.waitIdle(session, WAIT);
    await retrying(
      async () => {
        const turns = (await turnsOf(session)).map((t) => [t.state, t.outcome]);
        expect(turns, JSON.stringify(turns)).toEqual([
          ["completed", "completed"],
          ["completed", "completed"],
        ]);
      },
      WAIT,
      "both turns published as completed",
    );
    const records = await recordsOf(session);
    const answers = records.filter((r) => r.kind === "assistant" && r.content.includes("decision noted: sqlite cache"));
    expect(answers).toHaveLength(1);
    expect(records.map((r) => r.kind)).toEqual(["user", "assistant", "user", "assistant"]);
  });

  it("finds a reply the closing process never stored in OpenCode's transcript, at the next prompt", async () => {
    // The plugin cannot reach its database while the answer finishes, and the process is SIGKILLed before it is back:
    // only OpenCode's own transcript holds the reply; the next process (an `opencode run --session`) repairs the turn
    // from there (seed 000 §3: the host transcript is the source).
    const first = await world.server(env);
    const session = await first.createSession("killed");
    const seen = first.events().length;
    await first.prompt(session, "KILL-1 the deploy target is fly.io SLOW=2 REPLY=noted: fly.io deploy");
    await retrying(
      async () => {
        if (requestsFor(world.model.requests(), "KILL-1").length === 0) throw new Error("not sent yet");
      },
      WAIT,
      "the request",
    );
    const allow = await refuseConnections(world.database.name);
    await finishedAnswer(first, seen);
    await first.kill("SIGKILL");
    await allow();
    expect((await recordsOf(session)).map((r) => r.kind)).toEqual(["user"]);

    const next = await runOpencode(env, "KILL-2 where do we deploy? REPLY=fly", { session, timeoutMs: WAIT });
    expect(next.code, next.stderr.slice(-2000)).toBe(0);
    // The run's own turn is completed; its publication may wait for a worker: an `opencode run` that ends before its
    // embedded worker is needed never starts one (plugin/host/embedded-worker.ts), and its jobs stay in the queue.
    const worker = await startWorkerProcess(world.database.url);
    try {
      await retrying(
        async () => {
          const turns = (await turnsOf(session)).map((t) => [t.state, t.outcome]);
          const problems = await db.query("SELECT operation, message FROM optchat.adapter_problems");
          expect(
            turns,
            `${JSON.stringify(turns)} ${JSON.stringify(problems.rows)} ${next.stderr.slice(-1500)}`,
          ).toEqual([
            ["completed", "completed"],
            ["completed", "completed"],
          ]);
        },
        WAIT,
        "both turns published as completed",
      );
    } finally {
      worker.child.kill("SIGTERM");
      await worker.exited;
    }
    const records = await recordsOf(session);
    expect(records.filter((r) => r.kind === "assistant" && r.content.includes("noted: fly.io deploy"))).toHaveLength(1);
    expect(records.map((r) => r.kind)).toEqual(["user", "assistant", "user", "assistant"]);
  });
});
