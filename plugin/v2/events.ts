/**
 * V2's bus events (`ctx.event.subscribe()`, an async iterable) onto records: every finished text
 * (`session.text.ended`), tool call (`session.tool.called`, named by `session.tool.input.started`) and tool result
 * (`session.tool.success|failed`) of a session with an admitted turn becomes a record, in the session's queue;
 * `session.execution.succeeded|failed` ends the turn with its outcome.
 */
import type { v2Records } from "./records.js";
import type { SessionEntry, V2Runtime } from "./runtime.js";
import type { V2Context, V2Event } from "./v2-api.js";

/** Follows the bus for the plugin's life; a failing subscription is reported, never thrown. */
export function followEvents(ctx: V2Context, runtime: V2Runtime, records: ReturnType<typeof v2Records>): void {
  void (async () => {
    for await (const event of ctx.event.subscribe()) {
      const sessionId = event.data?.sessionID;
      if (typeof sessionId !== "string") continue;
      const entry = runtime.known(sessionId);
      if (entry?.turn) handleEvent(runtime, records, entry, event);
    }
  })().catch((error) => runtime.report("events", error));
}

function handleEvent(
  runtime: V2Runtime,
  records: ReturnType<typeof v2Records>,
  entry: SessionEntry,
  event: V2Event,
): void {
  const turn = entry.turn;
  if (!turn) return;
  if (event.type === "session.execution.succeeded" || event.type === "session.execution.failed") {
    const outcome = event.type === "session.execution.succeeded" ? "completed" : "failed";
    void runtime.enqueue(entry, event.type, async () => {
      await (await runtime.memory()).finishTurn({ sessionId: entry.sessionId, turnId: turn.turnId }, outcome);
    });
    return;
  }
  const record = records.fromEvent(entry.sessionId, turn.turnId, event);
  if (record) void runtime.enqueue(entry, event.type, async () => (await runtime.memory()).ingest(record));
}
