import { setTimeout as delay } from "node:timers/promises";
import {
  type AssembledContext,
  estimateTokens,
  fixedRequestTokens,
  isOptchatError,
  liveBudget,
  type Memory,
  omittedText,
  type Session,
  type Turn,
} from "../../src/memory/index.js";
import type { Clock } from "../base/clock.js";
import type { ResolvedPluginConfig } from "../base/config.js";
import { type Diagnostics, describe } from "../base/diagnostics.js";
import { type HostMessage, lastRequestIndex, messageText, replaceablePrefix } from "../opencode/messages.js";
import type { SessionMemory } from "../turns/session-memory.js";
import type { SessionState } from "../turns/session-state.js";
import { EPOCH_LIMITS } from "./cache-epoch.js";
import { actionableError } from "./checks.js";
import { applyEpoch, type CacheEpoch, startEpoch } from "./epoch-layout.js";
import { memoryLayout, memoryMessage, withLeadingText } from "./memory-message.js";
import type { ModelLimits } from "./model-limits.js";
import { assemblySettings, preparedFor, prepareTurn } from "./prepared-context.js";
import { measuredSize, noteSent, rememberedSize } from "./request-size.js";
import { requestSlice } from "./slice.js";
import { applyCheckpoint, messageTokens, toolsDone, turnRefs } from "./turn-checkpoint.js";

export interface RequestTransformDeps {
  readonly memory: Memory;
  readonly config: ResolvedPluginConfig;
  readonly holder: string;
  readonly records: SessionMemory;
  readonly limits: ModelLimits;
  readonly diagnostics: Diagnostics;
  readonly clock: Clock;
  /** Starts a waiting embedded worker when the turn's memory will wait for summaries. */
  readonly startWorkerIfBehind: (session: Session, turn: Turn) => Promise<void>;
}

type InjectionStatus = "injected" | "not_ready" | "budget_exceeded" | "failed" | "skipped";
type Recorder = (status: InjectionStatus, detail: Record<string, unknown>, turnId?: string, error?: string) => void;

/** The request's token budget (src/core/context.ts), and what the request needs besides memory. */
interface RequestBudget {
  readonly budget: {
    windowTokens: number;
    instructionsTokens: number;
    activeTokens: number;
    outputTokens: number;
    reserveTokens: number;
  };
  readonly fixed: number;
  readonly model: { providerID: string; modelID: string } | undefined;
  /** False when the model's limits were unknown and a window was assumed (`chat.params` checks it then). */
  readonly sized: boolean;
  /** The instructions and tools were measured from OpenCode's reported usage of the previous step (issue 36). */
  readonly measured: boolean;
  /** Tokens of the kept messages before the live turn's steps (earlier turns kept verbatim, the request itself). */
  readonly baseTokens: number;
  /**
   * Provider tokens per estimated token (1 until measured): the budget's figures are in estimated tokens, so the
   * window, answer, instructions and reserve were divided by it.
   */
  readonly ratio: number;
  /** The model's window in the provider's tokens. */
  readonly window: number;
}

/** How long a checkpoint waits for the latest steps' records before it cuts them without their refs. */
const INGESTION_WAIT_MS = 3_000;

/** The share of the request's room the live turn's steps may claim before memory (the rest stays memory's). */
const LIVE_SHARE = 0.6;

/**
 * `experimental.chat.messages.transform` (seed 000 §7, §13 "before each agent model call"): replaces the part of the
 * session's history that memory stands for with the memory message, within the request's token budget, laid out for
 * the provider's prompt cache (docs/caching.md). Never throws: OpenCode 1.18.33 kills the turn silently on a throw; the
 * native history then goes out unchanged and the problem is recorded.
 */
export class RequestTransform {
  constructor(private readonly deps: RequestTransformDeps) {}

  /** At a turn's admission: its memory is read now, so its first request's transform only fits it to the budget. */
  prepare(state: SessionState, ctx: { sessionId: string; turnId: string }): void {
    requestSlice(state).prepared = prepareTurn(this.deps.memory, this.deps.config, ctx);
  }

