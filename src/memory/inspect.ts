import type { BudgetSettings } from "../compactor/budget.js";
import type { Session } from "../store/sessions.js";
import { STUCK_TURN_ADVICE } from "../store/status.js";
import { readSessionSpendToday, readTodaySpend, spendText } from "./cost.js";
import type { Memory } from "./service.js";

/** A job that could run and has waited this long means no worker is taking jobs. */
const STALLED_AFTER_SECONDS = 60;

/**
 * What optchat holds and does for one session, from the database: health (records, summaries, publications, failures,
 * lease, compactor backlog) with a one-line verdict, the last injection and recent adapter problems. "Working" and
 * "silently dead" must look different (seed 004): a verdict of `stalled` or `failing` says what to do.
 */
export async function inspectStoredSession(
  memory: Memory,
  session: Session,
  options: {
    workerInThisProcess?: boolean;
    budget?: BudgetSettings;
    /**
     * True when the holder of a lease that has not expired yet is known to be gone (the plugin can tell for holders
     * on its own machine): its active turns are stuck too, without waiting for the lease to expire.
     */
    holderIsGone?: (holder: string) => boolean;
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
  const pending = health.leaves > health.builtLeaves || health.unpublishedTurns > 0;
  // An unexpired lease whose holder is known to be gone leaves its active turns as stuck as an expired one does.
  const stuck =
    health.stuckTurns.length === 0 &&
    health.turns.active > 0 &&
    health.lease?.live &&
    options.holderIsGone?.(health.lease.holder)
      ? await memory.host.stuckTurns({ sessionId: session.sessionId, holderGone: true })
      : health.stuckTurns;
  const verdict =
    stuck.length > 0
      ? `stuck: turn ${stuck.map((t) => t.turnId).join(", ")} is still active but no OpenCode process holds the session (last holder ${stuck[0]?.holder}); ${STUCK_TURN_ADVICE}`
      : health.failingNodes > 0 || health.failingPublications > 0
        ? "failing: the compactor keeps failing (see lastNodeError / lastPublicationError and the summarizer settings)"
        : !pending
          ? "up to date"
          : health.oldestWaitingJobSeconds > STALLED_AFTER_SECONDS && !options.workerInThisProcess
            ? `stalled: compactor jobs have waited ${health.oldestWaitingJobSeconds} s for a worker; start \`optchat worker\` or set OPTCHAT_EMBEDDED_WORKER=on`
            : "working: summaries or publications are pending";
  const degraded = spend?.capReached
    ? `degraded: the compactor's budget is spent (${spend.capReached}); new summaries are labelled fallbacks until the next UTC day`
    : undefined;
  const last = injections[0];
  return {
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
      // A stuck turn and a failing compactor say what to do first; a spent budget is said otherwise.
      verdict: verdict.startsWith("failing") || verdict.startsWith("stuck") ? verdict : (degraded ?? verdict),
    },
    lastInjection: last
      ? {
          at: last.createdAt.toISOString(),
          status: last.status,
          turn: last.turnId,
          query: last.query,
          error: last.error,
          ...last.detail,
        }
      : null,
    recentProblems: problems.map((p) => ({
      at: p.createdAt.toISOString(),
      operation: p.operation,
      code: p.code,
      message: p.message,
    })),
  };
}
