import { writeFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { runOpencode } from "../../scripts/opencode-harness.js";
import { createTestDatabase, retrying, usePluginServer } from "../helpers.js";
import { block, memoryText, ownMemory, requestsFor, textOutsideMemory, toolProtocolViolations } from "./requests.js";

/** Session lifecycle operations of OpenCode 1.18.33 (fork, revert) and a stalled compactor, with real processes. */

const WAIT = 90_000;

const e2e = usePluginServer(WAIT);

async function post(path: string, body: unknown): Promise<unknown> {
  const response = await fetch(`${e2e.server.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`POST ${path}: ${response.status} ${await response.text()}`);
  return await response.json();
}

/** The id of the OpenCode session's user message whose text contains `marker`. */
async function userMessageId(session: string, marker: string): Promise<string> {
  const messages = await e2e.server.messages(session);
  const found = messages.find(
    (m: { info: { role: string }; parts: { text?: string }[] }) =>
      m.info.role === "user" && m.parts.some((p) => p.text?.includes(marker)),
  );
  return found.info.id;
}

/** Waits until OpenCode session `hostSessionId` has `count` rows in optchat's `table` (publications or turns). */
async function rowsOf(
  table: "publications" | "turns",
  hostSessionId: string,
  count: number,
  what = `${count} ${table} of ${hostSessionId}`,
): Promise<void> {
  await retrying(
    async () => {
      const found = await e2e.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM optchat.${table} x JOIN optchat.sessions s ON s.session_id = x.session_id
          WHERE s.host_session_id = $1::text`,
        [hostSessionId],
      );
      expect(found.rows[0]?.n).toBe(count);
    },
    WAIT,
    what,
  );
}