  async transform(state: SessionState | undefined, messages: HostMessage[], hostSessionId: string): Promise<void> {
    const started = performance.now();
    const timing: { assembleMs?: number } = {};
    const record = (status: InjectionStatus, detail: Record<string, unknown>, turnId?: string, error?: string) =>
      this.recordInjection(state, hostSessionId, started, timing, { status, detail, turnId, error });
    try {
      await this.transformOrSkip(state, messages, hostSessionId, record, timing);
    } catch (error) {
      record("failed", { reason: "memory unavailable: native history sent unchanged" }, undefined, describe(error));
      await this.deps.diagnostics.problem("transform", hostSessionId, error);
    }
  }

  private async transformOrSkip(
    state: SessionState | undefined,
    messages: HostMessage[],
    hostSessionId: string,
    record: Recorder,
    timing: { assembleMs?: number },
  ): Promise<void> {
    // A session's first claim may still be on its way, at the head of its admission (plugin/turns/admission.ts).
    if (state && !state.session) await [...state.turns.values()].at(-1)?.admission;
    if (!state?.session) return record("skipped", { reason: "no turn of this session was admitted by this process" });
    const found = await this.requestTurn(state, messages);
    if (found.type === "skip") return record("skipped", { reason: found.reason });
    await this.inject(state, state.session, messages, { hostSessionId, ...found }, record, timing);
  }

  /** The turn the request belongs to, or why memory stays out of it (the native history then goes out unchanged). */
  private async requestTurn(
    state: SessionState,
    messages: readonly HostMessage[],
  ): Promise<
    | { type: "skip"; reason: string }
    | { type: "turn"; turnId: string; requestIndex: number; request: HostMessage | undefined }
  > {
    if (state.disabled) return { type: "skip", reason: state.disabled };
    if (state.removed.size > 0) await state.rewinding;
    if (state.removed.size > 0) {
      return { type: "skip", reason: "a revert was committed and the session's new generation is not written yet" };
    }
    requestSlice(state).pendingError = undefined;
    requestSlice(state).unsized = undefined;
    if (requestSlice(state).compacting) {
      requestSlice(state).compacting = false;
      // Native compaction summarizes OpenCode's own transcript, never our synthetic view (seed 000 §13).
      return { type: "skip", reason: "native compaction request: history passed through unchanged" };
    }
    // No wait for this session's pending ingestion: admission already waited for the earlier turns, and the current
    // turn's own messages are never replaced (they are at or after its boundary), sealed yet or not.
    const requestIndex = lastRequestIndex(messages);
    const request = requestIndex >= 0 ? (messages[requestIndex] as HostMessage) : undefined;
    const turnOf = () =>
      (request && state.turnOfMessage.get(request.info.id)) ?? [...state.turns.values()].at(-1)?.turnId;
    // The admission's queued part may still run (plugin/turns/admission.ts); a failed one leaves the turn unadmitted.
    await state.turns.get(turnOf() ?? "")?.admission;
    if (state.claimRefused) {
      // The session's first claim, made after its prompt was admitted (plugin/turns/admission.ts), was refused after all.
      requestSlice(state).pendingError = state.claimRefused;
      return { type: "skip", reason: "another OpenCode process holds the session's lease" };
    }
    const turnId = turnOf();
    if (!turnId) return { type: "skip", reason: "the request's user message was not admitted by optchat" };
    return { type: "turn", turnId, requestIndex, request };
  }

