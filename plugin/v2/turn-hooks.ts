/**
 * The turn's two session hooks. `prompt` (awaited by V2 before the first request): the session opened in memory, the
 * turn admitted (turn id = V2's user message id, a turn still active is ended as interrupted), the user record
 * ingested. `context` (every step): the memory goes just before the turn's user message (layout.ts: V2's history stays first and
 * in place, the memory is what V2 does not send, each user message led by the same text at every request); no cache
 * mark is added, so V2's four stay where they were.
 */
import { type AssembledContext, estimateTokens } from "../../src/memory/index.js";
import { applyLayout, layoutTurn } from "./layout.js";
import type { v2Records } from "./records.js";
import type { SessionEntry, V2Runtime } from "./runtime.js";
import type { V2Context, V2ContextInput, V2PromptInput } from "./v2-api.js";

const RESERVE_TOKENS = 1_000;

export function registerTurnHooks(ctx: V2Context, runtime: V2Runtime, records: ReturnType<typeof v2Records>): void {
  ctx.session.hook("prompt", async (input: V2PromptInput) => {
    try {
      const memory = await runtime.memory();
      const entry = await runtime.entryOf(input.sessionID);
      await entry.queue;
      if (entry.turn && entry.turn.state === "active") {
        await memory.finishTurn({ sessionId: entry.sessionId, turnId: entry.turn.turnId }, "interrupted");
      }
      entry.turn = await memory.admitTurn({
        sessionId: entry.sessionId,
        turnId: input.messageID,
        query: input.prompt.text,
        awaitRecent: true,
      });
      await memory.ingest(records.user(entry.sessionId, input));
    } catch (error) {
      runtime.report("prompt", error);
    }
  });

  ctx.session.hook("context", async (input: V2ContextInput) => {
    try {
      runtime.noteModel(input.model);
      const entry = runtime.known(input.sessionID);
      const turn = entry?.turn;
      if (!entry || !turn) return;
      if (!entry.layout?.leading.has(turn.turnId)) {
        if (!input.messages.some((m) => m.role === "user" && m.id === turn.turnId)) return;
        entry.layout = layoutTurn(entry.layout, input.messages, turn.turnId, await assemble(runtime, entry, input));
      }
      applyLayout(entry.layout, input.messages);
    } catch (error) {
      runtime.report("context", error);
    }
  });
}

/** The turn's memory, assembled at its first request (V2 sends the session's history itself: no previous exchange). */
async function assemble(runtime: V2Runtime, entry: SessionEntry, input: V2ContextInput): Promise<AssembledContext> {
  const turn = entry.turn as NonNullable<SessionEntry["turn"]>;
  return (await runtime.memory()).assembleContext(
    { sessionId: entry.sessionId, turnId: turn.turnId },
    {
      windowTokens: await runtime.windowTokens(input.model),
      instructionsTokens: estimateTokens(JSON.stringify(input.system) + JSON.stringify(input.tools)),
      activeTokens: estimateTokens(JSON.stringify(input.messages)),
      outputTokens: input.options?.maxTokens ?? 4_000,
      reserveTokens: RESERVE_TOKENS,
      previousExchange: false,
      readiness: "partial",
      // As long as V1 waits (OPTCHAT_READINESS_WAIT_MS), then on with what is ready: V2 has no refusal path.
      waitMs: runtime.config.plugin.readinessWaitMs,
    },
  );
}