// Real OpenCode processes on 2 cores under a parallel suite: a test takes 2-30 s; the default 60 s is too tight.
describe("OpenCode lifecycle with the optchat plugin", { timeout: 180_000 }, () => {
  it("gives a fork its inherited history as session memory, replaces the copies, stores and publishes nothing twice", async () => {
    const original = await e2e.server.createSession("original");
    await e2e.ask(original, "FORK-1 the parser needs a rewrite REPLY=noted: parser rewrite");
    await e2e.ask(original, "FORK-2 use a generator for the lexer REPLY=agreed: generator lexer");
    const second = await userMessageId(original, "FORK-2");
    // The fork copies the messages strictly before FORK-2: the first turn only.
    const fork = (await post(`/session/${original}/fork`, { messageID: second })) as { id: string };
    // The parent's later turn is published, so the fork can see it only as shared memory.
    await rowsOf("publications", original, 2);
    await e2e.ask(fork.id, "FORK-3 continue in the fork REPLY=ok fork");

    const request = requestsFor(e2e.model.requests(), "FORK-3").at(-1) as never;
    // The copy of FORK-1 is held by memory now (inherited by reference), so the transform replaced it ...
    expect(textOutsideMemory(request)).not.toContain("FORK-1 the parser needs a rewrite");
    // ... and the fork's own history in memory holds it, while the parent's later turn is only foreign memory. Its own
    // history is the session block and the previous exchange, which holds the messages it shows word for word (the
    // session block leaves those out: issue 14, nothing sent twice).
    const memory = memoryText(request) ?? "";
    expect(ownMemory(memory)).toContain("FORK-1");
    expect(ownMemory(memory)).not.toContain("FORK-2");
    expect(block(memory, "shared_memory") ?? "").toContain("FORK-2");

    await retrying(
      async () => {
        const forkRecords = await e2e.db.query<{ kind: string; inherited: boolean }>(
          `SELECT r.kind, r.attributes ? 'inheritedFrom' AS inherited
             FROM optchat.records r JOIN optchat.sessions s ON s.session_id = r.session_id
            WHERE s.host_session_id = $1::text ORDER BY r.seq`,
          [fork.id],
        );
        // The inherited first turn (user, answer), then the fork's own turn.
        expect(forkRecords.rows.map((r) => [r.kind, r.inherited])).toEqual([
          ["user", true],
          ["assistant", true],
          ["user", false],
          ["assistant", false],
        ]);
      },
      WAIT,
      "the fork's records",
    );
    // Only the fork's own turn is published: the inherited one stays the original's publication.
    await retrying(
      async () => {
        const published = await e2e.db.query<{ turn: string }>(
          `SELECT p.turn_id AS turn FROM optchat.publications p JOIN optchat.sessions s ON s.session_id = p.session_id
            WHERE s.host_session_id = $1::text`,
          [fork.id],
        );
        expect(published.rows).toHaveLength(1);
      },
      WAIT,
      "the fork's one publication",
    );
    const blobsOfFork = await e2e.db.query<{ shared: number }>(
      `SELECT count(*)::int AS shared FROM optchat.records r JOIN optchat.sessions s ON s.session_id = r.session_id
        WHERE s.host_session_id = $1::text AND r.payload_hash IN (
          SELECT r2.payload_hash FROM optchat.records r2 JOIN optchat.sessions s2 ON s2.session_id = r2.session_id
           WHERE s2.host_session_id = $2::text)`,
      [fork.id, original],
    );
    expect(blobsOfFork.rows[0]?.shared).toBe(2);
  });

  it("rewinds a reverted session's memory: the reverted turn never reaches a later request, memory stays on", async () => {
    const session = await e2e.server.createSession("revert");
    await e2e.ask(session, "REV-1 first REPLY=one");
    await e2e.ask(session, "REV-2 second, to be reverted REPLY=two");
    const second = await userMessageId(session, "REV-2");
    // REV-2 is published before it is reverted: the rewind must take it out of the shared memory too.
    await rowsOf("publications", session, 2);
    await post(`/session/${session}/revert`, { messageID: second });
    await e2e.ask(session, "REV-3 after the revert REPLY=three");
    const request = requestsFor(e2e.model.requests(), "REV-3").at(-1) as never;
    // Memory stays on, with the new generation's own history (REV-1) and nothing of the reverted turn anywhere.
    const memory = memoryText(request) ?? "";
    expect(ownMemory(memory)).toContain("REV-1");
    expect(JSON.stringify((request as { body: unknown }).body)).not.toContain("REV-2 second");
    const generations = await e2e.db.query<{ generation: number }>(
      "SELECT current_generation AS generation FROM optchat.sessions WHERE host_session_id = $1::text",
      [session],
    );
    expect(generations.rows[0]?.generation).toBe(1);
    // Another session of the project does not get the reverted turn either.
    const other = await e2e.server.createSession("after the revert");
    await e2e.ask(other, "REV-4 what happened before? REPLY=four");
    const foreign = requestsFor(e2e.model.requests(), "REV-4").at(-1) as never;
    expect(memoryText(foreign) ?? "").toContain("REV-1");
    expect(JSON.stringify((foreign as { body: unknown }).body)).not.toContain("REV-2 second");
  });

  it("finishes queued prompts answered together, keeping the running turn and each queued request verbatim", async () => {
    const session = await e2e.server.createSession("queued");
    // The first turn is in its tool loop (waiting for a flag) while two more prompts are queued.
    const wait = "while [ ! -f queue.flag ]; do sleep 0.2; done; echo released-queue";
    await e2e.server.prompt(
      session,
      `QUEUE-1 TOOLS=[{"name":"bash","args":{"command":"${wait}","description":"wait for the flag"}}] END`,
    );
    await retrying(
      async () => {
        if (requestsFor(e2e.model.requests(), "QUEUE-1").length < 1) throw new Error("not sent yet");
      },
      WAIT,
      "the first request",
    );
    await e2e.server.prompt(session, "QUEUE-2 queued second");
    await e2e.server.prompt(session, "QUEUE-3 queued third REPLY=both answered");
    // Both queued prompts admitted (so queued in OpenCode) while the first turn's tool still runs.
    await rowsOf("turns", session, 3, "the queued prompts' admission");
    writeFileSync(join(e2e.projectDir, "queue.flag"), "go");
    await retrying(
      async () => {
        const states = await e2e.db.query<{ state: string }>(
          `SELECT t.state FROM optchat.turns t JOIN optchat.sessions s ON s.session_id = t.session_id
            WHERE s.host_session_id = $1::text ORDER BY t.admitted_at`,
          [session],
        );
        const got = states.rows.map((r) => r.state);
        if (got.length !== 3 || got.includes("active")) throw new Error(`turn states ${got.join(",")}`);
        expect(got).toEqual(["completed", "completed", "completed"]);
      },
      WAIT,
      "the three turns to finish",
    );
    const combined = requestsFor(e2e.model.requests(), "QUEUE-3").at(-1) as never;
    const outside = textOutsideMemory(combined);
    // The running turn's request and its tool result stay verbatim: the queued turns' boundary does not apply to it.
    expect(outside).toContain("QUEUE-1 TOOLS=");
    expect(outside).toContain("released-queue");
    expect(toolProtocolViolations(combined)).toEqual([]);
    expect(outside).toContain("QUEUE-2 queued second");
    expect(outside).toContain("QUEUE-3 queued third");
  });

  it("stops a request with an actionable error when memory is not ready and no compactor runs (strict)", async () => {
    // A database of its own: the other server's embedded worker would otherwise do the work.
    const quiet = await createTestDatabase();
    const quietDb = new pg.Pool({ connectionString: quiet.url, max: 1 });
    quietDb.on("error", () => {});
    const stalled = await e2e.world.env({
      pluginOptions: { databaseUrl: quiet.url, embeddedWorker: "off", readinessWaitMs: 1500 },
    });
    try {
      // Over 512 bytes: the message needs a summarizer call, which nobody runs.
      const long = `SLOW-1 ${"the importer keeps retrying the same file; ".repeat(20)} REPLY=ok`;
      const first = await runOpencode(stalled, long, { timeoutMs: WAIT });
      expect(first.code).toBe(0);
      const second = await runOpencode(stalled, "SLOW-2 and now?", {
        session: first.sessionId as string,
        timeoutMs: WAIT,
      });
      expect(second.code).not.toBe(0);
      expect(second.errors.join("\n")).toMatch(/optchat: memory is not ready.*OPTCHAT_READINESS=partial/s);
      expect(requestsFor(e2e.model.requests(), "SLOW-2").length).toBe(0);
      // Nothing was dropped: the long message is stored whole, waiting for a summary.
      const stored = await quietDb.query<{ bytes: number }>(
        `SELECT r.payload_bytes::int AS bytes FROM optchat.records r JOIN optchat.blobs b ON b.hash = r.payload_hash
          WHERE convert_from(b.content, 'UTF8') LIKE 'SLOW-1%'`,
      );
      expect(stored.rows[0]?.bytes).toBe(Buffer.byteLength(long));
    } finally {
      await quietDb.end();
      await quiet.drop();
    }
  });
});