  /** Fits the turn's memory to the request's budget and lays it out (or records why it cannot be served). */
  private async inject(
    state: SessionState,
    session: Session,
    messages: HostMessage[],
    at: { hostSessionId: string; turnId: string; requestIndex: number; request: HostMessage | undefined },
    record: Recorder,
    timing: { assembleMs?: number },
  ): Promise<void> {
    const { hostSessionId, turnId, requestIndex, request } = at;
    const turn = await this.deps.records.pinnedTurn(state, session, turnId);
    await this.deps.records.loadSeqs(state, session);
    const replaceable =
      this.deps.config.plugin.mode === "replace"
        ? replaceablePrefix(messages, (id) => state.seqs.get(id), lowestOpenBoundary(state, turn))
        : 0;
    const sizing = await this.requestBudget(state, messages, { turnId, replaceable, requestIndex });
    const { budget, fixed, model } = sizing;
    if (fixed > budget.windowTokens && sizing.measured) {
      // Nothing optchat can drop makes this fit: the instructions, tools and current turn alone exceed the window
      // (seed 000 §7 "Long active turn": stop explicitly rather than send a request the provider must refuse).
      const real = (tokens: number) => Math.round(tokens * sizing.ratio);
      const message = `instructions (~${real(budget.instructionsTokens)} tokens, tools included), the current turn (~${real(budget.activeTokens)}), the answer reservation (${real(budget.outputTokens)}) and the reserve (${real(budget.reserveTokens)}) need ${real(fixed)} tokens; the window of ${model ? `${model.providerID}/${model.modelID}` : "the model"} is ${sizing.window}`;
      requestSlice(state).pendingError = actionableError("BUDGET_EXCEEDED", message);
      return record("budget_exceeded", { budget, model }, turnId, message);
    }
    // A turn admitted here asked at admission (plugin/turns/admission.ts); a continuation turn asks now.
    if (requestSlice(state).prepared?.turnId !== turnId) await this.deps.startWorkerIfBehind(session, turn);
    const assembling = performance.now();
    const assembly = await this.assemble(state, session, turnId, sizing);
    if (assembly.type === "refused") {
      const { code, message } = assembly;
      requestSlice(state).pendingError = actionableError(code, message);
      return record(code === "MEMORY_NOT_READY" ? "not_ready" : "budget_exceeded", { budget, model }, turnId, message);
    }
    const { context, reused } = assembly;
    timing.assembleMs = Math.round((performance.now() - assembling) * 1000) / 1000;
    const checkpoint = await this.checkpoint(state, session, messages, { turnId, requestIndex, sizing, context });
    if (checkpoint && !checkpoint.fits && sizing.measured) {
      // Even with every finished step as a line the live turn does not fit: one result alone is larger than the room.
      const real = (tokens: number) => Math.round(tokens * sizing.ratio);
      const left = Math.max(
        0,
        budget.windowTokens - fixed + budget.activeTokens - context.tokens.used - sizing.baseTokens,
      );
      const message = `the live turn needs ${real(checkpoint.tokens)} tokens with its ${checkpoint.cut} earlier steps as checkpoint lines, and ${real(left)} are left after instructions, tools, memory and the answer reservation (window ${sizing.window}): the latest step's result alone is too large. Nothing was lost: every step is stored`;
      requestSlice(state).pendingError = actionableError("CHECKPOINT_TOO_LARGE", message);
      return record("budget_exceeded", { budget, model, checkpoint }, turnId, message);
    }
    requestSlice(state).assembled = { turnId, context };
    if (!sizing.sized)
      requestSlice(state).unsized = {
        tokens: Math.ceil((fixed + context.tokens.used) * sizing.ratio),
        assumedWindow: sizing.window,
      };
    const place = { hostSessionId, turnId, requestIndex, request: messages[requestIndex] ?? request, replaceable };
    this.present(state, messages, place, { context, reused, sizing, checkpoint }, record);
    noteSent(state, messages);
  }

  /**
   * The live turn's execution checkpoint (plugin/request/turn-checkpoint.ts, issue 36): its earlier steps as lines
   * when the steps outgrow what instructions, tools, memory, the kept messages and the answer leave.
   */
  private async checkpoint(
    state: SessionState,
    session: Session,
    messages: HostMessage[],
    at: { turnId: string; requestIndex: number; sizing: RequestBudget; context: AssembledContext },
  ) {
    const { budget } = at.sizing;
    const room =
      budget.windowTokens -
      budget.instructionsTokens -
      budget.outputTokens -
      budget.reserveTokens -
      at.context.tokens.used -
      at.sizing.baseTokens;
    const host = this.deps.memory.host;
    const { sessionId, currentGeneration } = session;
    const readRefs = () =>
      turnRefs(state, `${sessionId}/${currentGeneration}/${at.turnId}`, (afterSeq) =>
        host.turnResultRefs(sessionId, currentGeneration, at.turnId, afterSeq),
      );
    const where = {
      ...at,
      budget: liveBudget(Math.max(0, room), budget.windowTokens, at.sizing.ratio),
      fullRoom: Math.max(0, room + at.context.tokens.used),
    };
    // Most steps neither move the cut nor write a line: they need no refs, so the turn's results are not read.
    const dry = applyCheckpoint(state, messages, { ...where, refs: undefined, dryRun: true });
    if (dry && !dry.needsRefs) return applyCheckpoint(state, messages, { ...where, refs: undefined });
    let refs = await readRefs();
    if (applyCheckpoint(state, messages, { ...where, refs, dryRun: true })?.fits === false) {
      // The latest finished steps may still be on their way to the store (the session's ingestion queue): a short wait
      // lets their lines point at them; past it they are cut with lines whose refs come at a later request.
      await Promise.race([state.queue.catch(() => {}), delay(INGESTION_WAIT_MS)]);
      refs = await readRefs();
      if (applyCheckpoint(state, messages, { ...where, refs, dryRun: true })?.fits === false) {
        return applyCheckpoint(state, messages, { ...where, refs, requireStored: false });
      }
    }
    return applyCheckpoint(state, messages, { ...where, refs });
  }

