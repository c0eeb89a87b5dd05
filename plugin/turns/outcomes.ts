import type { Memory, Session } from "../../src/memory/index.js";
import type { Clock } from "../base/clock.js";
import type { Diagnostics } from "../base/diagnostics.js";
import { assistantRecordDrafts, type HostMessageInfo, stepOutcome } from "../opencode/messages.js";
import type { CompactorHandle } from "./compactor-handle.js";
import type { LeaseKeeper } from "./lease.js";
import type { SessionJobs } from "./session-jobs.js";
import type { SessionMemory } from "./session-memory.js";
import { byTurnId, type OpenTurn, type SessionState } from "./session-state.js";
import {
  decideIdle,
  IDLE_GRACE_MS,
  idleCheckWait,
  type TurnOutcome,
  turnForAssistant,
  turnsEndedBy,
} from "./tracking.js";
import {
  addToIdleCheck,
  firstIngestion,
  markBusy,
  markFinished,
  markIdle,
  markNotBusy,
  noteAssistantMessage,
  noteStep,
  setIdleCheck,
} from "./turn-slice.js";

export interface TurnOutcomesDeps {
  readonly memory: Memory;
  readonly jobs: SessionJobs;
  readonly lease: LeaseKeeper;
  readonly records: SessionMemory;
  readonly clock: Clock;
  readonly diagnostics: Diagnostics;
  readonly worker: () => CompactorHandle | undefined;
  readonly closed: () => boolean;
}

/**
 * Carries out the turn state machine's decisions (plugin/turns/tracking.ts) as the session's serial jobs: a final
 * assistant step is stored and, when terminal, ends its turn; an idle ends stopped turns and releases the lease; turns
 * an idle left undecided are looked at again after IDLE_GRACE_MS of idleness.
 */
export class TurnOutcomes {
  constructor(private readonly deps: TurnOutcomesDeps) {}

  /** `message.updated` of an assistant message of a session this process drives. */
  onAssistant(state: SessionState, info: HostMessageInfo): void {
    const turnId = turnForAssistant(state, info);
    if (!turnId) return;
    const turn = state.turns.get(turnId);
    if (!turn) return;
    noteAssistantMessage(turn, info.id);
    const step = stepOutcome(info);
    if (!step.final) {
      noteStep(turn, { messageId: info.id, final: false, terminal: false }, undefined);
      return;
    }
    if (!firstIngestion(state, info.id)) return;
    noteStep(
      turn,
      { messageId: info.id, final: true, terminal: step.terminal },
      step.terminal ? step.outcome : undefined,
    );
    const { records, diagnostics } = this.deps;
    const parts = records.partsOf(info.id);
    this.deps.jobs.enqueue(state, "ingest", async (session) => {
      await records.pinnedTurn(state, session, turnId);
      const started = performance.now();
      const drafts = assistantRecordDrafts(info, parts);
      await records.ingestDrafts(state, session, turnId, info.id, info.time?.completed, drafts);
      diagnostics.recordTiming("ingest", started, { records: drafts.length });
      records.dropParts(info.id);
      if (step.terminal) await this.finish(state, session, turnId, step.outcome);
    });
  }

  /** `session.status` busy (or retrying) of a session this process drives: the next idle decides its turns. */
  onBusy(state: SessionState): void {
    markBusy(state);
  }

  /** `session.status` idle (or `session.idle`) of a session this process drives. */
  onIdle(state: SessionState): void {
    markIdle(state, this.deps.clock.now());
    this.deps.worker()?.onSessionIdle(() => state.idleSince !== undefined && !this.deps.closed());
    const decision = decideIdle(state);
    if (decision.undecided.length > 0) this.scheduleIdleCheck(state, decision.undecided);
    if (!decision.ending) return;
    const { turnIds, outcome } = decision.ending;
    const admitted = state.turns.size;
    this.deps.jobs.enqueue(state, "idle", async (session) => {
      for (const turnId of turnIds) {
        const turn = state.turns.get(turnId);
        if (!turn || turn.finished || turn.ending !== undefined) continue;
        await this.finish(state, session, turnId, outcome);
      }
      if (state.turns.size === admitted) {
        state.request.clearError();
        markNotBusy(state);
      }
      await this.deps.lease.release(state);
    });
  }

  /**
   * Turns an idle could not decide end once OpenCode has kept the session idle for IDLE_GRACE_MS: it will not go on
   * with them (a step that never completes, a queued prompt dropped by an abort, a final step whose ingestion failed).
   * They end as interrupted (or with their terminal step's outcome) and the lease is released, so a stuck turn never
   * holds the session against other processes. Any busy status in between hands the decision to the next idle.
   */
  private scheduleIdleCheck(state: SessionState, turns: readonly OpenTurn[]): void {
    if (state.idleCheck) {
      addToIdleCheck(state, turns);
      return;
    }
    const { clock, jobs, lease } = this.deps;
    const turnIds = new Set(turns.map((turn) => turn.turnId));
    const look = (wait: number) => {
      const timer = clock.setTimeout(() => {
        if (this.deps.closed()) return;
        const left = idleCheckWait(state.idleSince, clock.now());
        if (left === undefined) {
          setIdleCheck(state, undefined);
          return;
        }
        if (left > 0) {
          look(left);
          return;
        }
        setIdleCheck(state, undefined);
        jobs.enqueue(state, "idle", async (session) => {
          if (state.idleSince === undefined) return;
          const stuck = [...turnIds].flatMap((id) => state.turns.get(id) ?? []).filter((turn) => !turn.finished);
          await this.endStoppedTurns(state, session, stuck);
          await lease.release(state);
        });
      }, wait);
      setIdleCheck(state, { timer, turnIds });
    };
    look(IDLE_GRACE_MS);
  }

  /** Ends turns OpenCode stopped working on: with their terminal step's outcome when one was seen, else interrupted. */
  async endStoppedTurns(state: SessionState, session: Session, turns: readonly OpenTurn[]): Promise<void> {
    for (const turn of [...turns].sort(byTurnId)) {
      if (turn.finished) continue;
      const outcome = turn.ending ?? "interrupted";
      await this.finishTurns(session, [turn], outcome);
      this.deps.diagnostics.log(
        "info",
        `optchat: turn ${turn.turnId} of ${state.hostSessionId} recorded as ${outcome}: OpenCode went idle without ${turn.ending ? "its last step being stored" : "a final answer"}`,
      );
    }
  }

  /** Ends the turn a reply answered, and the queued turns it answered with it (see `turnsEndedBy`). */
  private async finish(state: SessionState, session: Session, turnId: string, outcome: TurnOutcome): Promise<void> {
    await this.finishTurns(session, turnsEndedBy(state, turnId), outcome);
  }

  /**
   * Records the outcome of each turn. One failure does not stop the others; a turn whose outcome could not be written
   * stays open here, and the first failure is thrown once all were tried.
   */
  private async finishTurns(session: Session, turns: readonly OpenTurn[], outcome: TurnOutcome): Promise<void> {
    let failure: unknown;
    for (const turn of turns) {
      try {
        // A continuation turn that never reached a request or a tool has no row: nothing to record.
        if (turn.admitted)
          await this.deps.memory.finishTurn({ sessionId: session.sessionId, turnId: turn.turnId }, outcome);
        markFinished(turn);
      } catch (error) {
        failure ??= error;
      }
    }
    // After trying every turn: the job that called this runs again (see `SessionJobs.enqueue`) for those still open.
    if (failure !== undefined) throw failure;
  }
}
