import type { Session, Turn } from "../../src/memory/index.js";
import type { Timer } from "../base/clock.js";
import { SerialQueue } from "../base/serial-queue.js";
import { LeaseSlice } from "./lease.js";

/**
 * What the adapter knows of a host session in this process, in slices, each written by one part and read by the
 * others through a view: its requests (`request`, plugin/request/slice.ts), its lease (`lease`, plugin/turns/lease.ts),
 * its serial work (`work`, plugin/turns/session-jobs.ts), its admissions (`admissions`, plugin/turns/admission.ts), and
 * its turns (the rest: the state machine of plugin/turns/tracking.ts, kept by plugin/turns/ alone). One object per
 * session, made by plugin/turns/sessions.ts; every part of plugin/ that works on a session gets it passed in. No
 * promise is kept as a lock: what must not overlap goes through a SerialQueue (plugin/base/serial-queue.ts).
 */
export interface OpenTurn {
  readonly turnId: string;
  /** False for a continuation turn the adapter opened itself until its ingestion job admits it. */
  admitted: boolean;
  finished: boolean;
  /** Set when a terminal step was seen; its ingestion job finishes the turn (an idle before that must not). */
  ending: "completed" | "interrupted" | "failed" | undefined;
  /** Assistant messages seen for the turn, in progress or final. */
  readonly assistantMessages: Set<string>;
  lastStep: { messageId: string; final: boolean; terminal: boolean } | undefined;
  /** The queued part of the turn's admission (plugin/turns/admission.ts `admitCounted`); undefined for a continuation turn. */
  admission: Promise<void> | undefined;
}

/**
 * What the turns' parts may do with a session's request slice: what its requests were built from (the assembly, the
 * cache epoch, the prepared memory, the request's checks). Owned and written by plugin/request/ (slice.ts makes it);
 * the turns' parts only read the request's error and say when their history changed under it.
 */
export interface RequestSliceView {
  /** The actionable error of the session's current request (strict readiness, budget): an idle then fails its turns. */
  readonly pendingError: string | undefined;
  /** The turn it stood for ended: the error no longer stands. */
  clearError(): void;
  /** The session's history was rewound: nothing assembled, prepared or laid out from the old one is used again. */
  forgetHistory(): void;
  /** Another process drove the session: its requests did not carry this process's cache epoch. */
  forgetEpoch(): void;
}

/** What the other parts may read of a session's lease slice (written by plugin/turns/lease.ts `LeaseKeeper` alone). */
export interface LeaseView {
  /** The lease this process holds, renewed by its timer; undefined when it holds none. */
  readonly held: { readonly fence: number; readonly timer: Timer | undefined } | undefined;
  /** The fence of this process's last claim: a jump means another process drove the session in between. */
  readonly lastFence: number | undefined;
  /** The session's first claim was made after its `chat.message` returned (plugin/turns/admission.ts `claimsLater`). */
  readonly claimDeferred: boolean;
  /** That claim was refused: the turn runs without memory and its requests raise this (then the next claim decides). */
  readonly claimRefused: string | undefined;
}

