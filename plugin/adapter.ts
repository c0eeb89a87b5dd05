import { createHash } from "node:crypto";
import { appendFileSync, readFileSync } from "node:fs";
import { hostname } from "node:os";
import { setTimeout as delay } from "node:timers/promises";
import {
  type AssembledContext,
  availableMemoryTokens,
  estimateTokens,
  isOptchatError,
  type Memory,
  type Session,
  type Turn,
} from "../src/memory/index.js";
import { EPOCH_LIMITS } from "./cache-epoch.js";
import type { ResolvedPluginConfig } from "./config.js";
import type { EmbeddedWorker, EmbeddedWorkerState } from "./embedded-worker.js";
import { applyEpoch, type CacheEpoch, startEpoch } from "./epoch-layout.js";
import { copiedHistoryEvents, looksLikeFork } from "./fork-inherit.js";
import { applyRewind } from "./history-rewind.js";
import { type RepairDeps, repairStaleTurns } from "./host-reconcile.js";
import { memoryLayout, memoryMessage, withLeadingText } from "./memory-message.js";
import {
  assistantRecordDrafts,
  type HostMessage,
  type HostMessageInfo,
  type HostPart,
  lastRequestIndex,
  messageText,
  type RecordDraft,
  replaceablePrefix,
  requestQuery,
  stepOutcome,
  userRecordDrafts,
  withoutRetryTriggers,
} from "./messages.js";
import { assemblySettings, type PreparedTurn, preparedFor, prepareTurn } from "./prepared-context.js";
import { recordEvents } from "./record-events.js";
import { onSessionDeleted, type SessionDeletedDeps } from "./session-deleted.js";
import { settle } from "./shutdown.js";

export const HOST = "opencode";

/**
 * How long a session must stay idle before turns its idle left undecided are ended (see `scheduleIdleCheck`). OpenCode
 * 1.18.33 sends the final message a few ms after the first idle on error paths, and goes busy again at once when a
 * queued prompt follows: seconds are ample, and a stuck turn holds the lease no longer than this.
 */
const IDLE_GRACE_MS = 5_000;

/**
 * How long after the process opened the pass over the project's stuck turns runs (see `reconcileProject`): after the
 * start-up work of a process that lives on, and never within a typical `opencode run` (2-5 s), which must not pay
 * for it (issue 9 item 2).
 */
const PROJECT_RECONCILE_AFTER_MS = 5_000;

/** Waits before the retries of a failed session job (see `enqueue`): about 30 s in all. */
const JOB_RETRY_DELAYS_MS = [500, 1_000, 2_000, 4_000, 8_000, 15_000] as const;

/** What the adapter needs from OpenCode beyond hook arguments (absent when the client does not answer). */
export interface HostLookups {
  /** The parent session of a host session, when it is a subagent's. */
  parentOf(hostSessionId: string): Promise<string | undefined>;
  /** A model's context and output limits, in tokens. */
  modelLimits(providerId: string, modelId: string): Promise<{ context: number; output: number } | undefined>;
  /** OpenCode's stored transcript of a session, oldest first (the host transcript is the source, seed 000 §3). */
  transcript(hostSessionId: string): Promise<HostMessage[] | undefined>;
}

/** Thrown from `chat.message` to refuse a prompt; the only error the adapter lets reach OpenCode on purpose. */
export class PromptRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PromptRefused";
  }
}

interface OpenTurn {
  readonly turnId: string;
  /** False for a continuation turn the adapter opened itself until its ingestion job admits it. */
  admitted: boolean;
  finished: boolean;
  /** Set when a terminal step was seen; its ingestion job finishes the turn (an idle before that must not). */
  ending: "completed" | "interrupted" | "failed" | undefined;
  /** Assistant messages seen for the turn, in progress or final. */
  readonly assistantMessages: Set<string>;
  lastStep: { messageId: string; final: boolean; terminal: boolean } | undefined;
  /** The queued part of the turn's admission (see `admitCounted`); undefined for a continuation turn. */
  admission: Promise<void> | undefined;
}

interface SessionState {
  readonly hostSessionId: string;
  session: Session | undefined;
  opening: Promise<Session | undefined> | undefined;
  /** Serial work for this session (ingestion, finishing): OpenCode does not wait for the event hook. */
  queue: Promise<void>;
  /** The last admission of this session: the next one waits for it (chat.message calls overlap for queued prompts). */
  admissions: Promise<void>;
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
  lease: { fence: number; timer: ReturnType<typeof setInterval> | undefined } | undefined;
  /** A release on its way to the database: the next claim waits for it (it could otherwise land after the claim). */
  releasing: Promise<void> | undefined;
  /** The fence of this process's last claim: a jump means another process drove the session in between. */
  lastFence: number | undefined;
  admitting: number;
  reconciled: boolean;
  compacting: boolean;
  systemTokens: number | undefined;
  /** Set when the memory cannot serve this session (history rewritten by a revert); the reason is shown in inspect. */
  disabled: string | undefined;
  /**
   * Host messages OpenCode removed (a revert committed, `message.removed`) that no rewind has taken into account yet:
   * while any is here, no request of the session gets memory (it would still hold their records).
   */
  readonly removed: Set<string>;
  /** The rewind job queued for `removed`, which a request waits for before it reads memory. */
  rewinding: Promise<void> | undefined;
  /**
   * The message a staged revert goes back to (`session.updated` with `info.revert`, seen when the revert was made in
   * this process): the next prompt commits it, so its admission rewinds first.
   */
  revertStaged: string | undefined;
  /** An actionable error for the current request (strict readiness, budget): raised from the next `chat.params`. */
  pendingError: string | undefined;
  /**
   * The tokens the request the transform just built needs, when the model's limits were unknown to it (the lookup
   * failed or timed out) and it assumed a window: `chat.params` checks it against the limit OpenCode passes there.
   */
  unsized: { tokens: number; assumedWindow: number } | undefined;
  lastInjection: Record<string, unknown> | undefined;
  /** What the latest admitted turn's assemblies read before knowing their budget (plugin/prepared-context.ts). */
  prepared: PreparedTurn | undefined;
  /** The last complete assembly, for the later steps of the same turn. */
  assembled: { turnId: string; context: AssembledContext } | undefined;
  /** The session's cache epoch: the memory and texts its requests re-send byte for byte (plugin/epoch-layout.ts). */
  epoch: CacheEpoch | undefined;
  /** The scope and retention epoch the cache epoch's memory was assembled under (it is re-sent only while current). */
  epochSnapshot: { scopeId: string; retentionEpoch: number } | undefined;
  busy: boolean;
  /** Since when OpenCode reports the session idle (its last status event); undefined while it is busy or retrying. */
  idleSince: number | undefined;
  /** A pending look at turns an idle could not decide (see `scheduleIdleCheck`). */
  idleCheck: { timer: ReturnType<typeof setTimeout>; turnIds: Set<string> } | undefined;
}

export interface AdapterStatus {
  readonly holder: string;
  readonly startedAt: Date;
  readonly worker: EmbeddedWorkerState;
  /** What made the embedded worker start (it starts when needed, see plugin/embedded-worker.ts). */
  readonly workerStartReason: string | undefined;
  readonly workerError: string | undefined;
  readonly workerLastEvent: string | undefined;
  readonly problems: number;
  readonly lastProblem: string | undefined;
}

/**
 * The OpenCode adapter: maps hook calls and events to the memory service. Every entry point catches its errors and
 * records them (a throw inside an OpenCode 1.18.33 hook can kill the user's turn); the only deliberate throws are a
 * refused prompt (`chat.message`) and an actionable memory error (`chat.params`).
 */
export class OpencodeAdapter {
  readonly holder = leaseHolderName();
  private readonly sessions = new Map<string, SessionState>();
  private readonly messages = new Map<string, { info: HostMessageInfo | undefined; parts: Map<string, HostPart> }>();
  private readonly limits = new Map<string, { context: number; output: number }>();
  /** Parents of subagent sessions created in this process (`session.created` carries them). */
  private readonly parents = new Map<string, string>();
  /** Sessions created in this process without a parent. */
  private readonly roots = new Set<string>();
  /** Sessions created in this process with OpenCode's fork title: they may hold copies (plugin/fork-inherit.ts). */
  private readonly forkTitled = new Set<string>();
  private worker: EmbeddedWorker | undefined;
  private workerError: string | undefined;
  private workerLastEvent: string | undefined;
  private closingDone: Promise<void> | undefined;
  private projectReconcile: ReturnType<typeof setTimeout> | undefined;
  private problems = 0;
  private lastProblem: string | undefined;
  private readonly startedAt = new Date();
  private closed = false;
  private readonly closing = new AbortController();
  /** The scope's project id (a hash for directories outside git): the same for every record of this process. */
  private readonly projectId: string;

