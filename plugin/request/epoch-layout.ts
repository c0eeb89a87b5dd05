/**
 * A session's cache epoch applied to OpenCode's messages (the decisions are plugin/request/cache-epoch.ts, the layout
 * docs/caching.md "Across turns: epochs"): the epoch's memory message as first sent, then the native messages from the
 * epoch's first turn on, each user message led by the text it was first sent with.
 */
import type { AssembledContext } from "../../src/memory/index.js";
import type { HostMessage } from "../opencode/messages.js";
import { type EpochLimits, epochDecision, sharedThrough, sharedUpdate } from "./cache-epoch.js";
import { sharedUpdateText, withLeadingText } from "./memory-message.js";

export interface CacheEpoch {
  /** The turn whose request began the epoch. */
  readonly turnId: string;
  /** The native message where kept history begins: the epoch's first turn's request. */
  readonly firstKeptId: string;
  /** The memory message, exactly as the epoch's first request carried it. */
  readonly memory: HostMessage;
  readonly memoryTokens: number;
  /** User message → the text leading it, as first sent (the volatile memory of the first turn, later shared updates). */
  readonly leading: Map<string, { text: string; turnId: string; tokens: number }>;
  readonly turns: Set<string>;
  /** Publications the epoch's memory and updates have shown: [0, shownThrough). */
  shownThrough: number;
  readonly sharedLinesAtStart: number;
  /** The tokens of the latest request laid out from the epoch (for the unsized check of `chat.params`). */
  requestTokens: number;
  /** The memory blocks the epoch's memory holds, as its first injection recorded them (memory_inspect shows them). */
  readonly blocks: readonly Record<string, unknown>[];
}

export function startEpoch(
  turnId: string,
  memory: HostMessage,
  memoryTokens: number,
  first: { id: string; text: string; tokens: number },
  context: AssembledContext,
  blocks: readonly Record<string, unknown>[],
): CacheEpoch {
  const lines = sharedDataLines(context);
  return {
    turnId,
    firstKeptId: first.id,
    memory: structuredClone(memory),
    memoryTokens,
    leading: new Map([[first.id, { text: first.text, turnId, tokens: first.tokens }]]),
    turns: new Set([turnId]),
    shownThrough: sharedThrough(lines),
    sharedLinesAtStart: lines.length,
    requestTokens: 0,
    blocks,
  };
}

export interface EpochRequest {
  readonly turnId: string;
  readonly limits: EpochLimits;
  readonly requestIndex: number;
  /** How many leading messages the memory may replace now (the epoch never replaces more). */
  readonly replaceable: number;
  readonly context: AssembledContext;
  readonly tokensOf: (message: HostMessage) => number;
  readonly estimate: (text: string) => number;
  /** Whether a request holding `memoryTokens` of memory besides the kept native messages fits the window. */
  readonly fits: (memoryTokens: number, keptTokens: number) => boolean;
}

/**
 * Applies the epoch to `messages` (in place) and returns undefined, or returns why the request must start a new epoch
 * (then `messages` is unchanged). A turn's later steps continue the decision its first request made.
 */
export function applyEpoch(epoch: CacheEpoch, messages: HostMessage[], request: EpochRequest): string | undefined {
  const index = messages.findIndex((m) => m.info.id === epoch.firstKeptId);
  if (index < 0) return "the epoch's first message is no longer in the history";
  if (index > request.replaceable) return "the epoch's first message is no longer replaceable";
  const requestMessage = messages[request.requestIndex];
  const kept = messages.slice(index);
  const keptTokens = kept.reduce((sum, m) => sum + request.tokensOf(m), 0);
  let update: { text: string; tokens: number; through: number } | undefined;
  if (!epoch.turns.has(request.turnId)) {
    if (!requestMessage || request.requestIndex < index) return "the turn's request is not after the epoch's start";
    const lines = sharedDataLines(request.context);
    const before = messages.slice(index, request.requestIndex).reduce((sum, m) => sum + request.tokensOf(m), 0);
    const decision = epochDecision(
      {
        turns: epoch.turns.size,
        keptTokens: before,
        sharedLines: lines.length,
        sharedLinesAtStart: epoch.sharedLinesAtStart,
      },
      request.limits,
    );
    if (decision !== "continue") return decision;
    const picked = sharedUpdate(lines, epoch.shownThrough, new Set(request.context.ownPublications));
    const text = sharedUpdateText(request.context.snapshot.publicationHighWater, picked.lines);
    update = { text, tokens: text ? request.estimate(text) : 0, through: picked.through };
  }
  let leadingTokens = update?.tokens ?? 0;
  for (const m of kept) leadingTokens += epoch.leading.get(m.info.id)?.tokens ?? 0;
  if (!request.fits(epoch.memoryTokens + leadingTokens, keptTokens))
    return "the epoch's request would not fit the window";
  if (update && requestMessage) {
    epoch.leading.set(requestMessage.info.id, { text: update.text, turnId: request.turnId, tokens: update.tokens });
    epoch.shownThrough = update.through;
    epoch.turns.add(request.turnId);
  }
  messages.splice(0, index, structuredClone(epoch.memory));
  for (let i = 1; i < messages.length; i++) {
    const message = messages[i] as HostMessage;
    const leading = message.info.role === "user" ? epoch.leading.get(message.info.id) : undefined;
    if (leading?.text) messages[i] = withLeadingText(message, leading.text, leading.turnId);
  }
  return undefined;
}

/** The shared block's data lines (its pieces without the opening and the closing). */
function sharedDataLines(context: AssembledContext): string[] {
  const shared = context.blocks.find((b) => b.name === "shared_memory");
  return shared ? shared.pieces.slice(1, -1) : [];
}
