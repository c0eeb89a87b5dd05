/**
 * The turn's memory, read before its first request's budget is known (issue 9 item 2). OpenCode 1.18.33 spends
 * 0.7-1.1 s between `chat.message` and the first request's transform (`opencode run`, measured); what an assembly reads
 * (views, node texts, the previous exchange; src/memory `prepareContext`) is read then, and the transform only fits it
 * to the budget. The prepared reads are the turn's: the snapshot is pinned at admission and nodes never change, so the
 * request gets exactly what a fresh assembly would give it (tests/integration/context-assembly.test.ts).
 */
import { isOptchatError, type Memory, type PreparedContext } from "../../src/memory/index.js";
import type { ResolvedPluginConfig } from "../base/config.js";

export interface PreparedTurn {
  readonly turnId: string;
  readonly context: Promise<PreparedContext>;
}

/** The readiness and previous-exchange settings every assembly of the plugin uses (a preparation must match them). */
export function assemblySettings(config: ResolvedPluginConfig): {
  previousExchange: boolean;
  readiness: "strict" | "partial";
  waitMs: number;
} {
  return {
    previousExchange: config.plugin.previousExchange && config.plugin.mode === "replace",
    readiness: config.plugin.readiness,
    waitMs: config.plugin.readinessWaitMs,
  };
}

/** Starts the turn's preparation; nothing waits for it but the turn's requests. */
export function prepareTurn(
  memory: Memory,
  config: ResolvedPluginConfig,
  ctx: { sessionId: string; turnId: string },
): PreparedTurn {
  const context = memory.prepareContext(ctx, assemblySettings(config));
  context.catch(() => {});
  return { turnId: ctx.turnId, context };
}

/**
 * The preparation for `turnId`, when there is one. Memory that is not ready (strict readiness, after the wait that
 * began at admission) is thrown as the assembly would throw it; any other failure leaves the request to a fresh
 * assembly.
 */
export async function preparedFor(
  prepared: PreparedTurn | undefined,
  turnId: string,
): Promise<PreparedContext | undefined> {
  if (prepared?.turnId !== turnId) return undefined;
  try {
    return await prepared.context;
  } catch (error) {
    if (isOptchatError(error, "MEMORY_NOT_READY")) throw error;
    return undefined;
  }
}
