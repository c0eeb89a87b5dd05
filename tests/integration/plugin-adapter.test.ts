import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolvePluginConfig } from "../../plugin/base/config.js";
import { HOST, projectScopeId } from "../../plugin/base/identity.js";
import { OpencodeAdapter } from "../../plugin/host/adapter.js";
import type { HostMessageInfo, HostPart } from "../../plugin/opencode/messages.js";
import { checkRequestParams, type RequestChecks } from "../../plugin/request/checks.js";
import { leaseHolderName } from "../../plugin/turns/lease.js";
import { IDLE_GRACE_MS } from "../../plugin/turns/tracking.js";
import { type Memory, openMemory } from "../../src/memory/index.js";
import { createTestDatabase, eventually, ManualClock, refuseConnections, retrying } from "../helpers.js";

/**
 * The adapter driven hook call by hook call, in orders a loaded OpenCode process produces but a test of real processes
 * hits only by chance (the e2e suite proves the same behaviours with real OpenCode 1.18.33). Real Postgres; the two
 * OpenCode client lookups answer "unknown". The adapter's clock is a manual one: the idle grace and the job retry waits
 * pass when a test advances it, never by sleeping. The service fails at once when the database is unreachable
 * (OPTCHAT_DATABASE_RETRY_MS=0), so an outage is retried by the adapter's own job queue, the part under test here.
 */

let database: Awaited<ReturnType<typeof createTestDatabase>>;
let adapter: OpencodeAdapter;
let memory: Memory;
const time = new ManualClock(Date.now());
const PARAMS_MODEL = { id: "m", providerID: "p", limit: { context: 100_000 } };
const logged: string[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
  const config = resolvePluginConfig(
    { databaseUrl: database.url, embeddedWorker: "off" },
    { OPTCHAT_DATABASE_RETRY_MS: "0" },
  );
  memory = await openMemory(config.core);
  adapter = new OpencodeAdapter(
    memory,
    config,
    { id: "project-adapter-test", worktree: "/tmp/adapter-test", directory: "/tmp/adapter-test" },
    { parentOf: async () => undefined, modelLimits: async () => undefined, transcript: async () => undefined },
    (_level, message) => logged.push(message),
    time,
  );
});

afterAll(async () => {
  await adapter?.close();
  await database?.drop();
});

let clock = Date.UTC(2026, 10, 30, 9, 0, 0);

/** A user message as `chat.message` receives it; the hook call is `adapter.admit`. */
async function prompt(session: string, id: string, text: string): Promise<void> {
  clock += 1000;
  await adapter.admit(session, { id, sessionID: session, role: "user", time: { created: clock } }, [
    { id: `prt_${id}`, messageID: id, sessionID: session, type: "text", text },
  ] satisfies HostPart[]);
}

/** An assistant step that has started (no `time.completed` yet). */
function stepStarted(session: string, id: string, parentID: string): void {
  clock += 1000;
  adapter.onEvent({
    type: "message.updated",
    properties: { info: { id, sessionID: session, role: "assistant", parentID, time: { created: clock } } },
  });
}

/** The events of one finished assistant step: its text part, then the message with `time.completed`. */
function stepFinished(
  session: string,
  id: string,
  parentID: string,
  end: { finish?: string; error?: HostMessageInfo["error"] },
  text = "an answer",
): void {
  clock += 1000;
  adapter.onEvent({
    type: "message.part.updated",
    properties: { part: { id: `prt_${id}`, messageID: id, sessionID: session, type: "text", text } },
  });
  adapter.onEvent({
    type: "message.updated",
    properties: {
      info: { id, sessionID: session, role: "assistant", parentID, ...end, time: { created: clock, completed: clock } },
    },
  });
}

function status(session: string, type: "busy" | "idle"): void {
  adapter.onEvent({ type: "session.status", properties: { sessionID: session, status: { type } } });
  if (type === "idle") adapter.onEvent({ type: "session.idle", properties: { sessionID: session } });
}

