import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  cleanupOpencodeEnv,
  createOpencodeEnv,
  type OpencodeEnv,
  runOpencode,
  startOpencodeServer,
} from "../../scripts/opencode-harness.js";
import { type PluginWorld, retrying, runCli, startPluginWorld } from "../helpers.js";
import { memoryText, messagesOf, requestsFor, textOf } from "./requests.js";

/**
 * `optchat import --opencode` on sessions real OpenCode 1.18.33 wrote without the plugin (issue 12 item 3): records,
 * turns with their real outcomes, a subagent recorded and not published; a second import stores nothing; the plugin
 * then running one of the sessions live duplicates nothing, and an import after it finds the plugin's records its own.
 */

let world: PluginWorld;
let db: pg.Pool;
/** OpenCode without the plugin: the user's history before installing optchat. */
let native: OpencodeEnv;
let dataDir = "";
const ids = { main: "", parent: "", killed: "" };

const TOOL_PROMPT = 'TOOLS=[{"name":"bash","args":{"command":"echo hi-from-bash","description":"echo"}}] END';
const TASK_PROMPT =
  'TOOLS=[{"name":"task","args":{"description":"child probe","prompt":"CHILD say hi","subagent_type":"general"}}] END';

beforeAll(async () => {
  world = await startPluginWorld();
  db = world.db;
  native = await createOpencodeEnv({ modelUrl: world.model.url });
  dataDir = `${native.env.XDG_DATA_HOME}/opencode`;
  const first = await runOpencode(native, "IMPORT-1 where is the broker? 日本語の質問");
  expect(first.code, first.stderr).toBe(0);
  ids.main = first.sessionId as string;
  expect((await runOpencode(native, TOOL_PROMPT, { session: ids.main })).code).toBe(0);
  expect((await runOpencode(native, "ERROR400", { session: ids.main })).code).toBe(1);
  const task = await runOpencode(native, TASK_PROMPT);
  expect(task.code, task.stderr).toBe(0);
  ids.parent = task.sessionId as string;
  // A process killed in the middle of a step (its request is at the model): OpenCode keeps the step, never completed.
  const server = await startOpencodeServer(native);
  try {
    const session = await server.createSession("killed");
    await server.prompt(session, "IMPORT-KILL SLOW=30 never finishes");
    await retrying(
      async () => {
        if (requestsFor(world.model.requests(), "IMPORT-KILL").length === 0) throw new Error("not at the model yet");
      },
      60_000,
      "the slow request at the model",
    );
  } finally {
    await server.kill("SIGKILL");
  }
}, 240_000);

afterAll(async () => {
  await world?.close();
  if (native) await cleanupOpencodeEnv(native);
});

async function rows<T = Record<string, unknown>>(sql: string, params: unknown[] = []): Promise<T[]> {
  return (await db.query(sql, params)).rows as T[];
}

async function counts() {
  const [row] = await rows<{ sessions: number; records: number; turns: number; conflicts: number }>(
    `SELECT (SELECT count(*)::int FROM optchat.sessions) AS sessions, (SELECT count(*)::int FROM optchat.records) AS records,
            (SELECT count(*)::int FROM optchat.turns) AS turns, (SELECT count(*)::int FROM optchat.ingest_conflicts) AS conflicts`,
  );
  return row as { sessions: number; records: number; turns: number; conflicts: number };
}

async function importOpencode(...extra: string[]) {
  const result = await runCli(["import", "--opencode", "--data-dir", dataDir, "--json", ...extra], {
    DATABASE_URL: world.database.url,
  });
  expect(result.code, result.stderr).toBe(0);
  return JSON.parse(result.stdout);
}

