import { estimateTokens, type Memory, type Session, type Turn } from "../../src/memory/index.js";
import { type Clock, systemClock } from "../base/clock.js";
import { settle } from "../base/closing.js";
import type { ResolvedPluginConfig } from "../base/config.js";
import { Diagnostics, describe, type Log } from "../base/diagnostics.js";
import { HOST, projectScopeId } from "../base/identity.js";
import { readHostEvent } from "../opencode/events.js";
import type { HostMessage, HostMessageInfo, HostPart } from "../opencode/messages.js";
import type { RequestChecks } from "../request/checks.js";
import { ModelLimits, type RememberedLimits } from "../request/model-limits.js";
import { newRequestSlice, requestSlice } from "../request/slice.js";
import { RequestTransform } from "../request/transform.js";
import type { AdapterStatus, ToolsBackend } from "../tools/backend.js";
import { Admission } from "../turns/admission.js";
import type { CompactorHandle } from "../turns/compactor-handle.js";
import { LeaseKeeper, leaseHolderName } from "../turns/lease.js";
import { TurnOutcomes } from "../turns/outcomes.js";
import { onSessionDeleted } from "../turns/session-deleted.js";
import { SessionJobs } from "../turns/session-jobs.js";
import { SessionMemory } from "../turns/session-memory.js";
import { SessionOpener } from "../turns/session-open.js";
import { SessionRewinds } from "../turns/session-rewind.js";
import type { SessionState } from "../turns/session-state.js";
import { HostSessions } from "../turns/sessions.js";
import { StaleTurns } from "../turns/stale-turns.js";
import { turnOfToolCall } from "../turns/tracking.js";
import type { HostLookups } from "./client-lookups.js";

/**
 * The OpenCode adapter: the hook layer that maps hook calls and events to the parts of plugin/ that act on them
 * (admission, turn outcomes, rewinds, the request transform, leases, stale-turn repair; plugin/README.md lists them).
 * Every entry point catches its errors and records them (a throw inside an OpenCode 1.18.33 hook can kill the user's
 * turn); the only deliberate throws are a refused prompt (`chat.message`) and an actionable memory error
 * (`chat.params`).
 */
export class OpencodeAdapter implements ToolsBackend {
  /** This adapter as a lease holder: its OpenCode process (which the local server is not), see `leaseHolderName`. */
  readonly holder: string;
  private readonly sessions = new HostSessions(newRequestSlice);
  private readonly diagnostics: Diagnostics;
  private readonly lease: LeaseKeeper;
  private readonly jobs: SessionJobs;
  private readonly records: SessionMemory;
  private readonly limits: ModelLimits;
  private readonly outcomes: TurnOutcomes;
  private readonly rewinds: SessionRewinds;
  private readonly staleTurns: StaleTurns;
  private readonly admission: Admission;
  private readonly requests: RequestTransform;
  private worker: CompactorHandle | undefined;
  private workerError: string | undefined;
  private workerLastEvent: string | undefined;
  private closingDone: Promise<void> | undefined;
  private readonly startedAt: Date;
  private closed = false;
  /** The scope's project id (a hash for directories outside git): the same for every record of this process. */
  private readonly projectId: string;

