import type pg from "pg";
import { beforeAll, describe, expect, it } from "vitest";
import type { ModelServer } from "../../scripts/model-server.js";
import { type Opencode2Env, runOpencode2 } from "../../scripts/opencode2-harness.js";
import { retrying } from "../helpers.js";
import { useV2World } from "./v2-world.js";

/**
 * Where a V2 session comes from (plugin/v2/lineage.ts), with real `@opencode/cli` 2.1.2 processes: a fork
 * (`opencode run --session <id> --fork`) takes its parent's history over by reference and publishes only its own
 * turn; a subagent's session (the `subagent` tool) is stored with its parent and never published; memory_inspect
 * reports V2's process and the stored session.
 */

const WAIT = 30_000;
const world = useV2World();
let db: pg.Pool;
let model: ModelServer;
let env: Opencode2Env;
beforeAll(() => {
  ({ db, model } = world);
  env = world.envs[0] as Opencode2Env;
});

/** The session's records in order: kind, and whether it was taken over from a parent. */
async function recordsOf(hostSessionId: string) {
  const rows = await db.query<{ kind: string; inherited: boolean; hash: string }>(
    `SELECT r.kind, r.attributes ? 'inheritedFrom' AS inherited, encode(r.payload_hash, 'hex') AS hash
       FROM optchat.records r JOIN optchat.sessions s ON s.session_id = r.session_id
      WHERE s.host = 'opencode-v2' AND s.host_session_id = $1::text ORDER BY r.seq`,
    [hostSessionId],
  );
  return rows.rows;
}

/** The V2 session id a run reported (every JSON event carries it). */
function idOf(run: { sessionId: string | undefined; stderr: string }): string {
  if (!run.sessionId) throw new Error(`the run reported no session id: ${run.stderr.slice(0, 500)}`);
  return run.sessionId;
}

async function turnsOf(hostSessionId: string) {
  const rows = await db.query<{ state: string; publication: string; published: number }>(
    `SELECT t.state, t.publication_state AS publication,
            (SELECT count(*)::int FROM optchat.publications p
              WHERE p.session_id = t.session_id AND p.turn_id = t.turn_id) AS published
       FROM optchat.turns t JOIN optchat.sessions s ON s.session_id = t.session_id
      WHERE s.host = 'opencode-v2' AND s.host_session_id = $1::text ORDER BY t.admitted_at`,
    [hostSessionId],
  );
  return rows.rows;
}

