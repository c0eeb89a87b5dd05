import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { IngestEvent } from "../../src/memory/schemas.js";
import type { RunningCompactor } from "../../src/memory/worker.js";
import { startWorker } from "../../src/memory/worker.js";
import type { Session } from "../../src/store/sessions.js";
import { eventually, ingestEvent, LARGE_WINDOW, useTestMemory } from "../helpers.js";

/** A fork's inherited history, through the service API (issue 15 item 3; the plugin's path is tests/e2e). */

const db = useTestMemory();
let worker: RunningCompactor;
let parent: Session;

const WINDOW = LARGE_WINDOW;

type Message = { kind: "user" | "assistant" | "tool_call" | "tool_result"; text: string; call?: string };

const FIRST: Message[] = [
  { kind: "user", text: "FORKMARK-1 where does the parser keep its tokens?" },
  { kind: "tool_call", text: '{"command":"grep -rn tokens src/parser"}', call: "c1" },
  { kind: "tool_result", text: "src/parser/lexer.ts:12: const tokens: Token[] = [];", call: "c1" },
  { kind: "assistant", text: "FORKMARK-1 answer: the lexer keeps them in a plain array (src/parser/lexer.ts:12)." },
];
const SECOND: Message[] = [
  { kind: "user", text: "FORKMARK-2 rewrite the lexer as a generator" },
  { kind: "assistant", text: "FORKMARK-2 done: the lexer yields tokens one at a time." },
];
const LATER: Message[] = [
  { kind: "user", text: "FORKMARK-3 the parent's later turn" },
  { kind: "assistant", text: "FORKMARK-3 answered only in the parent." },
];

function events(session: Session, turnId: string, messages: readonly Message[], prefix: string): IngestEvent[] {
  return messages.map((m, n) =>
    ingestEvent({
      sessionId: session.sessionId,
      turnId,
      kind: m.kind,
      host: session.hostSessionId,
      messageId: `${prefix}-${turnId}-${n}`,
      occurredAt: new Date(Date.UTC(2026, 11, 1, 9, 0, n)).toISOString(),
      content: m.text,
      ...(m.call ? { toolCallId: m.call, toolName: "bash" } : {}),
      attributes: { hostMessageId: `${prefix}-${turnId}-${n}` },
    }),
  );
}

async function turn(session: Session, turnId: string, messages: readonly Message[]): Promise<void> {
  await db.memory.admitTurn({ sessionId: session.sessionId, turnId, query: messages[0]?.text });
  await db.memory.ingestMany(events(session, turnId, messages, "orig"));
  await db.memory.finishTurn({ sessionId: session.sessionId, turnId }, "completed");
}

async function count(sql: string, values: unknown[] = []): Promise<number> {
  const { rows } = await db.memory.pool.query(sql, values);
  return Number(rows[0].n);
}

beforeAll(async () => {
  worker = await startWorker(db.memory, db.config, () => {});
  parent = await db.memory.openSession({ host: "test", hostSessionId: "P", projectId: "prj_fork", title: "parser" });
  await turn(parent, "t1", FIRST);
  await turn(parent, "t2", SECOND);
  await turn(parent, "t3", LATER);
  await db.memory.settle(parent.sessionId, { timeoutMs: 30_000 });
  await eventually(
    async () => ((await count("SELECT count(*) AS n FROM optchat.publications")) === 3 ? true : undefined),
    30_000,
    "the parent's three publications",
  );
});
afterAll(async () => {
  await worker?.stop();
});