  /**
   * The assembled memory into the request: re-sent from the session's cache epoch when it continues, else laid out
   * afresh (which may start a new epoch).
   */
  private present(
    state: SessionState,
    messages: HostMessage[],
    place: {
      hostSessionId: string;
      turnId: string;
      requestIndex: number;
      request: HostMessage | undefined;
      replaceable: number;
    },
    assembled: { context: AssembledContext; reused: boolean; sizing: RequestBudget; checkpoint?: unknown },
    record: Recorder,
  ): void {
    const { hostSessionId, turnId, requestIndex, request, replaceable } = place;
    const { context, reused, sizing } = assembled;
    const checkpoint = assembled.checkpoint ? { checkpoint: assembled.checkpoint } : {};
    const { budget, fixed, model } = sizing;
    // Partial readiness may leave the session memory out or incomplete: then nothing it should stand for is removed.
    const replace = replaceable > 0 && !context.historyComplete ? 0 : replaceable;
    const epochReason = this.continueEpoch(state, messages, {
      turnId,
      requestIndex,
      replaceable: replace,
      context,
      fixedTokens: fixed - budget.activeTokens,
      windowTokens: budget.windowTokens,
    });
    if (epochReason === undefined) {
      const epoch = requestSlice(state).epoch as CacheEpoch;
      if (!sizing.sized)
        requestSlice(state).unsized = {
          tokens: Math.ceil(epoch.requestTokens * sizing.ratio),
          assumedWindow: sizing.window,
        };
      const continued = { epoch: { turnId: epoch.turnId, turns: epoch.turns.size, continued: true } };
      const { tokens, snapshot } = context;
      record(
        "injected",
        {
          ...continued,
          blocks: epoch.blocks,
          kept: messages.length - 1,
          reused,
          budget,
          model,
          tokens,
          snapshot,
          ...checkpoint,
        },
        turnId,
      );
      return;
    }
    const keptCount = messages.length - replace;
    const blockSizes = this.layOut(state, messages, { hostSessionId, turnId, request, replace, context });
    record(
      "injected",
      {
        replaced: replace,
        kept: keptCount,
        reused,
        budget,
        model,
        tokens: context.tokens,
        blocks: blockSizes,
        omitted: context.omitted.map(omittedText),
        snapshot: context.snapshot,
        ...checkpoint,
        ...(requestSlice(state).epoch ? { epoch: { turnId, turns: 1, started: epochReason } } : {}),
      },
      turnId,
    );
  }

