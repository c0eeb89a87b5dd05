import type { HostMessageInfo } from "../opencode/messages.js";
import { byTurnId, inFlight, type OpenTurn, type SessionState } from "./session-state.js";
import { fileMessage, openContinuation } from "./turn-slice.js";

/**
 * The turn state machine of a session in this process, as decisions over its `SessionState` (no I/O, no clock):
 * which turn an assistant message belongs to, what an idle ends and what it leaves undecided, which turns one reply
 * finishes. plugin/turns/outcomes.ts carries the decisions out (writes outcomes, schedules the idle check); the turns
 * slice changes only through plugin/turns/turn-slice.ts.
 */

/**
 * How long a session must stay idle before turns its idle left undecided are ended (see `idleCheckWait`). OpenCode
 * 1.18.33 sends the final message a few ms after the first idle on error paths, and goes busy again at once when a
 * queued prompt follows: seconds are ample, and a stuck turn holds the lease no longer than this.
 */
export const IDLE_GRACE_MS = 5_000;

export type TurnOutcome = "completed" | "interrupted" | "failed";

/**
 * The turn an assistant message belongs to: its parent user message's turn; otherwise (a harness continuation after
 * native compaction) the session's latest turn while the session is still busy with it. A continuation after the
 * latest turn ended opens a turn of its own in `state` (admitted later by its ingestion job), so nothing is written
 * into an already published turn.
 */
export function turnForAssistant(state: SessionState, info: HostMessageInfo): string | undefined {
  if (info.parentID) {
    const known = state.turnOfMessage.get(info.parentID);
    if (known) return known;
  }
  if (!state.busy) return undefined;
  const latest = [...state.turns.values()].at(-1);
  if (!latest) return undefined;
  if (!latest.finished && latest.ending === undefined) {
    if (info.parentID) fileMessage(state, info.parentID, latest.turnId);
    return latest.turnId;
  }
  if (!info.parentID) return undefined;
  // The turn ended but OpenCode goes on from a message of its own (the "Continue…" after a native compaction).
  return openContinuation(state, info.parentID).turnId;
}

export interface IdleDecision {
  /** Turns to look at again once the session stayed idle for IDLE_GRACE_MS (see `idleCheckWait`). */
  readonly undecided: readonly OpenTurn[];
  /**
   * What the idle does now, undefined while a step is still in flight: ends `turnIds` with `outcome`, then (when no
   * turn was admitted meanwhile) marks the session not busy and releases its lease.
   */
  readonly ending: { readonly turnIds: readonly string[]; readonly outcome: TurnOutcome } | undefined;
}

/**
 * What an idle status decides, on the turns open when the event arrived: a stale idle (OpenCode sends two per turn,
 * and the queue may run them late) must never end a turn admitted after it (seen under CI load: a completed turn read
 * as interrupted). A turn with a terminal step is finished by that step's own job, queued before the idle's.
 * Undecided: a step still in flight (OpenCode 1.18.33 emits idle just before the final message on error paths) and a
 * turn with no step yet (a queued prompt: the reply to a later one may answer it). Stopped: a turn that had steps and
 * no final answer (e.g. a rejected permission: no error, no further step); our own refusal in chat.params ends with an
 * errored step, so such a turn is already failed, and a pending refusal makes the others failed too.
 */
export function decideIdle(state: SessionState): IdleDecision {
  const open = [...state.turns.values()].filter((t) => !t.finished);
  const undecided = open.filter((t) => t.ending === undefined && (t.assistantMessages.size === 0 || inFlight(t)));
  if (open.some(inFlight)) return { undecided, ending: undefined };
  const turnIds = open.filter((t) => t.ending === undefined && t.assistantMessages.size > 0).map((t) => t.turnId);
  return { undecided, ending: { turnIds, outcome: state.request.pendingError ? "failed" : "interrupted" } };
}

/**
 * When the look at undecided turns is due: `undefined` when the session went busy again (the next idle decides),
 * 0 when it has stayed idle for the whole grace, else how much longer to wait.
 */
export function idleCheckWait(idleSince: number | undefined, now: number): number | undefined {
  if (idleSince === undefined) return undefined;
  return Math.max(0, IDLE_GRACE_MS - (now - idleSince));
}

/**
 * The turns a reply to `turnId` finishes: queued prompts answered together (OpenCode 1.18.33 facts §2) get one reply
 * whose parent is the last of them, so every open turn opened by an earlier user message ends with this one.
 * "Earlier" is the host's order: `msg_` ids ascend over time (facts, "IDs ascend"), while the map's insertion order is
 * only the order admissions finished (seen under CI load before admissions were serialized: the third prompt admitted
 * before the second, which then stayed active forever).
 */
export function turnsEndedBy(state: SessionState, turnId: string): OpenTurn[] {
  return [...state.turns.values()].filter((turn) => !turn.finished && turn.turnId <= turnId).sort(byTurnId);
}

/**
 * Turns a prompt to an idle session finds still open here: they were stopped (their idle check may not have run yet)
 * and must not be ended as the new turn's queued predecessors when its reply comes.
 */
export function stoppedBeforePrompt(state: SessionState): OpenTurn[] {
  return state.idleSince !== undefined ? [...state.turns.values()].filter((turn) => !turn.finished) : [];
}

/** The turn a memory tool call runs in: the calling message's turn, else the latest admitted here. */
export function turnOfToolCall(state: SessionState, assistantMessageId: string | undefined): OpenTurn | undefined {
  const turns = [...state.turns.values()];
  const byMessage = assistantMessageId
    ? (turns.find((turn) => turn.assistantMessages.has(assistantMessageId)) ??
      state.turns.get(state.turnOfMessage.get(assistantMessageId) ?? ""))
    : undefined;
  return byMessage ?? turns.at(-1);
}
