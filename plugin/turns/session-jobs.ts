import { isOptchatError, type Session } from "../../src/memory/index.js";
import type { Clock } from "../base/clock.js";
import { type Diagnostics, describe } from "../base/diagnostics.js";
import type { SessionState } from "./session-state.js";

/** Waits before the retries of a failed session job (see `SessionJobs.enqueue`): about 30 s in all. */
export const JOB_RETRY_DELAYS_MS = [500, 1_000, 2_000, 4_000, 8_000, 15_000] as const;

/**
 * Each session's serial work (ingestion, outcomes, rewinds, lease releases), in the order the host produced it:
 * OpenCode does not wait for the event hook, so the jobs of one session must not overtake each other.
 */
export class SessionJobs {
  private readonly closing = new AbortController();

  constructor(
    /** The session in memory, opened on first need; undefined when it cannot be (the problem is already recorded). */
    private readonly open: (state: SessionState) => Promise<Session | undefined>,
    private readonly clock: Clock,
    private readonly diagnostics: Diagnostics,
  ) {}

  /**
   * Appends a job to the session's serial work. Every job is idempotent (ingestion by finalization key, outcomes keep
   * their first value, admission and lease release are repeatable), so one that fails on anything but an optchat error
   * other than DATABASE_UNAVAILABLE (the database restarting, a dropped connection) runs again after
   * JOB_RETRY_DELAYS_MS: a short outage loses no record and no outcome. Later jobs of the session wait meanwhile, in
   * order. Returns the job's completion (it never rejects).
   */
  enqueue(state: SessionState, operation: string, work: (session: Session) => Promise<void>): Promise<void> {
    return state.work.run(async () => {
      for (let attempt = 0; ; attempt++) {
        try {
          const session = state.session ?? (await this.open(state));
          if (!session) throw new Error("the session could not be opened in memory (see the previous problem)");
          await work(session);
          return;
        } catch (error) {
          const wait = JOB_RETRY_DELAYS_MS[attempt];
          // DATABASE_UNAVAILABLE is the outage itself (the service retried it for OPTCHAT_DATABASE_RETRY_MS): wait on.
          const final = isOptchatError(error) && !isOptchatError(error, "DATABASE_UNAVAILABLE");
          if (wait === undefined || this.closing.signal.aborted || final) {
            await this.diagnostics.problem(operation, state.hostSessionId, error);
            return;
          }
          if (attempt === 0)
            this.diagnostics.log("warn", `optchat ${operation} (${state.hostSessionId}): ${describe(error)}; retrying`);
          // Cut short by close(), which waits for the queue: the next pass records the failure and stops.
          await this.clock.sleep(wait, this.closing.signal);
        }
      }
    });
  }

  /**
   * Appends a job that is not retried and does not need the session opened first (an admission's queued part,
   * plugin/turns/admission.ts): its result or failure is the caller's.
   */
  runOnce<T>(state: SessionState, work: () => Promise<T>): Promise<T> {
    return state.work.run(work);
  }

  /** From now on a failing job records its problem at once instead of waiting to retry (the process is closing). */
  stopRetrying(): void {
    this.closing.abort();
  }
}
