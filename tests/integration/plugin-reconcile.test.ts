import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolvePluginConfig } from "../../plugin/base/config.js";
import { OpencodeAdapter } from "../../plugin/host/adapter.js";
import type { HostLookups } from "../../plugin/host/client-lookups.js";
import type { HostMessage } from "../../plugin/opencode/messages.js";
import { inspectStoredSession, type Memory, openMemory } from "../../src/memory/index.js";
import { createTestDatabase, retrying } from "../helpers.js";

/**
 * Issue 9 item 1: a turn left active by a process that stopped before it stored the reply (closed at once after the
 * answer, or killed) is reported as stuck, and the next process repairs it from OpenCode's transcript (seed 000 §3):
 * the missing reply is stored once, with the live path's finalization keys, and the turn ends completed. Real
 * Postgres; OpenCode's client is a stub that returns the transcript the real one returns (`GET /session/:id/message`).
 */

let database: Awaited<ReturnType<typeof createTestDatabase>>;
let memory: Memory;
const adapters: OpencodeAdapter[] = [];
const config = () => resolvePluginConfig({ databaseUrl: database.url, embeddedWorker: "off" }, {});
let transcript: HostMessage[] = [];

function adapterWith(lookups: Partial<HostLookups>): OpencodeAdapter {
  const adapter = new OpencodeAdapter(
    memory,
    config(),
    { id: "project-reconcile-test", worktree: "/tmp/reconcile-test", directory: "/tmp/reconcile-test" },
    {
      parentOf: async () => undefined,
      modelLimits: async () => undefined,
      // As `GET /session/:id/message` does: the messages of the session asked for.
      transcript: async (hostSessionId: string) => transcript.filter((m) => m.info.sessionID === hostSessionId),
      ...lookups,
    },
    () => {},
  );
  adapters.push(adapter);
  return adapter;
}

beforeAll(async () => {
  database = await createTestDatabase();
  memory = await openMemory(config().core);
});

afterAll(async () => {
  // The adapters share the test's memory: closing one closes the pool, so only the service is closed here.
  await memory?.close();
  await database?.drop();
});

const T0 = Date.UTC(2026, 10, 30, 9, 0, 0);

function user(session: string, id: string, text: string, at: number): HostMessage {
  return {
    info: { id, sessionID: session, role: "user", time: { created: at } },
    parts: [{ id: `prt_${id}`, messageID: id, sessionID: session, type: "text", text }],
  };
}

function answer(session: string, id: string, parentID: string, text: string, at: number): HostMessage {
  return {
    info: { id, sessionID: session, role: "assistant", parentID, finish: "stop", time: { created: at, completed: at } },
    parts: [{ id: `prt_${id}`, messageID: id, sessionID: session, type: "text", text, time: { start: at, end: at } }],
  };
}

async function rows(session: string): Promise<{ kind: string; message: string; key: string }[]> {
  const result = await memory.pool.query<{ kind: string; message: string; key: string }>(
    `SELECT r.kind, r.attributes->>'hostMessageId' AS message, r.attributes->>'hostPartId' AS key
       FROM optchat.records r JOIN optchat.sessions s ON s.session_id = r.session_id
      WHERE s.host_session_id = $1::text ORDER BY r.seq`,
    [session],
  );
  return result.rows;
}

async function state(session: string, turnId: string): Promise<string | undefined> {
  const found = await memory.host.findSession("opencode", session);
  return found ? (await memory.getTurn({ sessionId: found.sessionId, turnId })).state : undefined;
}

/** What a lease TTL passing does (the stopped process renews nothing). */
async function expireLease(session: string): Promise<void> {
  await memory.pool.query(
    `UPDATE optchat.session_leases l SET expires_at = now() - interval '1 second'
       FROM optchat.sessions s WHERE s.session_id = l.session_id AND s.host_session_id = $1::text`,
    [session],
  );
}

