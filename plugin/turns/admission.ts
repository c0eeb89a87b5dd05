import type { Memory, Session, Turn } from "../../src/memory/index.js";
import type { Clock } from "../base/clock.js";
import type { ResolvedPluginConfig } from "../base/config.js";
import type { Diagnostics } from "../base/diagnostics.js";
import { PromptRefused } from "../base/prompt-refused.js";
import {
  type HostMessage,
  type HostMessageInfo,
  type HostPart,
  requestQuery,
  userRecordDrafts,
} from "../opencode/messages.js";
import { copiedHistoryEvents } from "./fork-inherit.js";
import type { LeaseKeeper } from "./lease.js";
import type { TurnOutcomes } from "./outcomes.js";
import type { SessionJobs } from "./session-jobs.js";
import type { SessionMemory } from "./session-memory.js";
import type { SessionRewinds } from "./session-rewind.js";
import type { OpenTurn, SessionState } from "./session-state.js";
import type { HostSessions } from "./sessions.js";
import type { StaleTurns } from "./stale-turns.js";
import { stoppedBeforePrompt } from "./tracking.js";
import {
  countAdmission,
  drivenElsewhere,
  forgetUnadmitted,
  markAdmitted,
  openPromptTurn,
  setAdmission,
  setReconciled,
  setSeqsLoaded,
} from "./turn-slice.js";

export interface AdmissionDeps {
  readonly memory: Memory;
  readonly config: ResolvedPluginConfig;
  readonly projectId: string;
  readonly sessions: HostSessions;
  readonly lease: LeaseKeeper;
  readonly jobs: SessionJobs;
  readonly records: SessionMemory;
  readonly outcomes: TurnOutcomes;
  readonly rewinds: SessionRewinds;
  readonly staleTurns: StaleTurns;
  readonly transcript: (hostSessionId: string) => Promise<HostMessage[] | undefined>;
  readonly clock: Clock;
  readonly diagnostics: Diagnostics;
  /** The session in memory, opened on first need; undefined when it cannot be (the problem is already recorded). */
  readonly open: (state: SessionState) => Promise<Session | undefined>;
  /** Starts a waiting embedded worker when the turn's memory will wait for summaries. */
  readonly startWorkerIfBehind: (session: Session, turn: Turn) => Promise<void>;
  /** Reads the admitted turn's memory now (plugin/request/transform.ts `prepare`, which owns where it is kept). */
  readonly prepare: (state: SessionState, ctx: { sessionId: string; turnId: string }) => void;
}

/**
 * How recently a session must have been created in this process for its first claim to be made after `chat.message`
 * returns (Admission.claimsLater): `opencode run` prompts ~50 ms after creating its session; another process learns a
 * session's id only from OpenCode's storage, and a person then still has to choose it and type a prompt.
 */
const CLAIM_LATER_WITHIN_MS = 10_000;

/** `chat.message`: the admission of a user turn (seed 000 §13 "on admitted user turn"). */
export class Admission {
  constructor(private readonly deps: AdmissionDeps) {}

  /**
   * Admits the prompt `message` of `state`'s session. Throws PromptRefused when another live process holds the session
   * (the prompt must not run); any other failure is recorded and the turn runs without memory.
   */
  async admit(state: SessionState, message: HostMessageInfo, parts: readonly HostPart[]): Promise<void> {
    // Counted from the first await: an idle job of the previous turn must not release the lease claimed here.
    countAdmission(state, 1);
    // One admission at a time per session, in the order OpenCode called the hook: prompts queued during a tool loop
    // are admitted concurrently, and the memory's turn order (boundaries, publication order) must be the host's.
    try {
      await state.admissions.run(() => this.admitCounted(state, message, parts));
    } finally {
      countAdmission(state, -1);
    }
  }