describe("optchat import --opencode", { timeout: 180_000 }, () => {
  it("dry-runs without writing, and --project selects by directory", async () => {
    const elsewhere = await importOpencode("--dry-run", "--project", "/nonexistent/project");
    expect(elsewhere.sessions).toMatchObject({ found: 4, imported: 0, skipped: { "another project": 4 } });
    const dry = await importOpencode("--dry-run", "--project", native.projectDir);
    expect(dry).toMatchObject({
      dryRun: true,
      sessions: { found: 4, imported: 4, subagents: 1 },
      turns: { total: 6, completed: 4, interrupted: 1, failed: 1 },
    });
    expect(await counts()).toMatchObject({ sessions: 0, records: 0, turns: 0 });
  });

  it("records every session as the plugin would have, with the turns' real outcomes", async () => {
    const summary = await importOpencode();
    console.log(`import summary of the harness sessions: ${JSON.stringify(summary)}`);
    expect(summary).toMatchObject({
      dryRun: false,
      sessions: { found: 4, imported: 4, subagents: 1 },
      turns: { total: 6, completed: 4, interrupted: 1, failed: 1, finished: 6, alreadyFinished: 0 },
      records: { conflicts: 0, duplicates: 0 },
      messagesNotStored: { unfinishedSteps: 1 },
    });
    expect(summary.records.sealed).toBe(summary.records.total);
    // Subagent turns publish nothing; the others each schedule one publication.
    expect(summary.turns.publicationsScheduled).toBe(5);

    const records = await rows<{
      host_session_id: string;
      turn_id: string;
      kind: string;
      text: string;
      tool_call_id: string | null;
      tool_name: string | null;
      event_key: string;
      attributes: { hostMessageId: string; hostPartId: string };
    }>(
      `SELECT s.host_session_id, r.turn_id, r.kind, convert_from(b.content, 'UTF8') AS text, r.tool_call_id,
              r.tool_name, r.event_key, r.attributes
         FROM optchat.records r JOIN optchat.sessions s USING (session_id) JOIN optchat.blobs b ON b.hash = r.payload_hash
        ORDER BY s.host_session_id, r.seq`,
    );
    const main = records.filter((r) => r.host_session_id === ids.main);
    expect(main.map((r) => r.kind)).toEqual([
      "user",
      "assistant",
      "user",
      "tool_call",
      "tool_result",
      "assistant",
      "user",
      "note",
    ]);
    expect(main[0]?.text).toBe("IMPORT-1 where is the broker? 日本語の質問");
    expect(main[1]?.text).toBe("ACK: IMPORT-1 where is the broker? 日本語の質問");
    expect(JSON.parse(main[3]?.text as string)).toEqual({
      tool: "bash",
      input: { command: "echo hi-from-bash", description: "echo" },
    });
    expect(main[4]).toMatchObject({ text: "hi-from-bash\n", tool_name: "bash", tool_call_id: main[3]?.tool_call_id });
    expect(main[7]?.text).toMatch(/^The model request failed: APIError: scripted bad request/);
    // The plugin's finalization keys: OpenCode's session / message / part, revision 0.
    for (const record of main) {
      const { hostMessageId, hostPartId } = record.attributes;
      expect(record.event_key).toBe(
        `${ids.main}/${encodeURIComponent(hostMessageId)}/${encodeURIComponent(hostPartId)}#0`,
      );
    }

    const turns = await rows<{ host_session_id: string; state: string; publishes: boolean; parent: string | null }>(
      `SELECT s.host_session_id, t.state, t.publishes, parent.host_session_id AS parent
         FROM optchat.turns t JOIN optchat.sessions s USING (session_id)
         LEFT JOIN optchat.sessions parent ON parent.session_id = s.parent_session_id
        ORDER BY s.host_session_id, t.admission_seq`,
    );
    expect(turns.filter((t) => t.host_session_id === ids.main).map((t) => t.state)).toEqual([
      "completed",
      "completed",
      "failed",
    ]);
    const child = turns.filter((t) => t.parent === ids.parent);
    expect(child).toEqual([expect.objectContaining({ state: "completed", publishes: false })]);
    const killed = turns.filter((t) => t.state === "interrupted");
    expect(killed).toHaveLength(1);
    const killedRecords = records.filter((r) => r.host_session_id === killed[0]?.host_session_id);
    expect(killedRecords.map((r) => [r.kind, r.text])).toEqual([["user", "IMPORT-KILL SLOW=30 never finishes"]]);
    const task = records.find((r) => r.tool_name === "task" && r.kind === "tool_result");
    expect(task?.text).toMatch(/<task id="ses_[^"]+" state="completed">/);
  });

  it("stores nothing the second time", async () => {
    const before = await counts();
    const again = await importOpencode();
    expect(again.records.sealed).toBe(0);
    expect(again.records.duplicates).toBe(again.records.total);
    expect(again.turns).toMatchObject({ finished: 0, alreadyFinished: 6, outcomeDiffers: 0, publicationsScheduled: 0 });
    // Said as such, not as "imported 4 of 4 session(s)" (issue 40 item 10).
    const text = await runCli(["import", "--opencode", "--data-dir", dataDir], { DATABASE_URL: world.database.url });
    expect(text.stdout).toMatch(/^nothing new to import from \S+: its 4 session\(s\) .* are already in memory/);
    expect(await counts()).toEqual(before);
  });

  it("lets the plugin go on with an imported session live, duplicating nothing", async () => {
    const before = await counts();
    const live = await world.env({ shareDataWith: native });
    const result = await runOpencode(live, "IMPORT-LIVE what did we decide?", { session: ids.main });
    expect(result.code, result.stderr).toBe(0);
    const after = await counts();
    // One session, one new turn: its user message and the answer; nothing of the imported history again.
    expect(after).toEqual({ ...before, records: before.records + 2, turns: before.turns + 1, conflicts: 0 });
    const sessions = await rows("SELECT session_id FROM optchat.sessions WHERE host_session_id = $1", [ids.main]);
    expect(sessions).toHaveLength(1);
    // The imported history reached the model as memory, not as the native messages the plugin replaced.
    const request = requestsFor(world.model.requests(), "IMPORT-LIVE").at(-1);
    expect(request).toBeDefined();
    expect(memoryText(request as never)).toContain("IMPORT-1");
    expect(messagesOf(request as never).some((m) => m.role === "user" && textOf(m).startsWith("ERROR400"))).toBe(false);

    // And an import after the live run finds the plugin's records its own.
    const again = await importOpencode();
    expect(again.records).toMatchObject({ sealed: 0, conflicts: 0 });
    expect(again.records.duplicates).toBe(again.records.total);
    expect(again.turns.total).toBe(7);
    expect(await counts()).toEqual(after);
  });

  it("shows where each scope is on disk", async () => {
    const result = await runCli(["scopes", "--data-dir", dataDir], { DATABASE_URL: world.database.url });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^project:global-[0-9a-f]{16} {2}4 session\(s\) \(opencode 4\)/m);
    expect(result.stdout).toContain(`    ${native.projectDir}`);
  });
});