  /** The request's budget: its window, what it needs besides memory (src/core/context.ts). */
  private async requestBudget(
    state: SessionState,
    messages: readonly HostMessage[],
    at: { turnId: string; replaceable: number; requestIndex: number },
  ): Promise<RequestBudget> {
    const { turnId, replaceable, requestIndex } = at;
    const plugin = this.deps.config.plugin;
    // The live turn's settled messages are estimated once (turn-checkpoint.ts messageTokens), not at every step.
    const tokensOf = (from: number, to: number) =>
      messages
        .slice(from, to)
        .reduce(
          (sum, m, i) => sum + messageTokens(state, turnId, m, from + i < messages.length - 1 && toolsDone(m)),
          0,
        );
    // The live turn's steps follow the request message; what precedes them in the kept part is charged whole.
    const stepsFrom = requestIndex >= replaceable ? requestIndex + 1 : replaceable;
    const baseTokens = tokensOf(replaceable, stepsFrom);
    const stepsTokens = tokensOf(stepsFrom, messages.length);
    const model = modelOf(messages);
    const found = model ? await this.deps.limits.of(model.providerID, model.modelID) : undefined;
    const limits = found?.limits;
    const window = limits?.context ?? (plugin.windowTokens || 32_000);
    // Instructions and tools as the provider counted them, with its tokens per estimated token, fitted through the
    // session's last reported steps (issue 36, request-size.ts); else the system prompt measured at system.transform
    // (which runs after this hook: the previous step's size, at least 4,000 tokens) and the configured charge for
    // tools, which a plugin cannot see.
    const measured = measuredSize(state, messages);
    // A session's first request: another session's measure of the same agent and model, as an estimate (never refuses).
    const size = measured ?? rememberedSize(messages);
    // The budget is kept in estimated tokens (what memory and the messages are measured in): the window, answer and
    // instructions, counted by the provider, are converted at the measured ratio.
    const ratio = size?.ratio ?? 1;
    const estimated = (tokens: number) => Math.ceil(tokens / ratio);
    const windowTokens = Math.floor(window / ratio);
    const outputTokens = estimated(plugin.outputTokens || Math.min(limits?.output ?? 4_096, 32_000));
    const instructionsTokens = estimated(
      size?.overhead ?? Math.max(requestSlice(state).systemTokens ?? 0, 4_000) + plugin.toolsTokens,
    );
    // A measured request leaves only the estimate of what changed since to chance: a thirty-second of the window.
    const reserveTokens =
      measured === undefined ? plugin.reserveTokens : estimated(Math.min(plugin.reserveTokens, Math.ceil(window / 32)));
    // The live turn claims at most its share of the room against memory: past it, its steps are checkpointed.
    const room = Math.max(0, windowTokens - instructionsTokens - outputTokens - reserveTokens - baseTokens);
    const activeTokens = baseTokens + Math.min(stepsTokens, Math.floor(room * LIVE_SHARE));
    const budget = { windowTokens, instructionsTokens, activeTokens, outputTokens, reserveTokens };
    // Limits remembered from another process are checked against the real window at chat.params, as an assumed one.
    return {
      budget,
      fixed: fixedRequestTokens(budget),
      model,
      sized: found?.confirmed === true,
      measured: measured !== undefined,
      baseTokens,
      ratio,
      window,
    };
  }

  /**
   * The memory for this request, from the turn's preparation and its last assembly: memory returns that assembly as it
   * is while it still serves (every step of a turn reads the same pinned snapshot, src/memory/assembly.ts
   * `AssembleFrom`), so the blocks stay byte-identical across the steps.
   */
  private async assemble(
    state: SessionState,
    session: Session,
    turnId: string,
    { budget }: RequestBudget,
  ): Promise<
    | { type: "assembled"; context: AssembledContext; reused: boolean }
    | { type: "refused"; code: "MEMORY_NOT_READY" | "BUDGET_EXCEEDED"; message: string }
  > {
    const { memory, config } = this.deps;
    const slice = requestSlice(state);
    const held = slice.assembled;
    try {
      const context = await memory.assembleContext(
        { sessionId: session.sessionId, turnId },
        { ...budget, ...assemblySettings(config) },
        {
          prepared: await preparedFor(slice.prepared, turnId),
          previous: held?.turnId === turnId ? held.context : undefined,
        },
      );
      return { type: "assembled", context, reused: context.reused };
    } catch (error) {
      if (isOptchatError(error, "MEMORY_NOT_READY") || isOptchatError(error, "BUDGET_EXCEEDED")) {
        return {
          type: "refused",
          code: error.code as "MEMORY_NOT_READY" | "BUDGET_EXCEEDED",
          message: describe(error),
        };
      }
      throw error;
    }
  }