  /**
   * What must be decided before OpenCode stores the prompt runs here, awaited by `chat.message`: the session, its lease
   * (a refusal is thrown: the prompt must not run) and the turn's place in this process. The rest of the admission
   * (earlier events of the session, reconciliation, the turn's row and pinned snapshot) is the session's next serial
   * job, and the user record the one after: OpenCode 1.18.33 spends 0.7-1.1 s between `chat.message` and the first
   * request's transform (provider start-up, measured in `opencode run`), so that work overlaps it instead of delaying
   * the prompt (issue 9 item 2: admission was 0.2-0.7 s of `chat.message`). Everything that needs the turn (the
   * transform, memory tools, its steps' ingestion) waits for `admission` first.
   */
  private async admitCounted(state: SessionState, message: HostMessageInfo, parts: readonly HostPart[]): Promise<void> {
    if (this.claimsLater(state)) return this.admitBeforeClaim(state, message, parts);
    const session = await this.deps.open(state);
    if (!session) return;
    // Refusals propagate (the prompt must not run); anything else is recorded and the turn runs without memory.
    await this.claim(state, session, false);
    this.queueAdmission(state, message, parts, async () => session);
  }

  /**
   * The session's lease for this admission (plugin/turns/lease.ts); a refusal is thrown. When another process drove
   * the session since this process's last claim, its records and unfinished turns are not in this process's view, and
   * its requests did not carry this process's cache epoch: all three are read afresh.
   */
  private async claim(state: SessionState, session: Session, deferred: boolean): Promise<void> {
    if (!(await this.deps.lease.claim(state, session, deferred))) return;
    drivenElsewhere(state);
    state.request.forgetEpoch();
  }

  /**
   * A session created in this process moments ago (CLAIM_LATER_WITHIN_MS) and never claimed: no other process can
   * have learned its id from OpenCode's storage and prompted it yet, so its first claim cannot be refused and is not
   * waited for. Its open and claim (two round trips, 6-9 ms of the 11 ms `chat.message` took in `opencode run`: every
   * run's session is new) run at the head of the queued admission instead, while OpenCode starts its providers. Should
   * the claim be refused all the same, the turn runs without memory and its first `chat.params` raises the refusal.
   */
  private claimsLater(state: SessionState): boolean {
    return (
      state.lease.lastFence === undefined &&
      !state.lease.claimDeferred &&
      this.deps.sessions.createdRecently(state.hostSessionId, this.deps.clock.now(), CLAIM_LATER_WITHIN_MS)
    );
  }

  private admitBeforeClaim(state: SessionState, message: HostMessageInfo, parts: readonly HostPart[]): void {
    this.deps.lease.deferFirstClaim(state);
    this.queueAdmission(state, message, parts, async () => {
      const session = await this.deps.open(state);
      // As when chat.message opens it: the problem is recorded, and the turn runs without memory.
      if (!session) return undefined;
      // A refusal is kept by the lease for the turn's requests to raise.
      await this.claim(state, session, true);
      return session;
    });
  }

  /**
   * The turn's place in this process, decided now (OpenCode reports the session busy as soon as `chat.message`
   * returns), and the rest of its admission queued as the session's next job, the user record after it.
   */
  private queueAdmission(
    state: SessionState,
    message: HostMessageInfo,
    parts: readonly HostPart[],
    claimed: () => Promise<Session | undefined>,
  ): void {
    const { jobs, records, diagnostics } = this.deps;
    const stopped = stoppedBeforePrompt(state);
    const turn = openPromptTurn(state, message.id);
    /** The turn runs without memory, as if it had never been admitted here. */
    const forget = () => forgetUnadmitted(state, turn);
    setAdmission(
      turn,
      jobs.runOnce(state, async () => {
        try {
          const session = await claimed();
          if (session) await this.admitInMemory(state, session, turn, stopped, message, parts);
          else forget();
        } catch (error) {
          forget();
          await diagnostics.problem(error instanceof PromptRefused ? "lease" : "admit", state.hostSessionId, error);
        }
      }),
    );
    // The user record is the session's next job, not part of the admission: the request does not wait for it (its
    // message is at the turn's boundary, never replaced), and as a job it is retried and flushed at close like every
    // other record.
    jobs.enqueue(state, "ingest", async (session) => {
      if (!turn.admitted) return;
      const drafts = userRecordDrafts(message, parts);
      await records.ingestDrafts(state, session, message.id, message.id, message.time?.created, drafts);
    });
  }

