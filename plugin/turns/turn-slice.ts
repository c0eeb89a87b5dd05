import type { Turn } from "../../src/memory/index.js";
import type { Timer } from "../base/clock.js";
import type { OpenTurn, SessionState, TurnStep } from "./session-state.js";

/**
 * A session's turns slice (plugin/turns/session-state.ts): written here alone, as named transitions; every other part
 * reads the fields as readonly and asks for a transition. The decisions (which turn, what an idle ends) stay in
 * plugin/turns/tracking.ts, carried out by outcomes.ts and admission.ts.
 */
interface MutableTurn {
  readonly turnId: string;
  admitted: boolean;
  finished: boolean;
  ending: OpenTurn["ending"];
  readonly assistantMessages: Set<string>;
  lastStep: TurnStep | undefined;
  admission: Promise<void> | undefined;
}

interface TurnsFields {
  readonly turns: Map<string, MutableTurn>;
  readonly turnOfMessage: Map<string, string>;
  readonly pinned: Map<string, Turn>;
  readonly seqs: Map<string, number>;
  seqsLoaded: boolean;
  readonly ingested: Set<string>;
  admitting: number;
  reconciled: boolean;
  busy: boolean;
  idleSince: number | undefined;
  idleCheck: { timer: Timer; turnIds: Set<string> } | undefined;
}

const fields = (state: SessionState): TurnsFields => state as unknown as TurnsFields;
const mutable = (turn: OpenTurn): MutableTurn => turn as MutableTurn;

/** A turn this process tracks, not yet admitted in memory. */
function newOpenTurn(turnId: string): MutableTurn {
  return {
    turnId,
    admitted: false,
    finished: false,
    ending: undefined,
    assistantMessages: new Set(),
    lastStep: undefined,
    admission: undefined,
  };
}

/** A prompt's turn (plugin/turns/admission.ts): the one known for `messageId`, else a new one; the session is busy. */
export function openPromptTurn(state: SessionState, messageId: string): OpenTurn {
  const slice = fields(state);
  const turn = slice.turns.get(messageId) ?? newOpenTurn(messageId);
  slice.turns.set(messageId, turn);
  slice.turnOfMessage.set(messageId, messageId);
  slice.busy = true;
  return turn;
}

/** A turn OpenCode opened by itself from `messageId` (a continuation, plugin/turns/tracking.ts `turnForAssistant`). */
export function openContinuation(state: SessionState, messageId: string): OpenTurn {
  const turn = newOpenTurn(messageId);
  fields(state).turns.set(messageId, turn);
  fields(state).turnOfMessage.set(messageId, messageId);
  return turn;
}

/** User message `messageId` belongs to turn `turnId`. */
export function fileMessage(state: SessionState, messageId: string, turnId: string): void {
  fields(state).turnOfMessage.set(messageId, turnId);
}

/** A turn never admitted in memory goes, as if this process had never seen its prompt. */
export function forgetUnadmitted(state: SessionState, turn: OpenTurn): void {
  const slice = fields(state);
  if (turn.admitted || slice.turns.get(turn.turnId) !== turn) return;
  slice.turns.delete(turn.turnId);
  slice.turnOfMessage.delete(turn.turnId);
}

/** The queued part of the turn's admission (plugin/turns/admission.ts). */
export function setAdmission(turn: OpenTurn, admission: Promise<void>): void {
  mutable(turn).admission = admission;
}

/** Turn `turnId` is admitted in memory, pinned at `pinned`; `turn` is what this process tracks of it, if anything. */
export function markAdmitted(
  state: SessionState,
  turnId: string,
  pinned: Turn,
  turn: OpenTurn | undefined = state.turns.get(turnId),
): void {
  fields(state).pinned.set(turnId, pinned);
  if (turn) mutable(turn).admitted = true;
}

/** Its outcome is written in memory. */
export function markFinished(turn: OpenTurn): void {
  mutable(turn).finished = true;
}

/** An assistant message seen for the turn, in progress or final. */
export function noteAssistantMessage(turn: OpenTurn, messageId: string): void {
  mutable(turn).assistantMessages.add(messageId);
}

/** The turn's latest step; a terminal final step sets how the turn ends (`outcome`). */
export function noteStep(turn: OpenTurn, step: TurnStep, outcome: OpenTurn["ending"]): void {
  const open = mutable(turn);
  open.lastStep = step;
  if (step.terminal) open.ending = outcome;
}

/** Whether a final assistant message is new here (then it is noted as ingested). */
export function firstIngestion(state: SessionState, messageId: string): boolean {
  const { ingested } = fields(state);
  if (ingested.has(messageId)) return false;
  ingested.add(messageId);
  return true;
}

/** The highest seq of a host message's records, as far as this process knows (merged, never replaced). */
export function noteSeq(state: SessionState, messageId: string, seq: number): void {
  const { seqs } = fields(state);
  seqs.set(messageId, Math.max(seqs.get(messageId) ?? -1, seq));
}

/** The database's seqs are merged in (true), or must be read again (false). */
export function setSeqsLoaded(state: SessionState, loaded: boolean): void {
  fields(state).seqsLoaded = loaded;
}

/** The session's stale turns were repaired (true), or must be looked at again (false). */
export function setReconciled(state: SessionState, reconciled: boolean): void {
  fields(state).reconciled = reconciled;
}

/** Another process drove the session: its records and unfinished turns are read afresh. */
export function drivenElsewhere(state: SessionState): void {
  setSeqsLoaded(state, false);
  setReconciled(state, false);
}

/** An admission began (+1) or ended (-1): the lease is not released meanwhile. */
export function countAdmission(state: SessionState, delta: 1 | -1): void {
  fields(state).admitting += delta;
}

/** OpenCode reports the session busy (or retrying). */
export function markBusy(state: SessionState): void {
  fields(state).busy = true;
  fields(state).idleSince = undefined;
}

/** OpenCode reports the session idle since `now` (its first idle status counts). */
export function markIdle(state: SessionState, now: number): void {
  fields(state).idleSince ??= now;
}

/** The idle ended the session's turns: it is not busy any more. */
export function markNotBusy(state: SessionState): void {
  fields(state).busy = false;
}

/** The pending look at turns an idle could not decide (plugin/turns/outcomes.ts), or none. */
export function setIdleCheck(state: SessionState, check: { timer: Timer; turnIds: Set<string> } | undefined): void {
  fields(state).idleCheck = check;
}

/** More turns for the pending idle check to look at (it reads the same set when it runs). */
export function addToIdleCheck(state: SessionState, turns: readonly OpenTurn[]): void {
  const pending = fields(state).idleCheck;
  for (const turn of turns) pending?.turnIds.add(turn.turnId);
}

/** A rewind (plugin/turns/history-rewind.ts): the removed turns go, and every seq of the old generation. */
export function rewindTurns(state: SessionState, gone: ReadonlySet<string>): void {
  const slice = fields(state);
  slice.seqs.clear();
  slice.seqsLoaded = false;
  for (const id of gone) {
    slice.turns.delete(id);
    slice.turnOfMessage.delete(id);
    slice.pinned.delete(id);
    slice.ingested.delete(id);
  }
}