  /**
   * Puts the memory into the request: stable memory first, in its own message, in place of the `replace` messages it
   * stands for; the volatile rest leads the first kept user message (docs/caching.md). Starts the session's cache
   * epoch when the layout allows one. Returns the blocks' sizes for the injection record.
   */
  private layOut(
    state: SessionState,
    messages: HostMessage[],
    at: {
      hostSessionId: string;
      turnId: string;
      request: HostMessage | undefined;
      replace: number;
      context: AssembledContext;
    },
  ): { name: string; tokens: number; lines: number; bytes: number }[] {
    const { hostSessionId, turnId, request, replace, context } = at;
    const mode = this.deps.config.plugin.mode;
    const blocks = mode === "augment" ? context.blocks.filter((b) => b.name === "shared_memory") : context.blocks;
    const { publicationHighWater, ownBoundary } = context.snapshot;
    const omitted = context.omitted.map(omittedText);
    const layout = memoryLayout(blocks, omitted, { replaced: replace, publicationHighWater, ownBoundary });
    const anchorIndex = messages.findIndex((m, i) => i >= replace && m.info.role === "user");
    const anchor = anchorIndex >= 0 ? messages[anchorIndex] : (request ?? messages.at(-1));
    const stableParts = anchorIndex >= 0 ? layout.stable : [...layout.stable, layout.volatile];
    messages.splice(0, replace, memoryMessage(hostSessionId, turnId, stableParts, anchor?.info, this.deps.clock.now()));
    const moved = anchorIndex - replace + 1;
    const blockSizes = blocks.map((b) => ({
      name: b.name,
      tokens: b.tokens,
      lines: b.lines,
      bytes: Buffer.byteLength(b.text),
    }));
    if (anchorIndex >= 0) messages[moved] = withLeadingText(messages[moved] as HostMessage, layout.volatile, turnId);
    requestSlice(state).epoch =
      mode === "replace" && context.omitted.length === 0 && anchorIndex === replace
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
    requestSlice(state).epochSnapshot = requestSlice(state).epoch
      ? { scopeId: context.snapshot.scopeId, retentionEpoch: context.snapshot.retentionEpoch }
      : undefined;
    return blockSizes;
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
    const plugin = this.deps.config.plugin;
    if (plugin.mode !== "replace") return "augment mode";
    if (!requestSlice(state).epoch) return "no epoch yet";
    // A deletion, a revocation or a revert retired memory since the epoch's memory was assembled (the scope's
    // retention epoch moved, issue 15): re-sent, it could carry removed text.
    const pinned = requestSlice(state).epochSnapshot;
    const now = request.context.snapshot;
    if (!pinned || pinned.scopeId !== now.scopeId || pinned.retentionEpoch !== now.retentionEpoch) {
      return "memory was retired since the epoch began";
    }
    const tokensOf = (m: HostMessage) => estimateTokens(messageText(m));
    const limits = { ...EPOCH_LIMITS, turns: plugin.cacheEpochTurns, keptTokens: plugin.cacheEpochKeptTokens };
    return applyEpoch(requestSlice(state).epoch as CacheEpoch, messages, {
      ...request,
      limits,
      tokensOf,
      estimate: estimateTokens,
      fits: (memoryTokens, keptTokens) => {
        (requestSlice(state).epoch as CacheEpoch).requestTokens = request.fixedTokens + memoryTokens + keptTokens;
        return request.fixedTokens + memoryTokens + keptTokens <= request.windowTokens;
      },
    });
  }

  /** The request's outcome: in the session's state (memory_inspect), the injections table and the timings file. */
  private recordInjection(
    state: SessionState | undefined,
    hostSessionId: string,
    started: number,
    timing: { assembleMs?: number },
    outcome: { status: InjectionStatus; detail: Record<string, unknown>; turnId?: string; error?: string },
  ): void {
    const { status, detail, turnId, error } = outcome;
    const summary = { status, turnId, ...detail, ms: Math.round((performance.now() - started) * 100) / 100 };
    const { diagnostics, memory, config, holder } = this.deps;
    diagnostics.recordTiming("transform", started, {
      status,
      assembleMs: timing.assembleMs,
      reused: detail.reused === true,
    });
    if (state)
      requestSlice(state).lastInjection = {
        at: new Date(this.deps.clock.now()).toISOString(),
        ...summary,
        ...(error ? { error } : {}),
      };
    const sessionId = state?.session?.sessionId;
    if (!sessionId) return;
    memory.host
      .recordInjection({
        sessionId,
        turnId: turnId ?? null,
        holder,
        status,
        mode: config.plugin.mode,
        query: (turnId && state?.pinned.get(turnId)?.query) || null,
        detail: summary,
        error: error ?? null,
      })
      .catch((e) => diagnostics.problem("transform", hostSessionId, e));
  }
}

/**
 * The lowest boundary of the turns still open here: a prompt queued during another turn's tool loop must not make that
 * turn's own request replaceable (its records lie below the queued turn's boundary).
 */
function lowestOpenBoundary(state: SessionState, turn: Turn): number {
  let boundary = turn.snapshot.ownBoundary;
  for (const open of state.turns.values()) {
    const pinned = open.finished ? undefined : state.pinned.get(open.turnId);
    if (pinned) boundary = Math.min(boundary, pinned.snapshot.ownBoundary);
  }
  return boundary;
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