export interface SessionState {
  readonly hostSessionId: string;
  /** Owned by plugin/request/ (slice.ts): what the session's requests were built from. */
  readonly request: RequestSliceView;
  /** Owned by plugin/turns/lease.ts: the session's lease in this process. */
  readonly lease: LeaseView;
  /**
   * Serial work for this session (ingestion, outcomes, rewinds, admissions' queued part; plugin/turns/session-jobs.ts):
   * OpenCode does not wait for the event hook, so its jobs must not overtake each other.
   */
  readonly work: SerialQueue;
  /** Settles once the work queued so far has run (the same promise while nothing new is queued); never rejects. */
  readonly queue: Promise<void>;
  /** One admission at a time, in the order OpenCode called `chat.message` (calls overlap for queued prompts). */
  readonly admissions: SerialQueue;
  /** As `lease.claimRefused`, for the request transform. */
  readonly claimRefused: string | undefined;
  session: Session | undefined;
  /** The open under way (plugin/host/adapter.ts `open`): concurrent callers share its result, not a lock. */
  opening: Promise<Session | undefined> | undefined;
  /** Turns admitted by this process, by the user message that opened them, in admission order. */
  readonly turns: Map<string, OpenTurn>;
  /** User message → the turn it belongs to (a turn's own message, or a continuation's synthetic one). */
  readonly turnOfMessage: Map<string, string>;
  readonly pinned: Map<string, Turn>;
  /**
   * Host message → the highest seq of its records, as far as this process knows: filled by its own ingestion and merged
   * with the database's at the first request (and after another process drove the session). Merged, never replaced: a
   * job that commits while the load is on its way must not be lost from it (replacement would stop at that message).
   */
  readonly seqs: Map<string, number>;
  seqsLoaded: boolean;
  readonly ingested: Set<string>;
  /** Admissions under way (plugin/turns/admission.ts): the lease is not released meanwhile. */
  admitting: number;
  reconciled: boolean;
  /** Set when the memory cannot serve this session (history rewritten by a revert); the reason is shown in inspect. */
  disabled: string | undefined;
  /**
   * Host messages OpenCode removed (a revert committed, `message.removed`) that no rewind has taken into account yet:
   * while any is here, no request of the session gets memory (it would still hold their records).
   */
  readonly removed: Set<string>;
  /** The rewind job queued for `removed` (its completion, not a lock), which a request waits for before it reads memory. */
  rewinding: Promise<void> | undefined;
  /**
   * The message a staged revert goes back to (`session.updated` with `info.revert`, seen when the revert was made in
   * this process): the next prompt commits it, so its admission rewinds first.
   */
  revertStaged: string | undefined;
  busy: boolean;
  /** Since when OpenCode reports the session idle (its last status event); undefined while it is busy or retrying. */
  idleSince: number | undefined;
  /** A pending look at turns an idle could not decide (plugin/turns/outcomes.ts `scheduleIdleCheck`). */
  idleCheck: { timer: Timer; turnIds: Set<string> } | undefined;
}

/** A session seen for the first time in this process. */
export function newSessionState(hostSessionId: string, request: RequestSliceView): SessionState {
  const lease = new LeaseSlice();
  const work = new SerialQueue();
  return {
    hostSessionId,
    request,
    lease,
    work,
    get queue() {
      return work.idle();
    },
    admissions: new SerialQueue(),
    get claimRefused() {
      return lease.claimRefused;
    },
    session: undefined,
    opening: undefined,
    turns: new Map(),
    turnOfMessage: new Map(),
    pinned: new Map(),
    seqs: new Map(),
    seqsLoaded: false,
    ingested: new Set(),
    admitting: 0,
    reconciled: false,
    disabled: undefined,
    removed: new Set(),
    rewinding: undefined,
    revertStaged: undefined,
    busy: false,
    idleSince: undefined,
    idleCheck: undefined,
  };
}

export function noteSeq(seqs: Map<string, number>, messageId: string, seq: number): void {
  seqs.set(messageId, Math.max(seqs.get(messageId) ?? -1, seq));
}

/** A turn this process tracks, not yet admitted in memory (plugin/turns/admission.ts, and continuations in turn-tracking.ts `turnForAssistant`). */
export function newOpenTurn(turnId: string): OpenTurn {
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

/** A turn whose latest step has started and not completed. */
export function inFlight(turn: OpenTurn): boolean {
  return turn.lastStep !== undefined && !turn.lastStep.final && turn.ending === undefined;
}

/** The host's order of turns: OpenCode 1.18.33's `msg_` ids ascend over time (facts, "IDs ascend"). */
export function byTurnId(a: OpenTurn, b: OpenTurn): number {
  return a.turnId < b.turnId ? -1 : a.turnId > b.turnId ? 1 : 0;
}