  constructor(
    readonly memory: Memory,
    readonly config: ResolvedPluginConfig,
    project: {
      id: string;
      worktree: string;
      directory: string;
      hostPid?: number;
      rememberedLimits?: RememberedLimits;
    },
    private readonly lookups: HostLookups,
    log: Log,
    private readonly clock: Clock = systemClock,
  ) {
    this.holder = leaseHolderName(project.hostPid);
    this.startedAt = new Date(clock.now());
    const closed = () => this.closed;
    const diagnostics = new Diagnostics(memory, this.holder, config.plugin.timingsFile, clock, log);
    this.diagnostics = diagnostics;
    const { sessions } = this;
    this.projectId = projectScopeId(project);
    const parentOf = (hostSessionId: string) => this.lookups.parentOf(hostSessionId);
    const opener = new SessionOpener({
      memory,
      scope: config.plugin.scope,
      projectId: this.projectId,
      sessions,
      parentOf,
      diagnostics,
    });
    const open = (state: SessionState) => opener.open(state);
    const jobs = new SessionJobs(open, clock, diagnostics);
    this.jobs = jobs;
    const lease = new LeaseKeeper(memory, this.holder, config.plugin.leaseSeconds * 1000, clock, diagnostics);
    this.lease = lease;
    const records = new SessionMemory(memory, this.projectId, clock, diagnostics);
    this.records = records;
    const worker = () => this.worker;
    const outcomes = new TurnOutcomes({ memory, jobs, lease, records, clock, diagnostics, worker, closed });
    this.outcomes = outcomes;
    const rewinds = new SessionRewinds(memory, jobs, this.holder, diagnostics);
    this.rewinds = rewinds;
    const transcript = (hostSessionId: string) => this.lookups.transcript(hostSessionId);
    const { projectId } = this;
    const staleTurns = new StaleTurns({
      memory,
      projectId,
      sessions,
      jobs,
      records,
      transcript,
      clock,
      diagnostics,
      closed,
    });
    this.staleTurns = staleTurns;
    const startWorkerIfBehind = (session: Session, turn: Turn) => this.startWorkerIfBehind(session, turn);
    this.admission = new Admission({
      ...{ memory, config, projectId, sessions, lease, jobs, records, outcomes, rewinds, staleTurns, transcript },
      ...{ clock, diagnostics, open, startWorkerIfBehind },
      prepare: (state, ctx) => this.requests.prepare(state, ctx),
    });
    const remembered = project.rememberedLimits;
    this.limits = new ModelLimits(
      (providerId, modelId) => this.lookups.modelLimits(providerId, modelId),
      remembered ? { store: remembered, directory: project.directory } : undefined,
    );
    const { holder, limits } = this;
    this.requests = new RequestTransform({
      ...{ memory, config, holder, records, limits, diagnostics, clock, startWorkerIfBehind },
    });
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Lifecycle

  /** Schedules the pass over the project's stuck turns (plugin/turns/stale-turns.ts); never waited for. */
  scheduleProjectReconcile(afterMs?: number): void {
    this.staleTurns.scheduleProjectPass(afterMs);
  }

  /**
   * The compactor worker (plugin/host/embedded-worker.ts: started by this adapter when it is needed; or the local
   * server's, plugin/transport/local-server/served-worker.ts; or this process's handing its queue to a local server at
   * close, plugin/transport/local-server/hand-off.ts: the runner decides, plugin/host/adapter-opener.ts).
   */
  attachWorker(worker: CompactorHandle): void {
    this.worker = worker;
  }

  noteWorkerEvent(event: { type: string; message?: string; error?: unknown }): void {
    this.workerLastEvent = `${new Date(this.clock.now()).toISOString()} ${event.type}`;
    if (event.type.startsWith("starting")) {
      this.diagnostics.log("info", `optchat: embedded worker ${event.type}`);
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
    return settle(() => this.sessions.all().map((state) => state.queue), budgetMs);
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
    this.staleTurns.stop();
    // Retry waits are cut short: a job failing now records its problem once instead of waiting for the database.
    this.jobs.stopRetrying();
    const flushed = await this.flush(budgetMs);
    if (!flushed) {
      this.diagnostics.log(
        "warn",
        `optchat: closing after ${budgetMs} ms with ingestion still pending (setting OPTCHAT_CLOSE_FLUSH_MS); the next OpenCode process stores what is missing from OpenCode's transcript`,
      );
    }
    // The live map, as before the split: a session admitted while a release is awaited gets its timers cleared too.
    for (const state of this.sessions.live()) {
      if (flushed) await this.lease.release(state);
      // Unfinished turns keep their claim until it expires (another process may then take over), but no timer may
      // outlive the pool it renews through.
      this.lease.stopRenewing(state);
      this.clock.clear(state.idleCheck?.timer);
    }
    await this.worker?.stop();
    this.recordTiming("close", started, { flushed });
    // Not waited for: nothing is pending any more, and `opencode run` exits once `dispose` returns (the pool's
    // sockets then close with the process); in `serve` the close completes in the background. After the worker's
    // release: a worker still starting uses the pool.
    void (this.worker?.released() ?? Promise.resolve()).then(() => this.memory.close()).catch(() => {});
  }

  status(): AdapterStatus {
    return {
      holder: this.holder,
      startedAt: this.startedAt,
      worker: this.worker?.state ?? "off",
      workerStartReason: this.worker?.startReason,
      workerError: this.workerError ?? this.worker?.error,
      workerLastEvent: this.workerLastEvent,
      problems: this.diagnostics.problems,
      lastProblem: this.diagnostics.lastProblem,
    };
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Hooks

  /** `chat.message` (plugin/turns/admission.ts); throws PromptRefused when another live process drives the session. */
  async admit(hostSessionId: string, message: HostMessageInfo, parts: readonly HostPart[]): Promise<void> {
    const started = performance.now();
    try {
      await this.admission.admit(this.sessions.state(hostSessionId), message, parts);
    } finally {
      this.recordTiming("admit", started);
    }
  }

  /** `event`: final messages and parts are stored, statuses decide turn outcomes, lifecycle events act on memory. */
  onEvent(event: { type?: string; properties?: Record<string, unknown> }): void {
    try {
      const hostEvent = readHostEvent(event);
      if (!hostEvent) return;
      switch (hostEvent.type) {
        case "part": {
          const { part } = hostEvent;
          // Only sessions this process drives: the cache would otherwise grow with every replayed or foreign part.
          const state = this.sessions.get(part.sessionID);
          if (state && !state.ingested.has(part.messageID)) this.records.notePart(part);
          return;
        }
        case "assistant": {
          // A session this process never admitted a turn for (e.g. a fork's replayed copies) is not followed.
          const state = this.sessions.get(hostEvent.info.sessionID);
          if (!state) return;
          const { info } = hostEvent;
          // The step's request is being prepared: its transform will ask for the model's limits.
          if (!info.time?.completed) this.limits.prefetch(info.providerID, info.modelID);
          this.outcomes.onAssistant(state, info);
          return;
        }
        case "created":
          this.sessions.noteCreated(hostEvent.info, this.clock.now());
          return;
        case "deleted":
          this.onSessionDeleted(hostEvent.hostSessionId);
          return;
        case "idle": {
          const state = this.sessions.get(hostEvent.hostSessionId);
          if (state) this.outcomes.onIdle(state);
          return;
        }
        case "busy": {
          const state = this.sessions.get(hostEvent.hostSessionId);
          if (state) this.outcomes.onBusy(state);
          return;
        }
        case "updated": {
          const state = this.sessions.get(hostEvent.hostSessionId);
          if (state) this.rewinds.onRevertStaged(state, hostEvent.revertTo);
          return;
        }
        case "removed":
          this.rewinds.onMessageRemoved(this.sessions.state(hostEvent.hostSessionId), hostEvent.messageId);
          return;
      }
    } catch (error) {
      void this.problem("event", undefined, error);
    }
  }

  /** `experimental.chat.messages.transform` (plugin/request/transform.ts). */
  async transform(messages: HostMessage[]): Promise<void> {
    const hostSessionId = messages.at(-1)?.info.sessionID;
    if (!hostSessionId) return;
    await this.requests.transform(this.sessions.get(hostSessionId), messages, hostSessionId);
  }

  /** `chat.params` of an agent request: the request is on its way (see EmbeddedWorker.onFirstRequestSent). */
  noteRequestSent(): void {
    this.worker?.onFirstRequestSent(() => this.memory.host.jobsWaitingForWorker());
  }

  /**
   * `chat.params` of a request of the session (not the title's): the checks as OpenCode's side left them when it decided
   * the request's refusal (plugin/transport/remote-hooks.ts, the one place that decides it): an unsized request checked
   * against the model's window, and the error it raised, which an idle then reads as the turn's failure.
   */
  noteRequestChecks(hostSessionId: string, checks: RequestChecks): void {
    const state = this.sessions.get(hostSessionId);
    if (!state) return;
    requestSlice(state).noteChecks(checks);
  }

  /**
   * The session's request checks as its last transform left them: the plugin's thread sends them back with the
   * transformed request, so that OpenCode's thread answers `chat.params` itself (plugin/transport/remote-hooks.ts).
   */
  requestChecks(hostSessionId: string): RequestChecks | undefined {
    const state = this.sessions.get(hostSessionId);
    return state ? requestSlice(state).checks() : undefined;
  }

  /** `experimental.chat.system.transform`: the system prompt's size, for the next request's budget. */
  noteSystemPrompt(hostSessionId: string, system: readonly string[]): void {
    const state = this.sessions.get(hostSessionId);
    if (state) requestSlice(state).noteSystemTokens(system.reduce((sum, s) => sum + estimateTokens(s), 0));
  }

  noteModelLimits(providerId: string, modelId: string, limit: { context?: number; output?: number } | undefined): void {
    this.limits.note(providerId, modelId, limit);
  }

  /** `experimental.session.compacting`: the session's next request is OpenCode's own compaction. */
  noteCompacting(hostSessionId: string): void {
    const state = this.sessions.get(hostSessionId);
    if (state) requestSlice(state).noteCompacting();
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
    // Admissions whose queued part still runs (plugin/turns/admission.ts): a failed one removes its turn.
    await Promise.all(state ? [...state.turns.values()].map((turn) => turn.admission) : []);
    const turn = state ? turnOfToolCall(state, assistantMessageId) : undefined;
    if (!state?.session || !turn) {
      throw new Error(
        "optchat: this session has no turn admitted by optchat in this OpenCode process (was the plugin loaded when the prompt was sent?); memory tools need one",
      );
    }
    return await this.records.pinnedTurn(state, state.session, turn.turnId);
  }

  sessionOf(hostSessionId: string): SessionState | undefined {
    return this.sessions.get(hostSessionId);
  }

  recordTiming(op: string, started: number, extra: Record<string, unknown> = {}): void {
    this.diagnostics.recordTiming(op, started, extra);
  }

  problem(
    operation: string,
    hostSessionId: string | undefined,
    error: unknown,
    options?: { background?: boolean },
  ): Promise<void> {
    return this.diagnostics.problem(operation, hostSessionId, error, options);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Internals

  /** `session.deleted`: the policy acts on memory (plugin/turns/session-deleted.ts) once the session's pending work ran. */
  private onSessionDeleted(hostSessionId: string): void {
    const state = this.sessions.get(hostSessionId);
    const pending = state?.queue ?? Promise.resolve();
    if (state) {
      // The process state goes in the session's order of work: a job queued before the delete still finds it.
      this.jobs.enqueue(state, "lifecycle", async () => {
        this.lease.forget(state);
        this.clock.clear(state.idleCheck?.timer);
        this.records.dropSession(hostSessionId);
        this.sessions.delete(hostSessionId);
      });
    }
    const mode = this.config.plugin.onSessionDelete;
    const log = (message: string) => this.diagnostics.log("info", message);
    const problem = (error: unknown) => this.problem("delete", hostSessionId, error);
    void onSessionDeleted({ memory: this.memory, host: HOST, mode, log, problem }, hostSessionId, pending);
  }

  /** Starts a waiting embedded worker when the turn's memory will wait for summaries (EmbeddedWorker.onRequest). */
  private async startWorkerIfBehind(session: Session, turn: Turn): Promise<void> {
    await this.worker?.onRequest(turn.snapshot.ownBoundary, async () => {
      return (await this.memory.host.treeProgress(session.sessionId, turn.generation)).builtLeaves;
    });
  }
}