describe("a turn left active by a stopped OpenCode process", () => {
  it("is reported stuck, then repaired from OpenCode's transcript: the reply stored once, the turn completed", async () => {
    const s = "ses_reconcile_reply";
    const first = adapterWith({});
    const question = user(s, "msg_r01", "RECON-1 which database? we chose sqlite", T0);
    await first.admit(s, question.info, question.parts);
    // chat.message returns once the lease is held; the rest of the admission is the session's next job.
    await first.flush(10_000);
    // The process stops here: OpenCode stored the answer, the plugin never handled its final event.
    transcript = [question, answer(s, "msg_r02", "msg_r01", "decision noted: sqlite", T0 + 1000)];
    await expireLease(s);

    const stored = await memory.host.findSession("opencode", s);
    if (!stored) throw new Error("session not stored");
    const before = await inspectStoredSession(memory, stored);
    expect((before.health as { verdict: string }).verdict).toMatch(/^stuck: turn msg_r01 is still active/);
    expect((before.health as { verdict: string }).verdict).toContain("Prompt the session again");
    const audit = await memory.audit();
    expect(audit.ok).toBe(false);
    expect(audit.violations.filter((v) => v.audit === "turn_liveness").map((v) => v.subject)).toEqual([
      expect.stringContaining(":msg_r01 (OpenCode session ses_reconcile_reply"),
    ]);

    const next = adapterWith({});
    const again = user(s, "msg_r03", "RECON-2 what did we decide?", T0 + 5000);
    transcript = [...transcript, again];
    await next.admit(s, again.info, again.parts);
    await next.flush(10_000);

    expect(await state(s, "msg_r01")).toBe("completed");
    expect(await rows(s)).toEqual([
      { kind: "user", message: "msg_r01", key: "msg_r01:user" },
      // The live path's key for the text part (plugin/opencode/messages.ts): a later re-delivery is a duplicate.
      { kind: "assistant", message: "msg_r02", key: "prt_msg_r02" },
      { kind: "user", message: "msg_r03", key: "msg_r03:user" },
    ]);
    const after = await inspectStoredSession(memory, stored);
    expect((after.health as { verdict: string }).verdict).not.toMatch(/^stuck/);
    expect((await memory.audit()).violations.filter((v) => v.audit === "turn_liveness")).toEqual([]);

    // The live path delivering the same message later (a replay) seals nothing new.
    next.onEvent({ type: "message.part.updated", properties: { part: transcript[1]?.parts[0] } });
    next.onEvent({ type: "message.updated", properties: { info: { ...transcript[1]?.info, parentID: "msg_r03" } } });
    await next.flush(10_000);
    expect((await rows(s)).filter((r) => r.message === "msg_r02")).toHaveLength(1);
  });

  it("ends a turn whose last step never finished as interrupted, and one OpenCode cannot describe as before", async () => {
    const s = "ses_reconcile_killed";
    const first = adapterWith({});
    const question = user(s, "msg_k01", "KILLED-1 long answer", T0);
    await first.admit(s, question.info, question.parts);
    // chat.message returns once the lease is held; the rest of the admission is the session's next job.
    await first.flush(10_000);
    // Killed mid-step: OpenCode keeps the assistant message with no time.completed and an empty text part.
    transcript = [
      question,
      {
        info: { id: "msg_k02", sessionID: s, role: "assistant", parentID: "msg_k01", time: { created: T0 + 1 } },
        parts: [{ id: "prt_msg_k02", messageID: "msg_k02", sessionID: s, type: "text", text: "" }],
      },
    ];
    await expireLease(s);
    const next = adapterWith({});
    const again = user(s, "msg_k03", "KILLED-2 again", T0 + 5000);
    await next.admit(s, again.info, again.parts);
    await next.flush(10_000);
    expect(await state(s, "msg_k01")).toBe("interrupted");
    expect((await rows(s)).map((r) => r.message)).toEqual(["msg_k01", "msg_k03"]);

    // The client does not answer: the turn still ends (interrupted), nothing else is stored.
    const s2 = "ses_reconcile_no_client";
    const third = adapterWith({ transcript: async () => undefined });
    const q2 = user(s2, "msg_n01", "NOCLIENT-1", T0);
    await third.admit(s2, q2.info, q2.parts);
    await third.flush(10_000);
    await expireLease(s2);
    const fourth = adapterWith({ transcript: async () => undefined });
    const q3 = user(s2, "msg_n02", "NOCLIENT-2", T0 + 1000);
    await fourth.admit(s2, q3.info, q3.parts);
    await fourth.flush(10_000);
    await retrying(async () => expect(await state(s2, "msg_n01")).toBe("interrupted"), 10_000, "the outcome");
  });

  it("repairs the project's stuck turns when a process starts, leaving those the transcript cannot decide", async () => {
    const done = "ses_start_pass_done";
    const killed = "ses_start_pass_killed";
    const a = adapterWith({});
    const q1 = user(done, "msg_s01", "START-1 which queue? we chose pg-boss", T0);
    const q2 = user(killed, "msg_s11", "START-2 a long answer", T0);
    await a.admit(done, q1.info, q1.parts);
    await a.admit(killed, q2.info, q2.parts);
    await a.flush(10_000);
    // The process stops: one session's answer is in OpenCode's transcript, the other's step never finished.
    const transcripts: Record<string, HostMessage[]> = {
      [done]: [q1, answer(done, "msg_s02", "msg_s01", "decision noted: pg-boss", T0 + 1000)],
      [killed]: [
        q2,
        {
          info: { id: "msg_s12", sessionID: killed, role: "assistant", parentID: "msg_s11", time: { created: T0 + 1 } },
          parts: [{ id: "prt_msg_s12", messageID: "msg_s12", sessionID: killed, type: "text", text: "" }],
        },
      ],
    };
    await expireLease(done);
    await expireLease(killed);

    // A new process of the project, prompted in neither session.
    const b = adapterWith({ transcript: async (id) => transcripts[id] });
    b.scheduleProjectReconcile(0);
    await retrying(async () => expect(await state(done, "msg_s01")).toBe("completed"), 10_000, "the start pass");
    await b.flush(10_000);
    expect((await rows(done)).map((r) => r.key)).toEqual(["msg_s01:user", "prt_msg_s02"]);
    // Undecided by the transcript: left for the session's next prompt (which ends it interrupted).
    expect(await state(killed, "msg_s11")).toBe("active");
    expect((await rows(killed)).map((r) => r.key)).toEqual(["msg_s11:user"]);
  });
});
