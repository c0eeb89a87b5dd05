import type { BudgetSettings } from "../compactor/budget.js";
import type { Session } from "../store/sessions.js";
import { readTodaySpend } from "./cost.js";
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
  options: { workerInThisProcess?: boolean; budget?: BudgetSettings } = {},
): Promise<Record<string, unknown>> {
  const [health, injections, problems, spend] = await Promise.all([
    memory.host.sessionHealth(session.sessionId),
    memory.host.listInjections(session.sessionId, 1),
    memory.host.listProblems(session.host, session.hostSessionId, 3),
    options.budget ? readTodaySpend(memory.pool, options.budget, { scopeId: session.scopeId }) : undefined,
  ]);
  const pending = health.leaves > health.builtLeaves || health.unpublishedTurns > 0;
  const verdict =
    health.failingNodes > 0 || health.failingPublications > 0
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
      pendingLeaves: health.leaves - health.builtLeaves,
      verdict: verdict.startsWith("failing") ? verdict : (degraded ?? verdict),
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