  /** The queued part of an admission (see `admitCounted`): never retried, a failure leaves the turn unadmitted. */
  private async admitInMemory(
    state: SessionState,
    session: Session,
    turn: OpenTurn,
    stopped: readonly OpenTurn[],
    message: HostMessageInfo,
    parts: readonly HostPart[],
  ): Promise<void> {
    const { memory, records, diagnostics } = this.deps;
    const started = performance.now();
    // A session claimed for the first time (its lease's first fence) may be a fork holding copies of its parent's
    // messages: its history then starts with the parent's (plugin/turns/fork-inherit.ts).
    const inherited = state.lease.lastFence === 1 && (await this.inheritFork(state, session, message.id));
    if (!inherited && state.lease.lastFence === 1 && this.deps.sessions.createdHere(state.hostSessionId)) {
      // Created in this process and never claimed before: no process left a turn or a record in it, so there is
      // nothing to reconcile or load (two round trips less before the first request).
      setReconciled(state, true);
      setSeqsLoaded(state, true);
    }
    await this.deps.rewinds.commitStagedRevert(state, session);
    await this.deps.staleTurns.reconcile(state, session);
    if (stopped.length > 0) {
      await this.deps.outcomes
        .endStoppedTurns(state, session, stopped)
        .catch((error) => diagnostics.problem("finish", state.hostSessionId, error));
    }
    const query = requestQuery(parts);
    const admitted = await memory.admitTurn({
      sessionId: session.sessionId,
      turnId: message.id,
      ...(query ? { query } : {}),
      // A prompt sees what another session finished a moment ago (`opencode run` after `opencode run`).
      awaitRecent: true,
    });
    markAdmitted(state, admitted.turnId, admitted, turn);
    // Read now what the first request's memory needs (plugin/request/prepared-context.ts); its transform only fits it. Its
    // readiness wait begins now, so a worker that would be needed must start now too.
    this.deps.prepare(state, { sessionId: session.sessionId, turnId: admitted.turnId });
    await Promise.all([
      this.deps.startWorkerIfBehind(session, admitted),
      // The first request's transform needs them; loaded now, while OpenCode prepares that request (it tries again).
      records
        .loadSeqs(state, session)
        .catch(() => {}),
    ]);
    diagnostics.recordTiming("admitted", started);
  }

  /**
   * At a session's first claim: when OpenCode holds messages before the prompt that optchat never saw (a fork's copies;
   * a session created here is looked at only when it has the fork title), the memory service matches them to the
   * session whose first records they are and the child's history starts with the parent's. True when it did.
   */
  private async inheritFork(state: SessionState, session: Session, promptMessageId: string): Promise<boolean> {
    const id = state.hostSessionId;
    if (!this.deps.sessions.mayBeFork(id)) return false;
    try {
      const transcript = await this.deps.transcript(id);
      const copies = transcript
        ? copiedHistoryEvents(transcript, promptMessageId, {
            sessionId: session.sessionId,
            hostSessionId: id,
            projectId: this.deps.projectId,
            fallbackAt: this.deps.clock.now(),
          })
        : [];
      if (copies.length === 0) return false;
      const result = await this.deps.memory.inheritHistory(session.sessionId, copies);
      if (result.status !== "inherited") return false;
      this.deps.diagnostics.log(
        "info",
        `optchat: session ${id} is a fork of ${result.from.sessionId}: ${result.records} records inherited, ${result.nodes} summaries reused`,
      );
      setSeqsLoaded(state, false); // the copies are held now: the transform may replace them
      return true;
    } catch (error) {
      // The copies then stay OpenCode's alone, sent verbatim, as for any message memory does not hold.
      await this.deps.diagnostics.problem("fork", id, error);
      return false;
    }
  }
}