async function turnStates(session: string, ids: readonly string[]): Promise<Record<string, string>> {
  const found = await memory.host.findSession("opencode", session);
  if (!found) return {};
  const states: Record<string, string> = {};
  for (const id of ids) {
    const turn = await memory.getTurn({ sessionId: found.sessionId, turnId: id }).catch(() => undefined);
    if (turn) states[id] = turn.state;
  }
  return states;
}

/** True while the session's lease row is unexpired (some process may prompt it only after that). */
async function leaseHeld(session: string): Promise<boolean> {
  const { rows } = await memory.pool.query<{ held: boolean }>(
    `SELECT l.expires_at >= now() AS held FROM optchat.session_leases l
       JOIN optchat.sessions s ON s.session_id = l.session_id WHERE s.host_session_id = $1::text`,
    [session],
  );
  return rows[0]?.held ?? false;
}

async function expectStates(session: string, expected: Record<string, string>, timeoutMs = 10_000): Promise<void> {
  await retrying(
    async () => {
      expect(await turnStates(session, Object.keys(expected))).toEqual(expected);
    },
    timeoutMs,
    `turn states ${JSON.stringify(expected)}`,
  );
}

describe("OpenCode adapter turn bookkeeping", () => {
  it("ends every queued turn with the reply to the last one, whatever order their admissions finished in", async () => {
    const s = "ses_adapter_queue";
    await prompt(s, "msg_001", "QUEUE-1 run the slow tool");
    status(s, "busy");
    stepFinished(s, "msg_101", "msg_001", { finish: "tool-calls" }, "running the tool");
    // Two prompts queued during the tool loop; the third's chat.message completed before the second's (OpenCode does
    // not serialize the hook calls of two prompt_async requests).
    await prompt(s, "msg_003", "QUEUE-3 queued third");
    await prompt(s, "msg_002", "QUEUE-2 queued second");
    // One reply answers both queued prompts; its parent is the last user message (facts §2), then the session idles.
    stepFinished(s, "msg_102", "msg_003", { finish: "stop" }, "both answered");
    status(s, "idle");
    await expectStates(s, { msg_001: "completed", msg_002: "completed", msg_003: "completed" });
    await retrying(async () => expect(await leaseHeld(s)).toBe(false), 10_000, "the lease to be released");
  });

  it("runs a tool call of the running turn at that turn's snapshot after a prompt was queued behind it", async () => {
    const s = "ses_adapter_tool_turn";
    await prompt(s, "msg_701", "TOOL-1 search while working");
    status(s, "busy");
    stepStarted(s, "msg_711", "msg_701");
    await prompt(s, "msg_702", "TOOL-2 queued meanwhile");
    // The running step's tool calls belong to turn 1 (its pinned snapshot), not to the queued turn admitted after it.
    expect((await adapter.toolTurn(s, "msg_711")).turnId).toBe("msg_701");
    // Without the calling message (an unknown one), the latest admitted turn is used.
    expect((await adapter.toolTurn(s, "msg_unknown")).turnId).toBe("msg_702");
    stepFinished(s, "msg_711", "msg_701", { finish: "tool-calls" });
    stepFinished(s, "msg_712", "msg_702", { finish: "stop" });
    status(s, "idle");
    await expectStates(s, { msg_701: "completed", msg_702: "completed" });
  });

  it("ends a turn whose step never completes once the session stays idle, and releases its lease", async () => {
    const s = "ses_adapter_stuck";
    await prompt(s, "msg_201", "STUCK-1 start");
    status(s, "busy");
    stepStarted(s, "msg_202", "msg_201");
    status(s, "idle");
    // Error paths send idle a few ms before the final message: the step may still complete, so nothing ends yet.
    time.advance(1_000);
    expect(await adapter.flush(10_000)).toBe(true);
    expect(await turnStates(s, ["msg_201"])).toEqual({ msg_201: "active" });
    expect(await leaseHeld(s)).toBe(true);
    time.advance(IDLE_GRACE_MS - 1_000);
    await expectStates(s, { msg_201: "interrupted" });
    await retrying(async () => expect(await leaseHeld(s)).toBe(false), 10_000, "the lease to be released");
  });

  it("keeps the outcome of a final step that arrives after the idle (error path), past the grace", async () => {
    const s = "ses_adapter_error_path";
    await prompt(s, "msg_301", "ERR-1 start");
    status(s, "busy");
    stepStarted(s, "msg_302", "msg_301");
    status(s, "idle");
    stepFinished(s, "msg_302", "msg_301", { error: { name: "APIError", data: { message: "bad request" } } });
    status(s, "idle");
    await expectStates(s, { msg_301: "failed" });
    time.advance(IDLE_GRACE_MS + 1_000);
    expect(await adapter.flush(10_000)).toBe(true);
    expect(await turnStates(s, ["msg_301"])).toEqual({ msg_301: "failed" });
  });

  it("leaves a queued prompt to its own reply when the session goes busy again within the grace", async () => {
    const s = "ses_adapter_requeued";
    await prompt(s, "msg_401", "BUSY-1 first");
    status(s, "busy");
    await prompt(s, "msg_402", "BUSY-2 queued");
    stepFinished(s, "msg_403", "msg_401", { finish: "stop" });
    // Idle between the two (not seen in 1.18.33, but harmless): the queued turn has no step yet and is not decided.
    status(s, "idle");
    status(s, "busy");
    await expectStates(s, { msg_401: "completed" });
    time.advance(IDLE_GRACE_MS + 1_000);
    expect(await adapter.flush(10_000)).toBe(true);
    expect(await turnStates(s, ["msg_402"])).toEqual({ msg_402: "active" });
    stepFinished(s, "msg_404", "msg_402", { finish: "stop" });
    status(s, "idle");
    await expectStates(s, { msg_401: "completed", msg_402: "completed" });
  });

  it("stores a step that finished during a database outage once the database is back, and ends its turn", async () => {
    const s = "ses_adapter_outage";
    await prompt(s, "msg_601", "OUTAGE-1 start");
    status(s, "busy");
    stepStarted(s, "msg_602", "msg_601");
    const readmit = await refuseConnections(database.name);
    try {
      stepFinished(s, "msg_602", "msg_601", { finish: "stop" }, "OUTAGE-ANSWER written while Postgres was away");
      status(s, "idle");
      // The first attempt fails (connections refused); the job waits to try again.
      await eventually(
        async () =>
          logged.find((line) => line.startsWith("optchat ingest (ses_adapter_outage)") && line.endsWith("retrying")),
        30_000,
        "the ingestion job to fail and wait for its retry",
      );
    } finally {
      await readmit();
    }
    // Each poll moves the adapter's clock a second on: the retry waits (0.5, 1, 2 s...) pass without sleeping.
    await retrying(
      async () => {
        time.advance(1_000);
        expect(await turnStates(s, ["msg_601"])).toEqual({ msg_601: "completed" });
      },
      30_000,
      "the turn to complete once the database is back",
    );
    const { rows } = await memory.pool.query<{ kind: string }>(
      `SELECT r.kind FROM optchat.records r JOIN optchat.sessions s ON s.session_id = r.session_id
        WHERE s.host_session_id = $1::text ORDER BY r.seq`,
      [s],
    );
    expect(rows.map((r) => r.kind)).toEqual(["user", "assistant"]);
    await retrying(async () => expect(await leaseHeld(s)).toBe(false), 10_000, "the lease to be released");
  });

  it("ends a queued prompt an abort left unanswered as interrupted, never as completed with the next turn", async () => {
    const s = "ses_adapter_abort";
    await prompt(s, "msg_501", "ABORT-1 long task");
    status(s, "busy");
    stepStarted(s, "msg_502", "msg_501");
    await prompt(s, "msg_503", "ABORT-2 queued, then the user aborts");
    stepFinished(s, "msg_502", "msg_501", { error: { name: "MessageAbortedError" } });
    status(s, "idle");
    await expectStates(s, { msg_501: "interrupted" });
    // The user prompts again at once, before the idle check: the queued turn was stopped, not answered by this reply.
    await prompt(s, "msg_504", "ABORT-3 next");
    status(s, "busy");
    stepFinished(s, "msg_505", "msg_504", { finish: "stop" });
    status(s, "idle");
    await expectStates(s, { msg_501: "interrupted", msg_503: "interrupted", msg_504: "completed" });
  });

  it("admits a session created moments ago without waiting for its claim, and raises a refusal at chat.params", async () => {
    const project = { id: "project-adapter-test", worktree: "/tmp/adapter-test", directory: "/tmp/adapter-test" };
    /** Another live OpenCode process claims the session first (this one's pid, another holder: never dead). */
    const heldElsewhere = async (hostSessionId: string) => {
      const opened = await memory.openSession({
        host: HOST,
        hostSessionId,
        projectId: projectScopeId(project),
      });
      const claim = await memory.host.claimLease({
        sessionId: opened.sessionId,
        holder: leaseHolderName(),
        ttlMs: 60_000,
      });
      expect(claim.acquired).toBe(true);
    };
    const request = (session: string, id: string) =>
      adapter.transform([
        {
          info: { id, sessionID: session, role: "user", time: { created: clock } },
          parts: [{ id: `prt_${id}`, messageID: id, sessionID: session, type: "text", text: "hello" }],
        },
      ] as never);

    // Created here 1 s ago (as `opencode run` prompts its new session): chat.message neither claims nor refuses; the
    // claim at the head of the admission is refused, so the turn runs without memory and its chat.params refuses.
    const fresh = "ses_adapter_claim_later";
    adapter.onEvent({ type: "session.created", properties: { info: { id: fresh } } });
    await heldElsewhere(fresh);
    time.advance(1_000);
    await expect(prompt(fresh, "msg_801", "CLAIM-LATER-1")).resolves.toBeUndefined();
    await request(fresh, "msg_801");
    // What OpenCode's side decides from the checks sent back with the request (plugin/transport/remote-hooks.ts).
    const refusal = checkRequestParams(adapter.requestChecks(fresh) as RequestChecks, PARAMS_MODEL);
    expect(refusal?.replace(/\u2060/g, "")).toMatch(/is being driven by another OpenCode process/);
    // What the plugin's thread sends back with the request, for OpenCode's thread to raise (plugin/request/checks.ts).
    expect(adapter.requestChecks(fresh)?.pendingError).toMatch(/being driven by another OpenCode process/);
    expect(await turnStates(fresh, ["msg_801"])).toEqual({});
    // Its next prompt claims before chat.message returns, as for any session, and is refused there.
    await expect(prompt(fresh, "msg_802", "CLAIM-LATER-2")).rejects.toThrow(/another OpenCode process/);

    // Created here longer ago than that (a session a person picks later): the claim is made, and refused, at once.
    const older = "ses_adapter_claim_now";
    adapter.onEvent({ type: "session.created", properties: { info: { id: older } } });
    await heldElsewhere(older);
    time.advance(11_000);
    await expect(prompt(older, "msg_811", "CLAIM-NOW-1")).rejects.toThrow(/another OpenCode process/);

    // Free, and created moments ago: the prompt is admitted with its claim made after chat.message returned.
    const free = "ses_adapter_claim_free";
    adapter.onEvent({ type: "session.created", properties: { info: { id: free } } });
    await prompt(free, "msg_821", "CLAIM-FREE-1");
    await request(free, "msg_821");
    expect(checkRequestParams(adapter.requestChecks(free) as RequestChecks, PARAMS_MODEL)).toBeUndefined();
    expect(await leaseHeld(free)).toBe(true);
    stepFinished(free, "msg_822", "msg_821", { finish: "stop" });
    status(free, "idle");
    await expectStates(free, { msg_821: "completed" });
  });
});
