import type { Memory, Session } from "../../src/memory/index.js";
import type { Clock, Timer } from "../base/clock.js";
import type { Diagnostics } from "../base/diagnostics.js";
import type { HostMessage } from "../opencode/messages.js";
import { holderIsDead } from "./lease.js";
import { type RepairDeps, repairStaleTurns } from "./reconcile.js";
import type { SessionJobs } from "./session-jobs.js";
import type { SessionMemory } from "./session-memory.js";
import type { SessionState } from "./session-state.js";
import type { HostSessions } from "./sessions.js";
import { setReconciled } from "./turn-slice.js";

/**
 * How long after the process opened the pass over the project's stuck turns runs (see `scheduleProjectPass`): after
 * the start-up work of a process that lives on, and never within a typical `opencode run` (2-5 s), which must not pay
 * for it (issue 9 item 2).
 */
export const PROJECT_RECONCILE_AFTER_MS = 5_000;

export interface StaleTurnsDeps {
  readonly memory: Memory;
  readonly projectId: string;
  readonly sessions: HostSessions;
  readonly jobs: SessionJobs;
  readonly records: SessionMemory;
  readonly transcript: (hostSessionId: string) => Promise<HostMessage[] | undefined>;
  readonly clock: Clock;
  readonly diagnostics: Diagnostics;
  readonly closed: () => boolean;
}

/**
 * Turns left active by a process that stopped (killed mid-turn, or closed right after the answer before its ingestion
 * ran) are repaired from OpenCode's transcript (plugin/turns/reconcile.ts): the finished messages optchat lacks are
 * stored, and the turn gets its real outcome. At a session's first admission here, and once for the whole project a
 * while after the process opened.
 */
export class StaleTurns {
  private projectPass: Timer | undefined;

  constructor(private readonly deps: StaleTurnsDeps) {}

  /** First sight of a session in this process, with its lease held. Never throws: the next admission tries again. */
  async reconcile(state: SessionState, session: Session): Promise<void> {
    if (state.reconciled) return;
    try {
      const stale = (await this.deps.memory.host.activeTurns(session.sessionId)).filter(
        (t) => !state.turns.has(t.turnId),
      );
      await repairStaleTurns(this.repairDeps(state, session), session, stale, "prompt");
      setReconciled(state, true);
    } catch (error) {
      // The new turn is admitted anyway.
      await this.deps.diagnostics.problem("reconcile", state.hostSessionId, error);
    }
  }

  /** Schedules the pass over the project's stuck turns (see `reconcileProject`); never waited for. */
  scheduleProjectPass(afterMs = PROJECT_RECONCILE_AFTER_MS): void {
    this.projectPass = this.deps.clock.setTimeout(() => {
      if (!this.deps.closed())
        this.reconcileProject().catch((error) => this.deps.diagnostics.problem("reconcile", undefined, error));
    }, afterMs);
  }

  stop(): void {
    this.deps.clock.clear(this.projectPass);
  }

  /**
   * A turn another process left active with its reply in OpenCode's transcript is repaired now, so the project's other
   * sessions see it once it is published, without waiting for its own session to be prompted again.
   */
  private async reconcileProject(): Promise<void> {
    const { memory, projectId, sessions, jobs, clock } = this.deps;
    const stuck = await memory.host.stuckTurns({ projectId, holderGone: true });
    const gone = stuck.filter((t) => t.leaseExpiredAt.getTime() < clock.now() || holderIsDead(t.holder));
    for (const hostSessionId of new Set(gone.map((t) => t.hostSessionId))) {
      if (this.deps.closed()) return;
      const state = sessions.state(hostSessionId);
      // A session this process drives is reconciled by its own admission.
      if (state.turns.size > 0 || state.reconciled) continue;
      jobs.enqueue(state, "reconcile", async (session) => {
        const stale = (await memory.host.activeTurns(session.sessionId)).filter((t) => !state.turns.has(t.turnId));
        await repairStaleTurns(this.repairDeps(state, session), session, stale, "start");
      });
    }
  }

  /** What repairing `state`'s stale turns needs (plugin/turns/reconcile.ts). */
  private repairDeps(state: SessionState, session: Session): RepairDeps {
    const { memory, records, diagnostics } = this.deps;
    return {
      memory,
      transcript: () => this.deps.transcript(state.hostSessionId),
      ingest: (turnId, messageId, at, drafts) => records.ingestDrafts(state, session, turnId, messageId, at, drafts),
      log: (message) => diagnostics.log("info", message),
    };
  }
}
