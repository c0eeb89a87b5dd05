import type { Session, Turn } from "../../src/memory/index.js";
import type { Timer } from "../base/clock.js";
import { SerialQueue } from "../base/serial-queue.js";
import { LeaseSlice } from "./lease.js";
import { DiagnosticsSlice } from "./session-diagnostics.js";

/**
 * What the adapter knows of a host session in this process, in slices, each written by one module and read by the
 * others as readonly: its requests (`request`, plugin/request/slice.ts), its lease (`lease`, plugin/turns/lease.ts),
 * its serial work (`work`, plugin/turns/session-jobs.ts), its admissions (`admissions`, plugin/turns/admission.ts),
 * what is shown of it (`diagnostics`, plugin/turns/session-diagnostics.ts), its session in memory (`session`,
 * `opening`: plugin/turns/session-open.ts), its reverts (`removed`, `rewinding`, `revertStaged`:
 * plugin/turns/session-rewind.ts), and its turns (the rest: plugin/turns/turn-slice.ts, whose transitions carry out the
 * decisions of plugin/turns/tracking.ts). One object per session, made by plugin/turns/sessions.ts; every part of
 * plugin/ that works on a session gets it passed in. No promise is kept as a lock: what must not overlap goes through a
 * SerialQueue (plugin/base/serial-queue.ts).
 */
export interface TurnStep {
  readonly messageId: string;
  readonly final: boolean;
  readonly terminal: boolean;
}

/** A turn this process tracks (written by plugin/turns/turn-slice.ts alone). */
export interface OpenTurn {
  readonly turnId: string;
  /** False for a continuation turn the adapter opened itself until its ingestion job admits it. */
  readonly admitted: boolean;
  readonly finished: boolean;
  /** Set when a terminal step was seen; its ingestion job finishes the turn (an idle before that must not). */
  readonly ending: "completed" | "interrupted" | "failed" | undefined;
  /** Assistant messages seen for the turn, in progress or final. */
  readonly assistantMessages: ReadonlySet<string>;
  readonly lastStep: TurnStep | undefined;
  /** The queued part of the turn's admission (plugin/turns/admission.ts `admitCounted`); undefined for a continuation turn. */
  readonly admission: Promise<void> | undefined;
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

/** What is shown of a session (memory_inspect), written by plugin/turns/session-diagnostics.ts alone. */
export interface DiagnosticsView {
  /** Set when the memory cannot serve this session (history rewritten by a revert); the reason is shown in inspect. */
  readonly memoryOff: string | undefined;
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
  /** Owned by plugin/turns/session-diagnostics.ts: what is shown of the session. */
  readonly diagnostics: DiagnosticsView;
  /** As `diagnostics.memoryOff`, for the request transform and inspect. */
  readonly disabled: string | undefined;
  /** The session in memory (written by plugin/turns/session-open.ts alone). */
  readonly session: Session | undefined;
  /** The open under way (plugin/turns/session-open.ts): concurrent callers share its result, not a lock. */
  readonly opening: Promise<Session | undefined> | undefined;
  /** Turns admitted by this process, by the user message that opened them, in admission order. */
  readonly turns: ReadonlyMap<string, OpenTurn>;
  /** User message → the turn it belongs to (a turn's own message, or a continuation's synthetic one). */
  readonly turnOfMessage: ReadonlyMap<string, string>;
  readonly pinned: ReadonlyMap<string, Turn>;
  /**
   * Host message → the highest seq of its records, as far as this process knows: filled by its own ingestion and merged
   * with the database's at the first request (and after another process drove the session). Merged, never replaced: a
   * job that commits while the load is on its way must not be lost from it (replacement would stop at that message).
   */
  readonly seqs: ReadonlyMap<string, number>;
  readonly seqsLoaded: boolean;
  readonly ingested: ReadonlySet<string>;
  /** Admissions under way (plugin/turns/admission.ts): the lease is not released meanwhile. */
  readonly admitting: number;
  readonly reconciled: boolean;
  /**
   * Host messages OpenCode removed (a revert committed, `message.removed`) that no rewind has taken into account yet:
   * while any is here, no request of the session gets memory (it would still hold their records).
   */
  readonly removed: ReadonlySet<string>;
  /** The rewind job queued for `removed` (its completion, not a lock), which a request waits for before it reads memory. */
  readonly rewinding: Promise<void> | undefined;
  /**
   * The message a staged revert goes back to (`session.updated` with `info.revert`, seen when the revert was made in
   * this process): the next prompt commits it, so its admission rewinds first.
   */
  readonly revertStaged: string | undefined;
  readonly busy: boolean;
  /** Since when OpenCode reports the session idle (its last status event); undefined while it is busy or retrying. */
  readonly idleSince: number | undefined;
  /** A pending look at turns an idle could not decide (plugin/turns/outcomes.ts `scheduleIdleCheck`). */
  readonly idleCheck: { readonly timer: Timer; readonly turnIds: ReadonlySet<string> } | undefined;
}

/** A session seen for the first time in this process. */
export function newSessionState(hostSessionId: string, request: RequestSliceView): SessionState {
  const lease = new LeaseSlice();
  const diagnostics = new DiagnosticsSlice();
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
    diagnostics,
    get disabled() {
      return diagnostics.memoryOff;
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
    removed: new Set(),
    rewinding: undefined,
    revertStaged: undefined,
    busy: false,
    idleSince: undefined,
    idleCheck: undefined,
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
