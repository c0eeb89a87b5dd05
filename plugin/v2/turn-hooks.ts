/**
 * The turn's two session hooks. `prompt` (awaited by V2 before the first request): the session opened in memory, the
 * turn admitted (turn id = V2's user message id, a turn still active is ended as interrupted), the user record
 * ingested. `context` (every step): the memory (shared and own blocks) leads the request as one user message, built
 * once per turn and reused byte for byte by its later steps; no cache mark is added, so V2's four stay where they were.
 */
import { type AssembledContext, estimateTokens } from "../../src/memory/index.js";
import { MEMORY_HEAD } from "../request/memory-message.js";
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
      entry.memoryText = undefined;
      await memory.ingest(records.user(entry.sessionId, input));
    } catch (error) {
      runtime.report("prompt", error);
    }
  });

  ctx.session.hook("context", async (input: V2ContextInput) => {
    try {
      runtime.noteModel(input.model);
      const entry = runtime.known(input.sessionID);
      if (!entry?.turn) return;
      const text = await memoryTextOf(runtime, entry, input);
      if (text === "") return;
      input.messages.unshift({ role: "user", content: [{ type: "text", text }] });
    } catch (error) {
      runtime.report("context", error);
    }
  });
}

/** The turn's memory message: assembled at the turn's first step, the same text at its later ones. */
async function memoryTextOf(runtime: V2Runtime, entry: SessionEntry, input: V2ContextInput): Promise<string> {
  const turn = entry.turn;
  if (!turn) return "";
  if (entry.memoryText?.turnId === turn.turnId) return entry.memoryText.text;
  const assembled = await (await runtime.memory()).assembleContext(
    { sessionId: entry.sessionId, turnId: turn.turnId },
    {
      windowTokens: await runtime.windowTokens(input.model),
      instructionsTokens: estimateTokens(JSON.stringify(input.system) + JSON.stringify(input.tools)),
      activeTokens: estimateTokens(JSON.stringify(input.messages)),
      outputTokens: input.options?.maxTokens ?? 4_000,
      reserveTokens: RESERVE_TOKENS,
      readiness: "partial",
      // As long as V1 waits (OPTCHAT_READINESS_WAIT_MS), then on with what is ready: V2 has no refusal path.
      waitMs: runtime.config.plugin.readinessWaitMs,
    },
  );
  entry.memoryText = { turnId: turn.turnId, text: memoryMessageText(assembled) };
  return entry.memoryText.text;
}

function memoryMessageText(assembled: AssembledContext): string {
  const blocks = assembled.blocks.filter((block) => block.text.length > 0);
  if (blocks.length === 0) return "";
  return [MEMORY_HEAD, ...blocks.map((block) => block.text)].join("\n\n");
}