describe("a fork's inherited history", () => {
  it("takes over the parent's first records by reference, with their summaries, and publishes none of them again", async () => {
    const child = await db.memory.openSession({
      host: "test",
      hostSessionId: "C",
      projectId: "prj_fork",
      title: "parser (fork #1)",
    });
    const blobs = await count("SELECT count(*) AS n FROM optchat.blobs");
    // OpenCode's copies of the parent's first two turns, in transcript order (the tool parts after the text here).
    const copies = [
      ...events(child, "x1", [FIRST[0], FIRST[3], FIRST[1], FIRST[2]] as Message[], "copy"),
      ...events(child, "x2", SECOND, "copy"),
    ];
    const result = await db.memory.inheritHistory(child.sessionId, copies);
    expect(result).toMatchObject({
      status: "inherited",
      from: { sessionId: parent.sessionId, generation: 0 },
      records: 6,
    });
    if (result.status !== "inherited") throw new Error("not inherited");
    expect(result.nodes).toBeGreaterThanOrEqual(6 + 3); // six leaves, pairs (0,1) (2,3) (4,5), and (0..3)

    // The child's records are the parent's, in the parent's order, with the copies' keys; no payload stored again.
    const parentRecords = await db.memory.listRecords(parent.sessionId);
    const childRecords = await db.memory.listRecords(child.sessionId);
    expect(childRecords.map((r) => [r.seq, r.kind, r.payloadHash.toString("hex")])).toEqual(
      parentRecords.slice(0, 6).map((r) => [r.seq, r.kind, r.payloadHash.toString("hex")]),
    );
    expect(childRecords.map((r) => r.eventKey.split("/")[1]).every((id) => id?.startsWith("copy-"))).toBe(true);
    expect(await count("SELECT count(*) AS n FROM optchat.blobs")).toBe(blobs);

    // Its view covers the inherited prefix with the parent's summaries (nothing to summarize again).
    const readiness = await db.memory.settle(child.sessionId, { timeoutMs: 30_000 });
    expect(readiness.ready).toBe(true);
    const view = await db.memory.view(child.sessionId);
    expect(view.leafCount).toBe(6);
    expect(view.unbuilt).toBe(0);
    expect(JSON.stringify(view.lines)).toContain("FORKMARK-2");
    expect(JSON.stringify(view.lines)).not.toContain("FORKMARK-3");
    // Nothing was summarized for the child: every node of its tree is one the parent built.
    expect(
      await count(
        `SELECT count(*) AS n FROM optchat.nodes n JOIN optchat.trees t ON t.tree_id = n.tree_id
          WHERE t.session_id = $1::text AND n.job_id IS NOT NULL`,
        [child.sessionId],
      ),
    ).toBe(0);

    // A second call changes nothing; the inherited turns are the child's history but are never published.
    expect(await db.memory.inheritHistory(child.sessionId, copies)).toEqual({ status: "has_history" });
    expect(
      await count(
        "SELECT count(*) AS n FROM optchat.turns WHERE session_id = $1::text AND publication_state = 'none'",
        [child.sessionId],
      ),
    ).toBe(2);

    // The child's first own turn starts after the prefix, sees it as session memory and the parent's later turn only
    // as shared memory, and publishes only its own records.
    const own = await db.memory.admitTurn({ sessionId: child.sessionId, turnId: "c1", query: "FORKMARK-4 go on" });
    expect(own.snapshot.ownBoundary).toBe(6);
    const context = await db.memory.assembleContext({ sessionId: child.sessionId, turnId: "c1" }, WINDOW);
    const block = (name: string) => context.blocks.find((b) => b.name === name)?.text ?? "";
    expect(block("session_memory")).toContain("FORKMARK-1");
    expect(block("session_memory")).not.toContain("FORKMARK-3");
    expect(block("shared_memory")).toContain("FORKMARK-3");
    expect(block("previous_exchange")).toContain("FORKMARK-2 done");
    await db.memory.ingestMany(
      events(
        child,
        "c1",
        [
          { kind: "user", text: "FORKMARK-4 go on" },
          { kind: "assistant", text: "FORKMARK-4 ok" },
        ],
        "own",
      ),
    );
    await db.memory.finishTurn({ sessionId: child.sessionId, turnId: "c1" }, "completed");
    await eventually(
      async () => ((await count("SELECT count(*) AS n FROM optchat.publications")) === 4 ? true : undefined),
      30_000,
      "the child's own publication",
    );
    const published = await db.memory.pool.query(
      "SELECT turn_id, start_seq, end_seq_exclusive FROM optchat.publications WHERE session_id = $1::text",
      [child.sessionId],
    );
    expect(published.rows.map((r) => [r.turn_id, Number(r.start_seq), Number(r.end_seq_exclusive)])).toEqual([
      ["c1", 6, 8],
    ]);

    // Every revision of the child's view equals a refold of its events; no publication covers another's records.
    const audit = await db.memory.audit();
    expect(audit.violations).toEqual([]);
    expect(audit.ok).toBe(true);
  });

  it("inherits nothing when no session holds exactly the copies first, or when the child has its own history", async () => {
    const stranger = await db.memory.openSession({ host: "test", hostSessionId: "S", projectId: "prj_fork" });
    const edited = events(stranger, "x1", [{ ...FIRST[0], text: "FORKMARK-1 edited" } as Message], "copy");
    expect(await db.memory.inheritHistory(stranger.sessionId, edited)).toEqual({ status: "no_match" });
    // Another project's session holds the same words: scopes are never crossed.
    const elsewhere = await db.memory.openSession({ host: "test", hostSessionId: "E", projectId: "prj_other" });
    expect(await db.memory.inheritHistory(elsewhere.sessionId, events(elsewhere, "x1", FIRST, "copy"))).toEqual({
      status: "no_match",
    });
    // Only some of a turn's records: not a prefix of the parent.
    const partial = events(stranger, "x1", [FIRST[0], FIRST[3]] as Message[], "copy");
    expect(await db.memory.inheritHistory(stranger.sessionId, partial)).toEqual({ status: "no_match" });
    expect(
      await count("SELECT count(*) AS n FROM optchat.records WHERE session_id = $1::text", [stranger.sessionId]),
    ).toBe(0);
  });

  it("makes a fork of a private session private: the copies are the private session's text (issue 41)", async () => {
    const secret = await db.memory.openSession({
      host: "test",
      hostSessionId: "PRIV",
      projectId: "prj_private_fork",
      visibility: "private",
    });
    const words: Message[] = [
      { kind: "user", text: "PRIVMARK-1 the staging password rotates on Mondays" },
      { kind: "assistant", text: "PRIVMARK-1 noted." },
    ];
    await turn(secret, "p1", words);
    const fork = await db.memory.openSession({
      host: "test",
      hostSessionId: "PRIV-FORK",
      projectId: "prj_private_fork",
    });
    const visibility = async (session: Session) =>
      (
        await db.memory.pool.query("SELECT visibility FROM optchat.sessions WHERE session_id = $1::text", [
          session.sessionId,
        ])
      ).rows[0]?.visibility;
    expect(await visibility(fork)).toBe("shared");
    const result = await db.memory.inheritHistory(fork.sessionId, events(fork, "x1", words, "copy"));
    expect(result.status).toBe("inherited");
    expect(await visibility(fork)).toBe("private");
    // Its own turns then never publish, like its parent's.
    expect((await db.memory.admitTurn({ sessionId: fork.sessionId, turnId: "f1" })).publishes).toBe(false);
  });
});
