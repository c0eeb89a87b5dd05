import type { BudgetSettings } from "../compactor/budget.js";
import { sessionVerdict } from "../core/health.js";
import type { Session } from "../store/sessions.js";
import { STUCK_TURN_ADVICE } from "../store/status.js";
import { readSessionSpendToday, readTodaySpend, spendText } from "./cost.js";
import { readCompactorHealth } from "./health.js";
import type { Memory } from "./service.js";

/**
 * What optchat holds and does for one session, from the database: the session's verdict (src/core/health.ts
 * sessionVerdict) and the compactor's over the whole database, health (records, summaries, publications, failures,
 * lease, compactor backlog, workers), the last injection and recent adapter problems. "Working" and "silently dead"
 * must look different (seed 004): a verdict of `stalled` or `failing` says what to do. Text form: inspect-text.ts.
 */
export async function inspectStoredSession(
  memory: Memory,
  session: Session,
  options: {
    budget?: BudgetSettings;
    /**
     * True when the holder of a lease that has not expired yet is known to be gone (the plugin can tell for holders
     * on its own machine): its active turns are stuck too, without waiting for the lease to expire.
     */
    holderIsGone?: (holder: string) => boolean;
    /** What the asker knows of the plugin's embedded worker: advice then never asks to turn on what is on. */
    embeddedWorker?: "on" | "off";
  } = {},
): Promise<Record<string, unknown>> {
  const [health, injections, problems, spend, own] = await Promise.all([
    memory.host.sessionHealth(session.sessionId),
    memory.host.listInjections(session.sessionId, 1),
    memory.host.listProblems(session.host, session.hostSessionId, 3),
    options.budget ? readTodaySpend(memory.pool, options.budget, { scopeId: session.scopeId }) : undefined,
    // This session's own part of today's spend (issue 39), priced as the caps price it.
    options.budget
      ? readSessionSpendToday(memory.pool, options.budget.prices, { sessionId: session.sessionId, limit: 1 })
      : undefined,
  ]);
  const compactor = await readCompactorHealth(memory.pool, {
    ...(options.embeddedWorker ? { embeddedWorker: options.embeddedWorker } : {}),
    budgetCapReached: spend?.capReached ?? null,
  });
  const stuck = await stuckTurnsOf(memory, session, health, options.holderIsGone);
  const verdict = sessionVerdict({
    stuckTurnIds: stuck.map((t) => t.turnId),
    stuckHolder: stuck[0]?.holder ?? null,
    stuckAdvice: STUCK_TURN_ADVICE,
    failingNodes: health.failingNodes,
    failingPublications: health.failingPublications,
    pending: health.leaves > health.builtLeaves || health.unpublishedTurns > 0,
    compactor: compactor.verdict,
    budgetCapReached: spend?.capReached ?? null,
  });
  const last = injections[0];
  return {
    verdict,
    compactor,
    // Today's compactor spend and, when a cap is reached, what that means for the summaries (issue 13 item 5).
    ...(spend ? { compactorToday: spend } : {}),
    ...(own ? { compactorThisSessionToday: own[0] ? spendText(own[0]) : "$0.0000 (no compactor call today)" } : {}),
    session: {
      id: session.sessionId,
      host: session.host,
      hostSessionId: session.hostSessionId,
      scope: session.scopeId,
      generation: session.currentGeneration,
      parent: session.parentSessionId,
    },
    health: {
      ...health,
      stuckTurns: stuck,
      pendingLeaves: health.leaves - health.builtLeaves,
      verdict,
    },
    lastInjection: last ? injectionShown(last) : null,
    recentProblems: problems.map((p) => ({
      at: p.createdAt.toISOString(),
      operation: p.operation,
      code: p.code,
      message: p.message,
    })),
  };
}

type SessionHealth = Awaited<ReturnType<Memory["host"]["sessionHealth"]>>;

/** An unexpired lease whose holder is known to be gone leaves its active turns as stuck as an expired one does. */
async function stuckTurnsOf(
  memory: Memory,
  session: Session,
  health: SessionHealth,
  holderIsGone: ((holder: string) => boolean) | undefined,
): Promise<SessionHealth["stuckTurns"]> {
  const gone =
    health.stuckTurns.length === 0 &&
    health.turns.active > 0 &&
    health.lease?.live &&
    holderIsGone?.(health.lease.holder);
  return gone ? await memory.host.stuckTurns({ sessionId: session.sessionId, holderGone: true }) : health.stuckTurns;
}

/** The session's last injection as inspect shows it. */
function injectionShown(last: Awaited<ReturnType<Memory["host"]["listInjections"]>>[number]): Record<string, unknown> {
  return {
    at: last.createdAt.toISOString(),
    status: last.status,
    turn: last.turnId,
    query: last.query,
    error: last.error,
    ...last.detail,
  };
}