  constructor(
    readonly memory: Memory,
    readonly config: ResolvedPluginConfig,
    project: { id: string; worktree: string; directory: string },
    private readonly lookups: HostLookups,
    private readonly log: (level: "info" | "warn" | "error", message: string) => void,
  ) {
    this.projectId = projectScopeId(project);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Lifecycle

  /** Schedules the pass over the project's stuck turns (see `reconcileProject`); never waited for. */
  scheduleProjectReconcile(afterMs = PROJECT_RECONCILE_AFTER_MS): void {
    this.projectReconcile = setTimeout(() => {
      if (!this.closed) this.reconcileProject().catch((error) => this.problem("reconcile", undefined, error));
    }, afterMs);
    this.projectReconcile.unref?.();
  }

  /** The embedded worker, started by this adapter when it is needed (plugin/embedded-worker.ts). */
  attachWorker(worker: EmbeddedWorker): void {
    this.worker = worker;
  }

  noteWorkerEvent(event: { type: string; message?: string; error?: unknown }): void {
    this.workerLastEvent = `${new Date().toISOString()} ${event.type}`;
    if (event.type.startsWith("starting")) {
      this.log("info", `optchat: embedded worker ${event.type}`);
      this.recordTiming("worker", performance.now(), { event: event.type });
    }
    if (event.type === "error" || event.type === "failure") {
      this.workerError = `${event.type}: ${describe(event.error ?? event.message ?? "")}`;
    }
  }

  /**
   * Waits until every session's serial work (ingestion, outcomes, lease releases) has run, or `budgetMs` passed. Work
   * queued while waiting (a final message arriving during a close) is waited for too.
   */
  flush(budgetMs: number): Promise<boolean> {
    return settle(() => [...this.sessions.values()].map((state) => state.queue), budgetMs);
  }

  /**
   * Flushes pending ingestion and outcomes (at most `budgetMs`, setting OPTCHAT_CLOSE_FLUSH_MS), releases the leases
   * of sessions with no open turn, stops the embedded worker at once and closes the pool. Every caller (dispose, a
   * signal) gets the same promise: a SIGTERM during a dispose must not end the process before the flush.
   */
  close(budgetMs: number = this.config.plugin.closeFlushMs): Promise<void> {
    this.closingDone ??= this.closeWithin(budgetMs);
    return this.closingDone;
  }

  private async closeWithin(budgetMs: number): Promise<void> {
    const started = performance.now();
    this.closed = true;
    clearTimeout(this.projectReconcile);
    // Retry waits are cut short: a job failing now records its problem once instead of waiting for the database.
    this.closing.abort();
    const flushed = await this.flush(budgetMs);
    if (!flushed) {
      this.log(
        "warn",
        `optchat: closing after ${budgetMs} ms with ingestion still pending (setting OPTCHAT_CLOSE_FLUSH_MS); the next OpenCode process stores what is missing from OpenCode's transcript`,
      );
    }
    for (const state of this.sessions.values()) {
      if (flushed) await this.releaseLease(state);
      // Unfinished turns keep their claim until it expires (another process may then take over), but no timer may
      // outlive the pool it renews through.
      if (state.lease?.timer) clearInterval(state.lease.timer);
      if (state.idleCheck) clearTimeout(state.idleCheck.timer);
    }
    await this.worker?.stop();
    this.recordTiming("close", started, { flushed });
    // Not waited for: nothing is pending any more, and `opencode run` exits once `dispose` returns (the pool's
    // sockets then close with the process); in `serve` the close completes in the background.
    void this.memory.close().catch(() => {});
  }

  status(): AdapterStatus {
    return {
      holder: this.holder,
      startedAt: this.startedAt,
      worker: this.worker?.state ?? "off",
      workerStartReason: this.worker?.startReason,
      workerError: this.workerError ?? this.worker?.error,
      workerLastEvent: this.workerLastEvent,
      problems: this.problems,
      lastProblem: this.lastProblem,
    };
  }

  // ---------------------------------------------------------------------------------------------------------------
  // chat.message: admission (seed 000 §13 "on admitted user turn")

  async admit(hostSessionId: string, message: HostMessageInfo, parts: readonly HostPart[]): Promise<void> {
    const started = performance.now();
    try {
      await this.admitTimed(hostSessionId, message, parts);
    } finally {
      this.recordTiming("admit", started);
    }
  }

  private async admitTimed(hostSessionId: string, message: HostMessageInfo, parts: readonly HostPart[]): Promise<void> {
    const state = this.state(hostSessionId);
    // Counted from the first await: an idle job of the previous turn must not release the lease claimed here.
    state.admitting += 1;
    // One admission at a time per session, in the order OpenCode called the hook: prompts queued during a tool loop
    // are admitted concurrently, and the memory's turn order (boundaries, publication order) must be the host's.
    const previous = state.admissions;
    let admitted!: () => void;
    state.admissions = new Promise<void>((resolve) => {
      admitted = resolve;
    });
    try {
      await previous;
      await this.admitCounted(state, hostSessionId, message, parts);
    } finally {
      state.admitting -= 1;
      admitted();
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
  private async admitCounted(
    state: SessionState,
    hostSessionId: string,
    message: HostMessageInfo,
    parts: readonly HostPart[],
  ): Promise<void> {
    const session = await this.open(state);
    if (!session) return;
    // Refusals propagate (the prompt must not run); anything else is recorded and the turn runs without memory.
    await this.claimLease(state, session);
    // A prompt to an idle session: turns of this process still open were stopped (their idle check may not have run
    // yet); they must not be ended as this turn's queued predecessors when its reply comes. Decided now: OpenCode
    // reports the session busy as soon as this hook returns.
    const stopped = state.idleSince !== undefined ? [...state.turns.values()].filter((turn) => !turn.finished) : [];
    const known = state.turns.get(message.id);
    const turn = known ?? newOpenTurn(message.id);
    if (!known) state.turns.set(message.id, turn);
    state.turnOfMessage.set(message.id, message.id);
    state.busy = true;
    const admission = state.queue.then(() =>
      this.admitInMemory(state, session, turn, stopped, message, parts).catch(async (error) => {
        // The turn runs without memory, as if it had never been admitted here.
        if (!turn.admitted && state.turns.get(turn.turnId) === turn) {
          state.turns.delete(turn.turnId);
          state.turnOfMessage.delete(turn.turnId);
        }
        await this.problem("admit", hostSessionId, error);
      }),
    );
    turn.admission = admission;
    state.queue = admission;
    // The user record is the session's next job, not part of the admission: the request does not wait for it (its
    // message is at the turn's boundary, never replaced), and as a job it is retried and flushed at close like every
    // other record.
    this.enqueue(state, "ingest", async (session) => {
      if (!turn.admitted) return;
      await this.ingestDrafts(
        state,
        session,
        message.id,
        message.id,
        message.time?.created,
        userRecordDrafts(message, parts),
      );
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
    const started = performance.now();
    // A session claimed for the first time (its lease's first fence) may be a fork holding copies of its parent's
    // messages: its history then starts with the parent's (plugin/fork-inherit.ts).
    const inherited = state.lastFence === 1 && (await this.inheritFork(state, session, message.id));
    if (
      !inherited &&
      state.lastFence === 1 &&
      (this.roots.has(state.hostSessionId) || this.parents.has(state.hostSessionId))
    ) {
      // Created in this process and never claimed before: no process left a turn or a record in it, so there is
      // nothing to reconcile or load (two round trips less before the first request).
      state.reconciled = true;
      state.seqsLoaded = true;
    }
    if (state.revertStaged) {
      // This prompt commits the staged revert (facts: `message.removed` follows, maybe after this admission): the
      // session's history is rewound first, so the turn is admitted in the new generation.
      state.removed.add(state.revertStaged);
      state.revertStaged = undefined;
      await this.rewind(state, session);
    }
    await this.reconcile(state, session);
    if (stopped.length > 0) {
      await this.endStoppedTurns(state, session, stopped).catch((error) =>
        this.problem("finish", state.hostSessionId, error),
      );
    }
    const query = requestQuery(parts);
    const admitted = await this.memory.admitTurn({
      sessionId: session.sessionId,
      turnId: message.id,
      ...(query ? { query } : {}),
    });
    state.pinned.set(admitted.turnId, admitted);
    turn.admitted = true;
    // Read now what the first request's memory needs (plugin/prepared-context.ts); its transform only fits it. Its
    // readiness wait begins now, so a worker that would be needed must start now too.
    state.prepared = prepareTurn(this.memory, this.config, { sessionId: session.sessionId, turnId: admitted.turnId });
    await Promise.all([
      this.startWorkerIfBehind(session, admitted),
      // The first request's transform needs them; loaded now, while OpenCode prepares that request (it tries again).
      this.loadSeqs(state, session).catch(() => {}),
    ]);
    this.recordTiming("admitted", started);
  }

  /**
   * At a session's first claim: when OpenCode holds messages before the prompt that optchat never saw (a fork's copies;
   * a session created here is looked at only when it has the fork title), the memory service matches them to the
   * session whose first records they are and the child's history starts with the parent's. True when it did.
   */
  private async inheritFork(state: SessionState, session: Session, promptMessageId: string): Promise<boolean> {
    const id = state.hostSessionId;
    if (this.parents.has(id) || (this.roots.has(id) && !this.forkTitled.has(id))) return false;
    try {
      const transcript = await this.lookups.transcript(id);
      const copies = transcript
        ? copiedHistoryEvents(transcript, promptMessageId, {
            sessionId: session.sessionId,
            hostSessionId: id,
            projectId: this.projectId,
            fallbackAt: Date.now(),
          })
        : [];
      if (copies.length === 0) return false;
      const result = await this.memory.inheritHistory(session.sessionId, copies);
      if (result.status !== "inherited") return false;
      this.log(
        "info",
        `optchat: session ${id} is a fork of ${result.from.sessionId}: ${result.records} records inherited, ${result.nodes} summaries reused`,
      );
      state.seqsLoaded = false; // the copies are held now: the transform may replace them
      return true;
    } catch (error) {
      // The copies then stay OpenCode's alone, sent verbatim, as for any message memory does not hold.
      await this.problem("fork", id, error);
      return false;
    }
  }

  /** Merges the database's host message seqs into this process's once per session (see `SessionState.seqs`). */
  private async loadSeqs(state: SessionState, session: Session): Promise<void> {
    if (state.seqsLoaded) return;
    const stored = await this.memory.host.hostMessageSeqs(session.sessionId, session.currentGeneration);
    for (const [id, seq] of stored) noteSeq(state.seqs, id, seq);
    state.seqsLoaded = true;
  }

  // ---------------------------------------------------------------------------------------------------------------
  // event: ingestion of final messages and parts, turn outcomes

  onEvent(event: { type?: string; properties?: Record<string, unknown> }): void {
    try {
      const props = event.properties ?? {};
      switch (event.type) {
        case "message.part.updated": {
          const part = props.part as HostPart | undefined;
          if (!part?.messageID || !part.id) return;
          // Only sessions this process drives: the cache would otherwise grow with every replayed or foreign part.
          if (!this.sessions.has(part.sessionID) || this.sessions.get(part.sessionID)?.ingested.has(part.messageID))
            return;
          this.entry(part.messageID).parts.set(part.id, part);
          return;
        }
        case "message.updated": {
          const info = props.info as HostMessageInfo | undefined;
          if (!info?.id || !info.sessionID) return;
          if (info.role === "assistant") this.onAssistant(info);
          return;
        }
        case "session.created": {
          const info = props.info as { id?: string; parentID?: string; title?: string } | undefined;
          if (info?.id && info.parentID) this.parents.set(info.id, info.parentID);
          else if (info?.id) this.roots.add(info.id);
          if (info?.id && !info.parentID && looksLikeFork(info.title)) this.forkTitled.add(info.id);
          return;
        }
        case "session.deleted": {
          const sessionId = (props.sessionID as string | undefined) ?? (props.info as { id?: string } | undefined)?.id;
          if (!sessionId) return;
          const pending = this.sessions.get(sessionId)?.queue ?? Promise.resolve();
          this.forget(sessionId);
          void onSessionDeleted(this.deletionDeps(sessionId), sessionId, pending);
          return;
        }
        case "session.status": {
          const status = props.status as { type?: string } | undefined;
          const sessionId = props.sessionID as string | undefined;
          if (status?.type === "idle" && sessionId) this.onIdle(sessionId);
          if ((status?.type === "busy" || status?.type === "retry") && sessionId) {
            const state = this.sessions.get(sessionId);
            if (state) {
              state.busy = true;
              state.idleSince = undefined;
            }
          }
          return;
        }
        case "session.idle": {
          const sessionId = props.sessionID as string | undefined;
          if (sessionId) this.onIdle(sessionId);
          return;
        }
        case "session.updated": {
          const info = props.info as { id?: string; revert?: { messageID?: string } } | undefined;
          const state = info?.id ? this.sessions.get(info.id) : undefined;
          if (state) state.revertStaged = info?.revert?.messageID;
          return;
        }
        case "message.removed": {
          const sessionId = props.sessionID as string | undefined;
          if (sessionId) this.onHistoryRewritten(sessionId, props.messageID as string | undefined);
          return;
        }
        default:
          return;
      }
    } catch (error) {
      void this.problem("event", undefined, error);
    }
  }

  private onAssistant(info: HostMessageInfo): void {
    const state = this.sessions.get(info.sessionID);
    if (!state) return; // a session this process never admitted a turn for (e.g. a fork's replayed copies)
    const turnId = this.turnFor(state, info);
    if (!turnId) return;
    const turn = state.turns.get(turnId);
    if (!turn) return;
    turn.assistantMessages.add(info.id);
    const step = stepOutcome(info);
    if (!step.final) {
      turn.lastStep = { messageId: info.id, final: false, terminal: false };
      return;
    }
    if (state.ingested.has(info.id)) return;
    state.ingested.add(info.id);
    turn.lastStep = { messageId: info.id, final: true, terminal: step.terminal };
    if (step.terminal) turn.ending = step.outcome;
    const parts = [...(this.messages.get(info.id)?.parts.values() ?? [])];
    this.enqueue(state, "ingest", async (session) => {
      await this.pinnedTurn(state, session, turnId);
      const started = performance.now();
      const drafts = assistantRecordDrafts(info, parts);
      await this.ingestDrafts(state, session, turnId, info.id, info.time?.completed, drafts);
      this.recordTiming("ingest", started, { records: drafts.length });
      this.messages.delete(info.id);
      if (step.terminal) await this.finish(state, session, turnId, step.outcome);
    });
  }

  /**
   * The turn an assistant message belongs to: its parent user message's turn; otherwise (a harness continuation after
   * native compaction) the session's latest turn while the session is still busy with it.
   */
  private turnFor(state: SessionState, info: HostMessageInfo): string | undefined {
    if (info.parentID) {
      const known = state.turnOfMessage.get(info.parentID);
      if (known) return known;
    }
    if (!state.busy) return undefined;
    const latest = [...state.turns.values()].at(-1);
    if (!latest) return undefined;
    if (!latest.finished && latest.ending === undefined) {
      if (info.parentID) state.turnOfMessage.set(info.parentID, latest.turnId);
      return latest.turnId;
    }
    if (!info.parentID) return undefined;
    // The turn ended but OpenCode goes on from a message of its own (the "Continue…" after a native compaction): a
    // turn of its own, admitted by the ingestion job, so nothing is written into an already published turn.
    state.turns.set(info.parentID, newOpenTurn(info.parentID));
    state.turnOfMessage.set(info.parentID, info.parentID);
    return info.parentID;
  }

  private onIdle(hostSessionId: string): void {
    const state = this.sessions.get(hostSessionId);
    if (!state) return;
    state.idleSince ??= Date.now();
    this.worker?.onSessionIdle(() => state.idleSince !== undefined && !this.closed);
    // Decided on the turns open when the event arrived: a stale idle (OpenCode sends two per turn, and the queue may
    // run them late) must never end a turn admitted after it (seen under CI load: a completed turn read as
    // interrupted). A turn with a terminal step is finished by that step's own job, queued before this one.
    const open = [...state.turns.values()].filter((t) => !t.finished);
    // Undecided here: a step still in flight (OpenCode 1.18.33 emits idle just before the final message on error
    // paths) and a turn with no step yet (a queued prompt: the reply to a later one may answer it). Looked at again
    // once the session has stayed idle for a while.
    const undecided = open.filter((t) => t.ending === undefined && (t.assistantMessages.size === 0 || inFlight(t)));
    if (undecided.length > 0) this.scheduleIdleCheck(state, undecided);
    if (open.some(inFlight)) return;
    const stopped = open.filter((t) => t.ending === undefined && t.assistantMessages.size > 0).map((t) => t.turnId);
    const outcome = state.pendingError ? "failed" : "interrupted";
    const admitted = state.turns.size;
    this.enqueue(state, "idle", async (session) => {
      for (const turnId of stopped) {
        const turn = state.turns.get(turnId);
        if (!turn || turn.finished || turn.ending !== undefined) continue;
        // The turn stopped without a final answer, after tool calls (e.g. a rejected permission: no error, no
        // further step). Our own refusal in chat.params ends with an errored step, so it is already failed.
        await this.finish(state, session, turnId, outcome);
      }
      if (state.turns.size === admitted) {
        state.pendingError = undefined;
        state.busy = false;
      }
      await this.releaseLease(state);
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
      for (const turn of turns) state.idleCheck.turnIds.add(turn.turnId);
      return;
    }
    const turnIds = new Set(turns.map((turn) => turn.turnId));
    const look = (wait: number) => {
      const timer = setTimeout(() => {
        if (this.closed) return;
        const idleFor = state.idleSince === undefined ? undefined : Date.now() - state.idleSince;
        if (idleFor === undefined) {
          state.idleCheck = undefined;
          return;
        }
        if (idleFor < IDLE_GRACE_MS) {
          look(IDLE_GRACE_MS - idleFor);
          return;
        }
        state.idleCheck = undefined;
        this.enqueue(state, "idle", async (session) => {
          if (state.idleSince === undefined) return;
          const stuck = [...turnIds].flatMap((id) => state.turns.get(id) ?? []).filter((turn) => !turn.finished);
          await this.endStoppedTurns(state, session, stuck);
          await this.releaseLease(state);
        });
      }, wait);
      timer.unref?.();
      state.idleCheck = { timer, turnIds };
    };
    look(IDLE_GRACE_MS);
  }

  /** Ends turns OpenCode stopped working on: with their terminal step's outcome when one was seen, else interrupted. */
  private async endStoppedTurns(state: SessionState, session: Session, turns: readonly OpenTurn[]): Promise<void> {
    for (const turn of [...turns].sort(byTurnId)) {
      if (turn.finished) continue;
      const outcome = turn.ending ?? "interrupted";
      await this.finishTurns(session, [turn], outcome);
      this.log(
        "info",
        `optchat: turn ${turn.turnId} of ${state.hostSessionId} recorded as ${outcome}: OpenCode went idle without ${turn.ending ? "its last step being stored" : "a final answer"}`,
      );
    }
  }

  /**
   * OpenCode removed a message (a revert committed at the next prompt, from the revert point to the end): the
   * session's history in memory is rewound to before it, as a new generation (memory.rewindSession), in the session's
   * order of work, so the next prompt's admission waits for it. Only what cannot be rewound switches memory off.
   */
  private onHistoryRewritten(hostSessionId: string, messageId: string | undefined): void {
    const state = this.state(hostSessionId);
    if (state.disabled) return;
    if (!messageId) {
      this.disableRewritten(state, "OpenCode removed a message without naming it");
      return;
    }
    state.removed.add(messageId);
    this.enqueue(state, "rewind", (session) => this.rewind(state, session));
    state.rewinding = state.queue;
  }

  private async rewind(state: SessionState, session: Session): Promise<void> {
    if (state.removed.size === 0 || state.disabled) return;
    const removed = [...state.removed];
    let result: Awaited<ReturnType<Memory["rewindSession"]>>;
    try {
      result = await this.memory.rewindSession(session.sessionId, removed);
    } catch (error) {
      // An outage or a dropped connection: the session's work queue tries again. Anything else cannot be repaired by
      // trying again, and stale history must not be served.
      if (!isOptchatError(error) || isOptchatError(error, "DATABASE_UNAVAILABLE")) throw error;
      this.disableRewritten(
        state,
        `OpenCode removed message ${removed[0]} (a revert was committed) and optchat could not rewind the session's history: ${describe(error)}`,
      );
      return;
    }
    for (const id of removed) state.removed.delete(id);
    if (result.status !== "rewound") return;
    const decision = applyRewind(state, session, removed, result.generation);
    if (decision.type === "disable") {
      this.disableRewritten(state, decision.reason);
      return;
    }
    this.log(
      "info",
      `optchat: ${state.hostSessionId} rewound (a revert): generation ${result.generation} keeps ${result.kept} records, ${result.superseded} superseded`,
    );
  }

  private disableRewritten(state: SessionState, why: string): void {
    state.disabled = `${why}; memory is off for this session and its native history is sent as it is`;
    this.enqueue(state, "lifecycle", async () => {
      await this.memory.host.reportProblem({
        host: HOST,
        hostSessionId: state.hostSessionId,
        holder: this.holder,
        operation: "lifecycle",
        code: "HISTORY_REWRITTEN",
        message: state.disabled ?? "",
      });
    });
  }

  private async finish(
    state: SessionState,
    session: Session,
    turnId: string,
    outcome: "completed" | "interrupted" | "failed",
  ): Promise<void> {
    // Queued prompts answered together (OpenCode 1.18.33 facts §2): one reply whose parent is the last of them, so
    // every open turn opened by an earlier user message ends with this one. "Earlier" is the host's order: `msg_` ids
    // ascend over time (facts, "IDs ascend"), while the map's insertion order is only the order admissions finished
    // (seen under CI load before admissions were serialized: the third prompt admitted before the second, which then
    // stayed active forever).
    const ending = [...state.turns.values()].filter((turn) => !turn.finished && turn.turnId <= turnId).sort(byTurnId);
    await this.finishTurns(session, ending, outcome);
  }

  /**
   * Records the outcome of each turn. One failure does not stop the others; a turn whose outcome could not be written
   * stays open here, and the first failure is thrown once all were tried.
   */
  private async finishTurns(
    session: Session,
    turns: readonly OpenTurn[],
    outcome: "completed" | "interrupted" | "failed",
  ): Promise<void> {
    let failure: unknown;
    for (const turn of turns) {
      try {
        // A continuation turn that never reached a request or a tool has no row: nothing to record.
        if (turn.admitted) await this.memory.finishTurn({ sessionId: session.sessionId, turnId: turn.turnId }, outcome);
        turn.finished = true;
      } catch (error) {
        failure ??= error;
      }
    }
    // After trying every turn: the job that called this runs again (see `enqueue`) for those still open.
    if (failure !== undefined) throw failure;
  }

  // ---------------------------------------------------------------------------------------------------------------
  // experimental.chat.messages.transform (seed 000 §7, §13 "before each agent model call")

  async transform(messages: HostMessage[]): Promise<void> {
    const last = messages.at(-1);
    const hostSessionId = last?.info.sessionID;
    if (!hostSessionId) return;
    const state = this.sessions.get(hostSessionId);
    const started = performance.now();
    let assembleMs: number | undefined;
    const record = (
      status: "injected" | "not_ready" | "budget_exceeded" | "failed" | "skipped",
      detail: Record<string, unknown>,
      turnId?: string,
      error?: string,
    ) => {
      const summary = { status, turnId, ...detail, ms: Math.round((performance.now() - started) * 100) / 100 };
      this.recordTiming("transform", started, { status, assembleMs, reused: detail.reused === true });
      if (state) state.lastInjection = { at: new Date().toISOString(), ...summary, ...(error ? { error } : {}) };
      const sessionId = state?.session?.sessionId;
      if (!sessionId) return;
      this.memory.host
        .recordInjection({
          sessionId,
          turnId: turnId ?? null,
          holder: this.holder,
          status,
          mode: this.config.plugin.mode,
          query: (turnId && state?.pinned.get(turnId)?.query) || null,
          detail: summary,
          error: error ?? null,
        })
        .catch((e) => this.problem("transform", hostSessionId, e));
    };
    try {
      if (!state?.session) return record("skipped", { reason: "no turn of this session was admitted by this process" });
      if (state.disabled) return record("skipped", { reason: state.disabled });
      if (state.removed.size > 0) await state.rewinding;
      if (state.removed.size > 0) {
        return record("skipped", {
          reason: "a revert was committed and the session's new generation is not written yet",
        });
      }
      state.pendingError = undefined;
      state.unsized = undefined;
      if (state.compacting) {
        state.compacting = false;
        // Native compaction summarizes OpenCode's own transcript, never our synthetic view (seed 000 §13).
        return record("skipped", { reason: "native compaction request: history passed through unchanged" });
      }
      // No wait for this session's pending ingestion: admission already waited for the earlier turns, and the current
      // turn's own messages are never replaced (they are at or after its boundary), sealed yet or not.
      const requestIndex = lastRequestIndex(messages);
      const request = requestIndex >= 0 ? (messages[requestIndex] as HostMessage) : undefined;
      const turnOf = () =>
        (request && state.turnOfMessage.get(request.info.id)) ?? [...state.turns.values()].at(-1)?.turnId;
      // The admission's queued part may still run (see `admitCounted`); a failed one leaves the turn unadmitted.
      await state.turns.get(turnOf() ?? "")?.admission;
      const turnId = turnOf();
      if (!turnId) return record("skipped", { reason: "the request's user message was not admitted by optchat" });
      const turn = await this.pinnedTurn(state, state.session, turnId);
      await this.loadSeqs(state, state.session);
      const seqs = state.seqs;
      // The lowest boundary of the turns still open here: a prompt queued during another turn's tool loop must not
      // make that turn's own request replaceable (its records lie below the queued turn's boundary).
      let boundary = turn.snapshot.ownBoundary;
      for (const open of state.turns.values()) {
        const pinned = open.finished ? undefined : state.pinned.get(open.turnId);
        if (pinned) boundary = Math.min(boundary, pinned.snapshot.ownBoundary);
      }
      let replace =
        this.config.plugin.mode === "replace" ? replaceablePrefix(messages, (id) => seqs.get(id), boundary) : 0;
      const kept = messages.slice(replace);
      const activeTokens = kept.reduce((sum, m) => sum + estimateTokens(messageText(m)), 0);
      const model = modelOf(messages);
      const limits = model ? await this.modelLimits(model.providerID, model.modelID) : undefined;
      const windowTokens = limits?.context ?? (this.config.plugin.windowTokens || 32_000);
      const outputTokens = this.config.plugin.outputTokens || Math.min(limits?.output ?? 4_096, 32_000);
      // The system prompt is measured at system.transform, which runs after this hook: the previous step's size, at least
      // 4,000 tokens (1.18.33's main prompt is ~9,500 characters; the title prompt, seen first, is far smaller).
      const instructionsTokens = Math.max(state.systemTokens ?? 0, 4_000) + this.config.plugin.toolsTokens;
      const budget = {
        windowTokens,
        instructionsTokens,
        activeTokens,
        outputTokens,
        reserveTokens: this.config.plugin.reserveTokens,
      };
      const fixed = instructionsTokens + activeTokens + outputTokens + this.config.plugin.reserveTokens;
      if (fixed > windowTokens) {
        // Nothing optchat can drop makes this fit: the instructions, tools and current turn alone exceed the window
        // (seed 000 §7 "Long active turn": stop explicitly rather than send a request the provider must refuse).
        const message = `instructions (~${instructionsTokens} tokens, tools included), the current turn (~${activeTokens}), the answer reservation (${outputTokens}) and the reserve (${this.config.plugin.reserveTokens}) need ${fixed} tokens; the window of ${model ? `${model.providerID}/${model.modelID}` : "the model"} is ${windowTokens}`;
        state.pendingError = actionableError("BUDGET_EXCEEDED", message);
        return record("budget_exceeded", { budget, model }, turnId, message);
      }
      // A turn admitted here asked at admission (see `admitInMemory`); a continuation turn asks now.
      if (state.prepared?.turnId !== turnId) await this.startWorkerIfBehind(state.session, turn);
      let context: AssembledContext;
      const assembling = performance.now();
      // Every step of a turn reads the same pinned snapshot, so a complete assembly of an earlier step stays right
      // while it still fits the (shrinking) budget: reused, the blocks stay byte-identical across the steps (which a
      // provider's prompt cache rewards) and the step skips a dozen queries.
      // ... unless a deletion or revocation invalidated the snapshot meanwhile (one primary-key read, issue 15).
      const held = state.assembled?.turnId === turnId ? state.assembled.context : undefined;
      const earlier =
        held && (await this.memory.snapshotCurrent(state.session.sessionId, held.snapshot)) ? held : undefined;
      const available = availableMemoryTokens(budget);
      try {
        context =
          earlier && earlier.tokens.used <= available
            ? earlier
            : await this.memory.assembleContext(
                { sessionId: state.session.sessionId, turnId },
                { ...budget, ...assemblySettings(this.config) },
                await preparedFor(state.prepared, turnId),
              );
      } catch (error) {
        if (isOptchatError(error, "MEMORY_NOT_READY") || isOptchatError(error, "BUDGET_EXCEEDED")) {
          const code = (error as { code: string }).code;
          state.pendingError = actionableError(code, describe(error));
          return record(
            code === "MEMORY_NOT_READY" ? "not_ready" : "budget_exceeded",
            { budget, model },
            turnId,
            describe(error),
          );
        }
        throw error;
      }
      assembleMs = Math.round((performance.now() - assembling) * 1000) / 1000;
      state.assembled = context.omitted.length === 0 ? { turnId, context } : undefined;
      if (!limits) state.unsized = { tokens: fixed + context.tokens.used, assumedWindow: windowTokens };
      // Partial readiness may leave the session memory out or incomplete: then nothing it should stand for is removed.
      const ownComplete =
        context.blocks.some((b) => b.name === "session_memory") &&
        !context.omitted.some((o) => o.startsWith("session memory"));
      if (replace > 0 && !ownComplete) replace = 0;
      const epochReason = this.continueEpoch(state, messages, {
        turnId,
        requestIndex,
        replaceable: replace,
        context,
        fixedTokens: fixed - activeTokens,
        windowTokens,
      });
      if (epochReason === undefined) {
        const epoch = state.epoch as CacheEpoch;
        if (!limits) state.unsized = { tokens: epoch.requestTokens, assumedWindow: windowTokens };
        return record(
          "injected",
          {
            epoch: { turnId: epoch.turnId, turns: epoch.turns.size, continued: true },
            blocks: epoch.blocks,
            kept: messages.length - 1,
            reused: context === earlier,
            budget,
            model,
            tokens: context.tokens,
            snapshot: context.snapshot,
          },
          turnId,
        );
      }
      const blocks =
        this.config.plugin.mode === "augment"
          ? context.blocks.filter((b) => b.name === "shared_memory")
          : context.blocks;
      // Stable memory first, in its own message; the volatile rest leads the first kept user message (docs/caching.md).
      const layout = memoryLayout(blocks, context.omitted, replace, context.snapshot.publicationHighWater);
      const anchorIndex = messages.findIndex((m, i) => i >= replace && m.info.role === "user");
      const anchor = anchorIndex >= 0 ? messages[anchorIndex] : (request ?? last);
      const keptCount = messages.length - replace;
      const stableParts = anchorIndex >= 0 ? layout.stable : [...layout.stable, layout.volatile];
      messages.splice(0, replace, memoryMessage(hostSessionId, turnId, stableParts, anchor?.info));
      const moved = anchorIndex - replace + 1;
      const blockSizes = blocks.map((b) => ({
        name: b.name,
        tokens: b.tokens,
        lines: b.lines,
        bytes: Buffer.byteLength(b.text),
      }));
      if (anchorIndex >= 0) messages[moved] = withLeadingText(messages[moved] as HostMessage, layout.volatile, turnId);
      state.epoch =
        this.config.plugin.mode === "replace" && context.omitted.length === 0 && anchorIndex === replace
          ? startEpoch(
              turnId,
              messages[0] as HostMessage,
              estimateTokens(layout.stable.join("")),
              {
                id: (messages[moved] as HostMessage).info.id,
                text: layout.volatile,
                tokens: estimateTokens(layout.volatile),
              },
              context,
              blockSizes,
            )
          : undefined;
      state.epochSnapshot = state.epoch
        ? { scopeId: context.snapshot.scopeId, retentionEpoch: context.snapshot.retentionEpoch }
        : undefined;
      record(
        "injected",
        {
          replaced: replace,
          kept: keptCount,
          reused: context === earlier,
          budget,
          model,
          tokens: context.tokens,
          blocks: blockSizes,
          omitted: context.omitted,
          snapshot: context.snapshot,
          ...(state.epoch ? { epoch: { turnId, turns: 1, started: epochReason } } : {}),
        },
        turnId,
      );
    } catch (error) {
      // Never throw from here: OpenCode 1.18.33 kills the turn silently. The native history goes out unchanged.
      record("failed", { reason: "memory unavailable: native history sent unchanged" }, undefined, describe(error));
      await this.problem("transform", hostSessionId, error);
    }
  }

  /**
   * Continues the session's cache epoch for this request (docs/caching.md "Across turns: epochs"): undefined when the
   * request was laid out from it, otherwise why a new one starts here.
   */
  private continueEpoch(
    state: SessionState,
    messages: HostMessage[],
    request: {
      turnId: string;
      requestIndex: number;
      replaceable: number;
      context: AssembledContext;
      fixedTokens: number;
      windowTokens: number;
    },
  ): string | undefined {
    if (this.config.plugin.mode !== "replace") return "augment mode";
    if (!state.epoch) return "no epoch yet";
    // A deletion, a revocation or a revert retired memory since the epoch's memory was assembled (the scope's
    // retention epoch moved, issue 15): re-sent, it could carry removed text.
    const pinned = state.epochSnapshot;
    const now = request.context.snapshot;
    if (!pinned || pinned.scopeId !== now.scopeId || pinned.retentionEpoch !== now.retentionEpoch) {
      return "memory was retired since the epoch began";
    }
    const tokensOf = (m: HostMessage) => estimateTokens(messageText(m));
    const limits = {
      ...EPOCH_LIMITS,
      turns: this.config.plugin.cacheEpochTurns,
      keptTokens: this.config.plugin.cacheEpochKeptTokens,
    };
    return applyEpoch(state.epoch, messages, {
      ...request,
      limits,
      tokensOf,
      estimate: estimateTokens,
      fits: (memoryTokens, keptTokens) => {
        (state.epoch as CacheEpoch).requestTokens = request.fixedTokens + memoryTokens + keptTokens;
        return request.fixedTokens + memoryTokens + keptTokens <= request.windowTokens;
      },
    });
  }

  /** Starts a waiting embedded worker when the turn's memory will wait for summaries (EmbeddedWorker.onRequest). */
  private async startWorkerIfBehind(session: Session, turn: Turn): Promise<void> {
    await this.worker?.onRequest(turn.snapshot.ownBoundary, async () => {
      return (await this.memory.host.treeProgress(session.sessionId, turn.generation)).builtLeaves;
    });
  }

  /** `chat.params` of an agent request: the request is on its way (see EmbeddedWorker.onFirstRequestSent). */
  noteRequestSent(): void {
    this.worker?.onFirstRequestSent(() => this.memory.host.jobsWaitingForWorker());
  }

  /** `chat.params`: raises the actionable error the transform recorded for this request (strict readiness, budget). */
  takePendingError(hostSessionId: string): string | undefined {
    const state = this.sessions.get(hostSessionId);
    const message = state?.pendingError;
    return message === undefined ? undefined : withoutRetryTriggers(message);
  }

  noteSystemPrompt(hostSessionId: string, system: readonly string[]): void {
    const state = this.sessions.get(hostSessionId);
    if (state)
      state.systemTokens = Math.max(
        state.systemTokens ?? 0,
        system.reduce((sum, s) => sum + estimateTokens(s), 0),
      );
  }

  /**
   * `chat.params` of a request whose transform did not know the model's limits: a request that does not fit the window
   * OpenCode passes here is stopped with the budget error, like the transform would have stopped it.
   */
  checkUnsized(hostSessionId: string, model: string, limit: { context?: number } | undefined): void {
    const state = this.sessions.get(hostSessionId);
    const unsized = state?.unsized;
    if (!state || !unsized || !limit?.context) return;
    state.unsized = undefined;
    if (unsized.tokens <= limit.context || state.pendingError) return;
    state.pendingError = actionableError(
      "BUDGET_EXCEEDED",
      `the request needs about ${unsized.tokens} tokens (memory sized for an assumed window of ${unsized.assumedWindow}: OpenCode did not answer with the model's limits in time); the window of ${model} is ${limit.context}`,
    );
  }

  noteModelLimits(providerId: string, modelId: string, limit: { context?: number; output?: number } | undefined): void {
    if (limit?.context)
      this.limits.set(`${providerId}/${modelId}`, { context: limit.context, output: limit.output ?? 4096 });
  }

  noteCompacting(hostSessionId: string): void {
    const state = this.sessions.get(hostSessionId);
    if (state) state.compacting = true;
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Tools and inspection

  /**
   * The turn a tool call runs in, at its pinned snapshot: the turn of the assistant message that made the call, else
   * the session's latest turn admitted by this process. (A prompt queued during a tool loop is admitted before the
   * loop's later calls: they still belong to the running turn and must not see the queued turn's newer snapshot.)
   */
  async toolTurn(hostSessionId: string, assistantMessageId?: string): Promise<Turn> {
    const state = this.sessions.get(hostSessionId);
    // Admissions whose queued part still runs (see `admitCounted`): a failed one removes its turn.
    await Promise.all(state ? [...state.turns.values()].map((turn) => turn.admission) : []);
    const turns = state ? [...state.turns.values()] : [];
    const byMessage = assistantMessageId
      ? (turns.find((turn) => turn.assistantMessages.has(assistantMessageId)) ??
        state?.turns.get(state.turnOfMessage.get(assistantMessageId) ?? ""))
      : undefined;
    const latest = byMessage ?? turns.at(-1);
    if (!state?.session || !latest) {
      throw new Error(
        "optchat: this session has no turn admitted by optchat in this OpenCode process (was the plugin loaded when the prompt was sent?); memory tools need one",
      );
    }
    return await this.pinnedTurn(state, state.session, latest.turnId);
  }

  sessionOf(hostSessionId: string): SessionState | undefined {
    return this.sessions.get(hostSessionId);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Internals

  private state(hostSessionId: string): SessionState {
    let state = this.sessions.get(hostSessionId);
    if (!state) {
      state = {
        hostSessionId,
        session: undefined,
        opening: undefined,
        queue: Promise.resolve(),
        admissions: Promise.resolve(),
        turns: new Map(),
        turnOfMessage: new Map(),
        pinned: new Map(),
        seqs: new Map(),
        seqsLoaded: false,
        ingested: new Set(),
        lease: undefined,
        releasing: undefined,
        lastFence: undefined,
        admitting: 0,
        reconciled: false,
        compacting: false,
        systemTokens: undefined,
        disabled: undefined,
        removed: new Set(),
        rewinding: undefined,
        revertStaged: undefined,
        pendingError: undefined,
        unsized: undefined,
        lastInjection: undefined,
        assembled: undefined,
        epoch: undefined,
        epochSnapshot: undefined,
        prepared: undefined,
        busy: false,
        idleSince: undefined,
        idleCheck: undefined,
      };
      this.sessions.set(hostSessionId, state);
    }
    return state;
  }

  private deletionDeps(hostSessionId: string): SessionDeletedDeps {
    const mode = this.config.plugin.onSessionDelete;
    const log = (message: string) => this.log("info", message);
    return { memory: this.memory, host: HOST, mode, log, problem: (e) => this.problem("delete", hostSessionId, e) };
  }

  /** Drops a deleted session's process state (what happens to its memory: session-deleted.ts). */
  private forget(hostSessionId: string): void {
    const state = this.sessions.get(hostSessionId);
    if (!state) return;
    this.enqueue(state, "lifecycle", async () => {
      if (state.lease?.timer) clearInterval(state.lease.timer);
      if (state.idleCheck) clearTimeout(state.idleCheck.timer);
      state.lease = undefined;
      for (const [id, entry] of this.messages)
        if (entry.parts.values().next().value?.sessionID === hostSessionId) this.messages.delete(id);
      this.sessions.delete(hostSessionId);
      this.parents.delete(hostSessionId);
      this.roots.delete(hostSessionId);
    });
  }

  private entry(messageId: string) {
    let entry = this.messages.get(messageId);
    if (!entry) {
      entry = { info: undefined, parts: new Map() };
      this.messages.set(messageId, entry);
    }
    return entry;
  }

  private async open(state: SessionState): Promise<Session | undefined> {
    if (state.session) return state.session;
    state.opening ??= (async () => {
      try {
        const scope = this.config.plugin.scope;
        // Asked beside the rest: `chat.message` waits for this open.
        const rewrittenLookup = this.memory.host.findProblem(HOST, state.hostSessionId, "HISTORY_REWRITTEN");
        rewrittenLookup.catch(() => {});
        // A session created in this process says whether it has a parent (`session.created`): no client round trip.
        const parentHost =
          this.parents.get(state.hostSessionId) ??
          (this.roots.has(state.hostSessionId)
            ? undefined
            : await this.lookups.parentOf(state.hostSessionId).catch(() => undefined));
        const parent = parentHost ? await this.memory.host.findSession(HOST, parentHost) : undefined;
        const session = await this.memory.openSession({
          host: HOST,
          hostSessionId: state.hostSessionId,
          projectId: this.projectId,
          ...(scope.startsWith("profile:") ? { scopeId: scope } : {}),
          ...(scope === "isolated" ? { sharing: "isolated" as const } : {}),
          ...(parent ? { parentSessionId: parent.sessionId } : {}),
        });
        const rewritten = await rewrittenLookup;
        if (rewritten) state.disabled = rewritten.message;
        state.session = session;
        return session;
      } catch (error) {
        await this.problem("open", state.hostSessionId, error);
        return undefined;
      } finally {
        state.opening = undefined;
      }
    })();
    return await state.opening;
  }

  private async claimLease(state: SessionState, session: Session): Promise<void> {
    const ttlMs = this.config.plugin.leaseSeconds * 1000;
    let claim: Awaited<ReturnType<Memory["host"]["claimLease"]>>;
    // A claim that overtook this process's own release (another pool connection) would be expired by it.
    await state.releasing;
    try {
      claim = await this.memory.host.claimLease({ sessionId: session.sessionId, holder: this.holder, ttlMs });
      if (!claim.acquired && claim.expiresAt.getTime() <= Date.now()) {
        // Released between the claim and the read of who holds it: free now.
        claim = await this.memory.host.claimLease({ sessionId: session.sessionId, holder: this.holder, ttlMs });
      }
      if (!claim.acquired && holderIsDead(claim.holder)) {
        claim = await this.memory.host.claimLease({
          sessionId: session.sessionId,
          holder: this.holder,
          ttlMs,
          takeOverFrom: claim.holder,
        });
      }
    } catch (error) {
      // Without the database there is no memory either; the prompt runs natively and the problem is recorded.
      await this.problem("lease", state.hostSessionId, error);
      return;
    }
    if (!claim.acquired) {
      const seconds = Math.max(0, Math.ceil((claim.expiresAt.getTime() - Date.now()) / 1000));
      throw new PromptRefused(
        `optchat: session ${state.hostSessionId} is being driven by another OpenCode process (${claim.holder}); two processes prompting one session make OpenCode 1.18.33 loop. Wait for its turn to end (its claim expires in ${seconds} s unless renewed), or continue in that process. Setting: OPTCHAT_LEASE_SECONDS.`,
      );
    }
    if (state.lastFence !== undefined && claim.fence > state.lastFence + 1) {
      // Another process drove this session since: its records and unfinished turns are not in this process's view.
      state.seqsLoaded = false;
      state.reconciled = false;
      // Its requests did not carry this process's cache epoch: the next request renders the memory afresh.
      state.epoch = undefined;
    }
    state.lastFence = claim.fence;
    if (state.lease?.fence !== claim.fence) {
      if (state.lease?.timer) clearInterval(state.lease.timer);
      const timer = setInterval(() => {
        const fence = state.lease?.fence;
        if (fence === undefined) return;
        this.memory.host
          .renewLease({ sessionId: session.sessionId, holder: this.holder, fence, ttlMs })
          .then((held) => {
            // A newer claim may have replaced this lease while the renewal was on its way: leave that one alone.
            if (held || state.lease?.fence !== fence) return;
            if (state.lease?.timer) clearInterval(state.lease.timer);
            state.lease = undefined;
            void this.problem(
              "lease",
              state.hostSessionId,
              new Error("the session lease was lost (it expired and another process took it)"),
            );
          })
          .catch((error) => this.problem("lease", state.hostSessionId, error));
      }, ttlMs / 3);
      timer.unref?.();
      state.lease = { fence: claim.fence, timer };
    }
  }

  private async releaseLease(state: SessionState): Promise<void> {
    const lease = state.lease;
    if (!lease || !state.session) return;
    if (state.admitting > 0 || [...state.turns.values()].some((t) => !t.finished)) return;
    if (lease.timer) clearInterval(lease.timer);
    state.lease = undefined;
    const releasing = this.memory.host
      .releaseLease({ sessionId: state.session.sessionId, holder: this.holder, fence: lease.fence })
      .then(
        () => undefined,
        (error) => this.problem("lease", state.hostSessionId, error),
      );
    state.releasing = releasing;
    await releasing;
    if (state.releasing === releasing) state.releasing = undefined;
  }

  /**
   * First sight of a session in this process, with its lease held: turns left active by a process that stopped (killed
   * mid-turn, or closed right after the answer before its ingestion ran) are repaired from OpenCode's transcript
   * (plugin/host-reconcile.ts): the finished messages optchat lacks are stored, and the turn gets its real outcome.
   */
  private async reconcile(state: SessionState, session: Session): Promise<void> {
    if (state.reconciled) return;
    try {
      const stale = (await this.memory.host.activeTurns(session.sessionId)).filter((t) => !state.turns.has(t.turnId));
      await repairStaleTurns(this.repairDeps(state, session), session, stale, "prompt");
      state.reconciled = true;
    } catch (error) {
      // The new turn is admitted anyway; the next admission tries again.
      await this.problem("reconcile", state.hostSessionId, error);
    }
  }

  /** What repairing `state`'s stale turns needs (plugin/host-reconcile.ts). */
  private repairDeps(state: SessionState, session: Session): RepairDeps {
    return {
      memory: this.memory,
      transcript: () => this.lookups.transcript(state.hostSessionId),
      ingest: (turnId, messageId, at, drafts) => this.ingestDrafts(state, session, turnId, messageId, at, drafts),
      log: (message) => this.log("info", message),
    };
  }

  /**
   * A pass over this project's stuck turns, once, a while after the process opened (PROJECT_RECONCILE_AFTER_MS): a turn
   * another process left active with its reply in OpenCode's transcript is repaired now, so the project's other
   * sessions see it once it is published, without waiting for its own session to be prompted again.
   */
  private async reconcileProject(): Promise<void> {
    const stuck = await this.memory.host.stuckTurns({ projectId: this.projectId, holderGone: true });
    const gone = stuck.filter((t) => t.leaseExpiredAt.getTime() < Date.now() || holderIsDead(t.holder));
    for (const hostSessionId of new Set(gone.map((t) => t.hostSessionId))) {
      if (this.closed) return;
      const state = this.state(hostSessionId);
      // A session this process drives is reconciled by its own admission.
      if (state.turns.size > 0 || state.reconciled) continue;
      this.enqueue(state, "reconcile", async (session) => {
        const stale = (await this.memory.host.activeTurns(session.sessionId)).filter((t) => !state.turns.has(t.turnId));
        await repairStaleTurns(this.repairDeps(state, session), session, stale, "start");
      });
    }
  }

  private async pinnedTurn(state: SessionState, session: Session, turnId: string): Promise<Turn> {
    await state.turns.get(turnId)?.admission;
    const known = state.pinned.get(turnId);
    if (known) return known;
    const open = state.turns.get(turnId);
    // A continuation turn (OpenCode going on by itself after a native compaction) is admitted by whatever needs it
    // first: its first request, a memory tool in it, or its first step's ingestion (admission is idempotent).
    const turn =
      open && !open.admitted
        ? await this.memory.admitTurn({ sessionId: session.sessionId, turnId })
        : await this.memory.getTurn({ sessionId: session.sessionId, turnId });
    if (open) open.admitted = true;
    state.pinned.set(turnId, turn);
    return turn;
  }

  private async ingestDrafts(
    state: SessionState,
    session: Session,
    turnId: string,
    messageId: string,
    at: number | undefined,
    drafts: readonly RecordDraft[],
  ): Promise<void> {
    if (drafts.length === 0) return;
    const results = await this.memory.ingestMany(
      recordEvents(
        {
          sessionId: session.sessionId,
          hostSessionId: state.hostSessionId,
          turnId,
          messageId,
          at,
          fallbackAt: Date.now(),
          projectId: this.projectId,
        },
        drafts,
      ),
      // The next request of the turn waits for these to be summarized (readiness): short ones need no model.
      { buildFreeInline: true },
    );
    let max = -1;
    for (const result of results) {
      if ("seq" in result && result.status !== "conflict") max = Math.max(max, result.seq);
      if (result.status === "conflict") {
        await this.problem("ingest", state.hostSessionId, new Error(`conflicting re-delivery of ${result.eventKey}`));
      }
    }
    if (max >= 0) noteSeq(state.seqs, messageId, max);
  }

  /**
   * Appends a job to the session's serial work. Every job is idempotent (ingestion by finalization key, outcomes keep
   * their first value, admission and lease release are repeatable), so one that fails on anything but an optchat error
   * other than DATABASE_UNAVAILABLE (the database restarting, a dropped connection) runs again after
   * JOB_RETRY_DELAYS_MS: a short outage loses no
   * record and no outcome. Later jobs of the session wait meanwhile, in order.
   */
  private enqueue(state: SessionState, operation: string, work: (session: Session) => Promise<void>): void {
    state.queue = state.queue.then(async () => {
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
          if (wait === undefined || this.closed || final) {
            await this.problem(operation, state.hostSessionId, error);
            return;
          }
          if (attempt === 0)
            this.log("warn", `optchat ${operation} (${state.hostSessionId}): ${describe(error)}; retrying`);
          // Cut short by close(), which waits for the queue: the next pass records the failure and stops.
          await delay(wait, undefined, { signal: this.closing.signal }).catch(() => {});
        }
      }
    });
  }

  private async modelLimits(providerId: string, modelId: string) {
    const key = `${providerId}/${modelId}`;
    const known = this.limits.get(key);
    if (known) return known;
    const found = await this.lookups.modelLimits(providerId, modelId).catch(() => undefined);
    if (found) this.limits.set(key, found);
    return found;
  }

  /** One JSON line per measured operation, when OPTCHAT_TIMINGS_FILE is set (for `npm run bench -- plugin`). */
  recordTiming(op: string, started: number, extra: Record<string, unknown> = {}): void {
    const file = this.config.plugin.timingsFile;
    if (!file) return;
    const ms = Math.round((performance.now() - started) * 1000) / 1000;
    try {
      appendFileSync(file, `${JSON.stringify({ op, ms, at: Date.now(), ...extra })}\n`);
    } catch (error) {
      void this.problem("timings", undefined, error);
    }
  }

  async problem(operation: string, hostSessionId: string | undefined, error: unknown): Promise<void> {
    this.problems += 1;
    const message = describe(error);
    this.lastProblem = `${new Date().toISOString()} ${operation}: ${message}`;
    this.log("warn", `optchat ${operation}${hostSessionId ? ` (${hostSessionId})` : ""}: ${message}`);
    try {
      await this.memory.host.reportProblem({
        host: HOST,
        hostSessionId: hostSessionId ?? null,
        holder: this.holder,
        operation,
        code: isOptchatError(error) ? error.code : null,
        message: message.slice(0, 4000),
      });
    } catch {
      // The database itself is the problem; the log line above is all we can do.
    }
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}

/** The OpenCode project id as an opaque id (it is a hash or "global"; anything else is made safe). */
function safeId(value: string): string {
  const cleaned = value
    .replace(/[^A-Za-z0-9_.:-]/g, "_")
    .replace(/^[.-]+/, "")
    .slice(0, 200);
  return cleaned || "global";
}

/**
 * The project a session's memory is shared in: OpenCode's project id (the repository's root commit), except for
 * directories outside git, which OpenCode all files under one project "global": those share by directory instead, so
 * unrelated scratch directories do not see each other's memory.
 */
export function projectScopeId(project: { id: string; worktree: string; directory?: string }): string {
  if (project.id !== "global") return safeId(project.id);
  const where = project.directory ?? project.worktree;
  return `global-${createHash("sha256").update(where).digest("hex").slice(0, 16)}`;
}

function noteSeq(seqs: Map<string, number>, messageId: string, seq: number): void {
  seqs.set(messageId, Math.max(seqs.get(messageId) ?? -1, seq));
}

/** A turn this process tracks, not yet admitted in memory (see `admitCounted`, and continuations in `turnFor`). */
function newOpenTurn(turnId: string): OpenTurn {
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
function inFlight(turn: OpenTurn): boolean {
  return turn.lastStep !== undefined && !turn.lastStep.final && turn.ending === undefined;
}

/** The host's order of turns: OpenCode 1.18.33's `msg_` ids ascend over time (facts, "IDs ascend"). */
function byTurnId(a: OpenTurn, b: OpenTurn): number {
  return a.turnId < b.turnId ? -1 : a.turnId > b.turnId ? 1 : 0;
}

/**
 * This process as a lease holder: `opencode:<hostname>:<pid>@<start>:<random>`. The start time (Linux: clock ticks
 * after boot, from /proc) tells a dead holder from a new process that got its pid: a restarted container's OpenCode
 * usually gets the very same small pid, and would otherwise wait out its own dead predecessor's claim.
 */
export function leaseHolderName(): string {
  return `${HOST}:${hostname()}:${process.pid}@${processStart(process.pid) ?? "-"}:${Math.random().toString(36).slice(2, 10)}`;
}

/**
 * True only when the holder is a process of this machine that is gone (or whose pid now belongs to a process started
 * at another time). Holders of other machines, or of unknown form, are never declared dead: their claims expire.
 */
export function holderIsDead(holder: string): boolean {
  const [host, machine, processPart] = holder.split(":");
  if (host !== HOST || machine !== hostname() || !processPart) return false;
  const [pid, start] = processPart.split("@");
  if (!pid || !/^\d+$/.test(pid)) return false;
  try {
    process.kill(Number(pid), 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ESRCH";
  }
  const current = start && start !== "-" ? processStart(Number(pid)) : undefined;
  return current !== undefined && current !== start;
}

/** A process's start time from /proc/<pid>/stat (field 22), or undefined where there is no /proc. */
function processStart(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the parenthesized command name (which may contain spaces) start at field 3.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

function modelOf(messages: readonly HostMessage[]): { providerID: string; modelID: string } | undefined {
  for (let i = messages.length - 1; i >= 0; i--) {
    const info = (messages[i] as HostMessage).info;
    const providerID = info.model?.providerID ?? info.providerID;
    const modelID = info.model?.modelID ?? info.modelID;
    if (providerID && modelID) return { providerID, modelID };
  }
  return undefined;
}

function actionableError(code: string, message: string): string {
  if (code === "MEMORY_NOT_READY") {
    return `optchat: memory is not ready for this request (${message}). The compactor may be stopped or failing: check \`optchat status\` or the memory_inspect tool. To continue without waiting, set OPTCHAT_READINESS=partial (the request then says what is missing), or raise OPTCHAT_READINESS_WAIT_MS.`;
  }
  return `optchat: this request does not fit the model's context window (${message}). The current turn alone is too large: start a new turn, use a model with a larger context, or lower OPTCHAT_RESERVE_TOKENS / OPTCHAT_TOOLS_TOKENS if they are set too high.`;
}
