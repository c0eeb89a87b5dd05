import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { retrying, usePluginServer } from "../helpers.js";
import { block, memoryText, messagesOf, requestsFor, toolResults } from "./requests.js";

// Issue 15 item 7 for delete, with real OpenCode 1.18.33 processes: after `DELETE /session/A` (which emits only
// `session.deleted`), the plugin forgets A (OPTCHAT_ON_SESSION_DELETE defaults to delete). B's turn that was pinned
// before the deletion gets none of A in its next model request (its snapshot is rebuilt), and B's next turn finds
// nothing of A through memory_search, memory_zoom with A's old refs, or its shared memory.

const WAIT = 90_000;
const MARKER = "QUETZAL-5531";

const e2e = usePluginServer(WAIT);

/** A's optchat session id and its publication numbers, once its turn is published. */
async function publishedA(hostSessionId: string): Promise<{ sessionId: string; seqs: number[] }> {
  return await retrying(
    async () => {
      const { rows } = await e2e.db.query<{ session_id: string; seq: string }>(
        `SELECT s.session_id, p.publication_seq AS seq FROM optchat.sessions s
           JOIN optchat.publications p ON p.session_id = s.session_id
          WHERE s.host_session_id = $1::text ORDER BY p.publication_seq`,
        [hostSessionId],
      );
      if (rows.length === 0) throw new Error("A's turn is not published yet");
      return { sessionId: rows[0]?.session_id as string, seqs: rows.map((r) => Number(r.seq)) };
    },
    WAIT,
    "A's publication",
  );
}

describe("OpenCode session delete with the optchat plugin", { timeout: 240_000 }, () => {
  it("forgets A: B's pinned turn is rebuilt, and B's next turn finds nothing of A in any read path", async () => {
    const a = await e2e.server.createSession("A");
    await e2e.ask(a, `DEL-A1 the deployment codename is ${MARKER} for the kestrel rollout REPLY=noted ${MARKER}`);
    const { sessionId, seqs } = await publishedA(a);

    // B's turn starts (its snapshot pinned) and waits in a tool call while A is deleted.
    const b = await e2e.server.createSession("B");
    const wait = "while [ ! -f delete.flag ]; do sleep 0.2; done; echo released-delete";
    await e2e.server.prompt(b, `DEL-B1 TOOLS=[{"name":"bash","args":{"command":"${wait}","description":"wait"}}] END`);
    const first = await retrying(
      async () => {
        const sent = requestsFor(e2e.model.requests(), "DEL-B1")[0];
        if (!sent) throw new Error("not sent yet");
        return sent;
      },
      WAIT,
      "B's first request",
    );
    expect(block(memoryText(first as never), "shared_memory")).toContain(MARKER);

    const response = await fetch(`${e2e.server.url}/session/${a}`, { method: "DELETE" });
    expect(response.ok).toBe(true);
    await retrying(
      async () => {
        const { rows } = await e2e.db.query(
          "SELECT deleted_at IS NOT NULL AS gone FROM optchat.sessions WHERE session_id = $1::text",
          [sessionId],
        );
        if (!rows[0]?.gone) throw new Error("A is not forgotten yet");
      },
      WAIT,
      "the plugin to forget A",
    );
    writeFileSync(join(e2e.projectDir, "delete.flag"), "go");
    await e2e.server.waitIdle(b, WAIT);
    const afterDelete = requestsFor(e2e.model.requests(), "DEL-B1");
    expect(afterDelete.length).toBeGreaterThan(1);
    // The same turn's next model step, pinned before the deletion: nothing of A (re-pinned, shared view rebuilt).
    for (const request of afterDelete.slice(1)) expect(JSON.stringify(request.body)).not.toContain(MARKER);

    // B's next turn: search, zoom with A's old refs (its publication and its session's first record), and memory.
    const calls = [
      { name: "memory_search", args: { query: "kestrel rollout" } },
      { name: "memory_zoom", args: { ref: `pub:${seqs[0]}+1` } },
      { name: "memory_zoom", args: { ref: `${sessionId}:0:0+1` } },
      { name: "memory_sessions", args: {} },
    ];
    await e2e.ask(b, `DEL-B2 PARALLEL=${JSON.stringify(calls)} END`);
    const requests = requestsFor(e2e.model.requests(), "DEL-B2");
    const last = requests.at(-1) as never;
    for (const request of requests) expect(JSON.stringify((request as { body: unknown }).body)).not.toContain(MARKER);
    const results = toolResults(last);
    // This turn's memory tool calls (with cache epochs the request also keeps DEL-B1's bash call as native history).
    const answered = messagesOf(last)
      .flatMap((m) => m.tool_calls ?? [])
      .filter((call) => call.function.name.startsWith("memory_"))
      .map((call) => results.get(call.id) ?? "");
    expect(answered).toHaveLength(calls.length);
    const [search, zoomPub, zoomSession, sessions] = answered as string[];
    expect(search).toMatch(/^No match for/);
    expect(zoomPub).toContain("[removed: ");
    expect(zoomSession).toMatch(/REF_NOT_FOUND/);
    expect(sessions).not.toContain(sessionId);
    const { rows } = await e2e.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM optchat.nodes WHERE text LIKE $1::text",
      [`%${MARKER}%`],
    );
    expect(rows[0]?.n).toBe(0);
  });
});