describe("V2 lineage: forks and subagents (real @opencode/cli 2.1.2 processes)", () => {
  it("a fork takes its parent's records over by reference and publishes only its own turn", async () => {
    const calls = [{ name: "shell", args: { command: "echo FORK-PARENT-STEP" } }];
    const parent = await runOpencode2(env, `FORK-1 look TOOLS=${JSON.stringify(calls)} END`);
    expect(parent.code, parent.stderr).toBe(0);
    const parentId = idOf(parent);
    await retrying(
      async () => {
        const turns = await turnsOf(parentId);
        if (turns[0]?.published !== 1) throw new Error(`parent: ${JSON.stringify(turns)}`);
      },
      WAIT,
      "the parent's turn published",
    );
    const parentRecords = await recordsOf(parentId);
    expect(parentRecords.map((r) => r.kind)).toEqual(["user", "tool_call", "tool_result", "assistant"]);

    const fork = await runOpencode2(env, "FORK-2 go on in the fork REPLY=ok fork", {
      session: parentId,
      fork: true,
    });
    expect(fork.code, fork.stderr).toBe(0);
    const forkId = idOf(fork);
    expect(forkId).not.toBe(parentId);
    const forkRecords = await retrying(
      async () => {
        const rows = await recordsOf(forkId);
        if (rows.length < 6) throw new Error(`fork: ${JSON.stringify(rows)}`);
        return rows;
      },
      WAIT,
      "the fork's records",
    );
    // The parent's four records taken over (the same payloads), then the fork's own turn.
    expect(forkRecords.map((r) => [r.kind, r.inherited])).toEqual([
      ["user", true],
      ["tool_call", true],
      ["tool_result", true],
      ["assistant", true],
      ["user", false],
      ["assistant", false],
    ]);
    expect(forkRecords.slice(0, 4).map((r) => r.hash)).toEqual(parentRecords.map((r) => r.hash));
    // The inherited turn stays the parent's publication (none in the fork); the fork publishes its own turn once.
    await retrying(
      async () => {
        const turns = await turnsOf(forkId);
        expect(turns.map((t) => [t.publication, t.published])).toEqual([
          ["none", 0],
          ["published", 1],
        ]);
      },
      WAIT,
      "the fork's one publication",
    );
    expect((await turnsOf(parentId)).map((t) => t.published)).toEqual([1]);
  }, 240_000);

  it("a subagent's session is stored with its parent and never published; the parent's turn is", async () => {
    const call = { name: "subagent", args: { agent: "general", description: "probe", prompt: "SUB-CHILD work" } };
    const run = await runOpencode2(env, `SUB-PARENT delegate TOOLS=${JSON.stringify([call])} END`);
    expect(run.code, run.stderr).toBe(0);
    const parentOfChild = idOf(run);
    const child = await retrying(
      async () => {
        const rows = await db.query<{
          host_session_id: string;
          parent: string | null;
          state: string;
          publication: string;
        }>(
          `SELECT s.host_session_id, p.host_session_id AS parent, t.state, t.publication_state AS publication
             FROM optchat.sessions s
             LEFT JOIN optchat.sessions p ON p.session_id = s.parent_session_id
             JOIN optchat.turns t ON t.session_id = s.session_id
            WHERE s.host = 'opencode-v2' AND s.host_session_id <> $1::text
              AND EXISTS (SELECT 1 FROM optchat.records r WHERE r.session_id = s.session_id AND r.kind = 'user'
                            AND r.turn_id = t.turn_id)
              AND s.created_at > now() - interval '5 minutes'
              AND p.host_session_id = $1::text`,
          [parentOfChild],
        );
        if (rows.rows[0]?.state !== "completed") throw new Error(`child: ${JSON.stringify(rows.rows)}`);
        return rows.rows[0];
      },
      WAIT,
      "the subagent's session with its parent",
    );
    expect(child.parent).toBe(parentOfChild);
    expect(child.publication).toBe("none");
    // A standalone run's worker stops with it: the next V2 process in the project publishes what is pending.
    const next = await runOpencode2(env, "SUB-NEXT anything new? REPLY=no");
    expect(next.code, next.stderr).toBe(0);
    await retrying(
      async () => {
        const turns = await turnsOf(parentOfChild);
        expect(turns.map((t) => [t.state, t.published])).toEqual([["completed", 1]]);
      },
      WAIT,
      "the parent's turn published",
    );
    const published = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM optchat.publications p JOIN optchat.sessions s ON s.session_id = p.session_id
        WHERE s.host_session_id = $1::text`,
      [child.host_session_id],
    );
    expect(published.rows[0]?.n).toBe(0);
  }, 240_000);

  it("memory_inspect answers under V2: this process, its settings and the stored session", async () => {
    const first = await runOpencode2(env, "INSPECT-1 note this REPLY=noted");
    expect(first.code, first.stderr).toBe(0);
    model.clear();
    const call = [{ name: "memory_inspect", args: {} }];
    const run = await runOpencode2(env, `inspect TOOLS=${JSON.stringify(call)} END`, { session: idOf(first) });
    expect(run.code, run.stderr).toBe(0);
    const main = model.requests().filter((request) => request.kind === "main");
    const result = JSON.stringify(main.at(-1)?.body.messages.at(-1)?.content ?? "").replaceAll("\\n", "\n");
    expect(result).toContain("OpenCode V2's process");
    expect(result).not.toContain("holds nothing for OpenCode session");
    expect(result).toMatch(/settings\s+mode /);
  }, 240_000);
});
