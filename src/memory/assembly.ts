import {
  availableMemoryTokens,
  type ContextBudgetInput,
  coveredPrefixEnd,
  estimateTokens,
  type MemoryLine,
  type RenderedBlock,
  renderSessionBlock,
  renderSharedBlock,
  splitBudget,
  withoutLines,
} from "../core/context.js";
import { OptchatError } from "../core/errors.js";
import { restrictToPrefix } from "../core/fold.js";
import { sharedRef } from "../core/refs.js";
import { endOf, parseRef, refOf } from "../core/tree.js";
import type { Pool } from "../store/db.js";
import type { TreeListener } from "../store/notifications.js";
import { publicationSeqsOfSession, publishedRangesOfSession } from "../store/publications.js";
import { findSessionTree } from "../store/trees.js";
import { pinOwnViewRevision, type Turn } from "../store/turns.js";
import { findViewRevision, type ViewRevision } from "../store/view-revisions.js";
import type { Config } from "./config.js";
import { fitTokens, type TreeLines } from "./fit-tokens.js";
import { demandMerges } from "./merge-demand.js";
import type { PinnedNodeCache } from "./pinned-nodes.js";
import { type PreviousSource, previousExchangeBlock, withHandOn } from "./previous-exchange.js";
import { type ServedSnapshot, served, turnReader } from "./reader.js";
import { settleTree } from "./views.js";

// Context assembly (seed 000 §7): the memory blocks of one model request of a turn, within its budget.

export interface AssemblyDeps {
  readonly pool: Pool;
  readonly listener: TreeListener;
  readonly config: Config;
  /** Node texts as of a tree event, which never change: every model step of every turn reuses them. */
  readonly pinnedNodes: PinnedNodeCache;
}

export interface AssembleOptions extends ContextBudgetInput {
  readonly previousExchange?: boolean;
  /** strict (default): MEMORY_NOT_READY after the wait; partial: proceed and say in the block what is missing. */
  readonly readiness?: "strict" | "partial";
  readonly waitMs?: number;
}

export interface AssembledBlock {
  readonly name: "shared_memory" | "session_memory" | "previous_exchange";
  readonly text: string;
  /** The text as pieces (text === pieces.join("\n")): opening, each line, closing (core/context.ts). */
  readonly pieces: readonly string[];
  readonly tokens: number;
  readonly lines: number;
}

/** A block an assembly left out (partial readiness, a budget too small for it, the previous exchange not fitting). */
export interface Omitted {
  readonly block: "session memory" | "shared memory" | "previous exchange";
  readonly reason: string;
}

/** An omission as the memory block and the browser say it: `session memory: not summarized yet …`. */
export function omittedText(omitted: Omitted): string {
  return `${omitted.block}: ${omitted.reason}`;
}

export interface AssembledContext {
  readonly blocks: readonly AssembledBlock[];
  readonly tokens: {
    readonly available: number;
    readonly used: number;
    readonly shared: number;
    readonly own: number;
    readonly previous: number;
  };
  readonly snapshot: ServedSnapshot & { readonly ownViewRevision: number | null; readonly retentionEpoch: number };
  /** What could not be included, and why (partial mode, or the previous exchange not fitting). */
  readonly omitted: readonly Omitted[];
  /**
   * The session's history before the turn is all in the session block (present, nothing of it left out): a host may
   * then drop the native messages it stands for.
   */
  readonly historyComplete: boolean;
  /** The `previous` assembly given was returned as it is (`AssembleFrom`). */
  readonly reused: boolean;
  /** The shared view's publications that are this session's own turns (a host keeping native turns skips them). */
  readonly ownPublications: readonly number[];
}

/**
 * What an assembly may start from: `prepared` (from `prepareContext` for the same turn, readiness and previous-exchange
 * setting) spares the reads; `previous`, an earlier assembly of the same turn (an earlier model step), is returned as
 * it is while it is complete, still fits the budget and its snapshot is still current (one retention-epoch check, the
 * one every read of a turn makes): the blocks then stay byte-identical across the steps, which a provider's prompt
 * cache rewards, and the step skips a dozen queries.
 */
export interface AssembleFrom {
  readonly prepared?: PreparedContext | undefined;
  readonly previous?: AssembledContext | undefined;
}

/**
 * What an assembly reads before it knows its budget: the readiness wait, both views with their node texts (measured at
 * full detail), the session's published prefix and the previous exchange. Nothing in it changes for the turn (the
 * snapshot is pinned, nodes are immutable), so a host can prepare it while it prepares the request (the OpenCode plugin
 * does at admission) and `assembleContext` then only fits it to the request's budget.
 */
export interface PreparedContext {
  readonly key: string;
  readonly turn: Turn;
  readonly strict: boolean;
  readonly omitted: readonly Omitted[];
  readonly own: { readonly ready: boolean; readonly revision: number | null; readonly lines: TreeLines };
  readonly sharedLines: TreeLines | undefined;
  /** Records of the session the shared view already holds (its turns are not sent twice, docs/caching.md). */
  readonly publishedOwn: number;
  /** The numbers of the session's publications the shared view holds. */
  readonly ownPublications: readonly number[];
  readonly sharedFullTokens: number | undefined;
  readonly ownFullTokens: number | undefined;
  /** The previous exchange's block, when asked for and there is one. */
  readonly previous: AssembledBlock | undefined;
  /** What the previous exchange's block renders: with a stopped turn's hand-on it is rendered at assembly, in budget. */
  readonly previousSource?: PreviousSource;
  /** The session lines that would repeat the previous exchange word for word (core/context.ts verbatimSessionLines). */
  readonly previousVerbatim: readonly string[];
}

export type PrepareOptions = Pick<AssembleOptions, "previousExchange" | "readiness" | "waitMs">;

const preparedKey = (turn: Turn, options: PrepareOptions) =>
  [
    turn.sessionId,
    turn.generation,
    turn.turnId,
    // A re-pinned turn (retention-epoch.ts) is prepared again: nothing read under its old snapshot is reused.
    turn.snapshot.scopeId,
    turn.snapshot.retentionEpoch,
    turn.snapshot.sharedViewRevision ?? "",
    options.readiness ?? "strict",
    options.previousExchange !== false,
  ].join("\u0000");

/**
 * Reads what `turn`'s assemblies need before their budget is known. Reads only, with one exception: the first
 * preparation of a turn whose own history is ready pins the turn's own view revision (`pinOwnView`), so that every
 * later model step of the turn sees the same session view. A turn built in memory with its own revision already set
 * (a preview) is never written.
 */
export async function prepareContext(
  deps: AssemblyDeps,
  turn: Turn,
  options: PrepareOptions,
): Promise<PreparedContext> {
  const strict = (options.readiness ?? "strict") === "strict";
  const omitted: Omitted[] = [];
  const own = await readOwnView(deps, turn, strict, options.waitMs ?? deps.config.settleTimeoutMs, omitted);
  const sharedLines = await readSharedLines(deps, turn);
  const publishedOwn = sharedLines ? await publishedOwnPrefix(deps.pool, turn, sharedLines.leafCount) : 0;
  const ownPublications = sharedLines ? await ownPublicationSeqs(deps.pool, turn, sharedLines.leafCount) : [];
  // Needs at full detail decide the 30/70 split with spill-over; measuring them also reads the views' node texts.
  const sharedFull = sharedLines
    ? await fitTokens(deps.pool, sharedLines, Number.MAX_SAFE_INTEGER, sharedRenderer(turn))
    : undefined;
  const ownFull =
    own.lines.parts.length > 0
      ? await fitTokens(deps.pool, own.lines, Number.MAX_SAFE_INTEGER, ownRenderer(turn, own.ready, publishedOwn))
      : undefined;
  const exchange = options.previousExchange !== false ? await previousExchangeBlock(deps.pool, turn) : undefined;
  return {
    key: preparedKey(turn, options),
    turn,
    strict,
    omitted,
    own,
    sharedLines,
    publishedOwn,
    ownPublications,
    sharedFullTokens: sharedFull?.tokens,
    ownFullTokens: ownFull?.tokens,
    previous: exchange?.block,
    ...(exchange ? { previousSource: exchange.source } : {}),
    previousVerbatim: exchange?.verbatim ?? [],
  };
}

/**
 * The turn each assembly was made for, as read (a re-pinned turn's new snapshot): kept beside it, not in it, so that an
 * assembly stays plain data (equal to another of the same memory, whichever way its turn was read).
 */
const assembledFor = new WeakMap<AssembledContext, Turn>();

/** The turn `context` was assembled for (the caller holds it: only its retention epoch is read again). */
export function assembledTurn(context: AssembledContext | undefined): Turn | undefined {
  return context ? assembledFor.get(context) : undefined;
}

function remember(context: AssembledContext, turn: Turn): AssembledContext {
  assembledFor.set(context, turn);
  return context;
}

/** Whether `previous` may be served again for `turn` (read now, its retention epoch checked) within `options`. */
export function reusable(previous: AssembledContext | undefined, turn: Turn, options: AssembleOptions): boolean {
  const then = assembledTurn(previous);
  if (!previous || !then || previous.omitted.length > 0) return false;
  return (
    then.sessionId === turn.sessionId &&
    then.turnId === turn.turnId &&
    then.generation === turn.generation &&
    then.snapshot.scopeId === turn.snapshot.scopeId &&
    then.snapshot.retentionEpoch === turn.snapshot.retentionEpoch &&
    previous.tokens.used <= availableMemoryTokens(options)
  );
}

/**
 * The memory blocks for one model request of `turn`, within `options`' budget, from what `from` holds (the result is
 * the same as without it; `reused` says when it is `from.previous` itself).
 */
export async function assembleContext(
  deps: AssemblyDeps,
  turn: Turn,
  options: AssembleOptions,
  { prepared, previous }: AssembleFrom = {},
): Promise<AssembledContext> {
  if (previous && reusable(previous, turn, options)) return remember({ ...previous, reused: true }, turn);
  const ready =
    prepared && prepared.key === preparedKey(turn, options) ? prepared : await prepareContext(deps, turn, options);
  const omitted = [...ready.omitted];
  const available = availableMemoryTokens(options);
  const blocks: AssembledBlock[] = [];
  // Merges on demand: a window too small for the view asks the compactor for the merges a coarser cover needs and
  // waits for them within the readiness wait (merge-demand.ts); with every merge built (`all`) there is nothing to ask.
  const waitMs = options.waitMs ?? deps.config.settleTimeoutMs;
  const demandUntil = deps.config.compactorMerges === "needed" && waitMs > 0 ? Date.now() + waitMs : undefined;
  const fitting: BlockFitting = {
    pool: deps.pool,
    strict: ready.strict,
    windowTokens: options.windowTokens,
    blocks,
    omitted,
    ...(demandUntil !== undefined ? { demandUntil } : {}),
  };
  const fitted = await fitMemoryBlocks(fitting, ready, available);
  const { sharedTokens } = fitted;
  let { ownTokens } = fitted;
  let previousTokens = 0;
  const left = available - sharedTokens - ownTokens;
  const exchange = withHandOn(ready.previous, ready.previousSource, left, options.windowTokens);
  if (exchange) {
    if (exchange.tokens <= left) {
      // Fitted with the session block whole; leaving out its lines that the exchange repeats only frees budget. Not
      // without a shared block: the session block then holds the session's whole history and leads the cache-stable
      // memory (docs/caching.md "Without a shared block"), where lines dropped at one turn and present at the next
      // would end the common prefix before them (bench cache, OPTCHAT_SCOPE=isolated: every epoch of s2 wrote its
      // whole memory again).
      if (sharedTokens > 0) ownTokens = dropRepeatedLines(blocks, new Set(ready.previousVerbatim));
      blocks.push(exchange);
      previousTokens = exchange.tokens;
    } else {
      omitted.push({ block: "previous exchange", reason: `needs ${exchange.tokens} tokens, ${left} left` });
    }
  }
  const used = sharedTokens + ownTokens + previousTokens;
  // Validation: the whole is within the budget, measured again on the final text.
  const measured = blocks.reduce((sum, block) => sum + estimateTokens(block.text), 0);
  if (measured !== used || used > available)
    throw new Error(`context assembly exceeded its budget: ${measured} tokens for ${available}`);
  return remember(
    {
      blocks,
      tokens: { available, used, shared: sharedTokens, own: ownTokens, previous: previousTokens },
      snapshot: {
        ...served(turnReader(turn)),
        ownViewRevision: ready.own.revision,
        retentionEpoch: turn.snapshot.retentionEpoch,
      },
      omitted,
      historyComplete:
        blocks.some((block) => block.name === "session_memory") && !omitted.some((o) => o.block === "session memory"),
      reused: false,
      ownPublications: ready.ownPublications,
    },
    turn,
  );
}

/** The shared view pinned by the turn's snapshot, as lines to fit (its node texts from the process-wide cache). */
async function readSharedLines(deps: AssemblyDeps, turn: Turn): Promise<TreeLines | undefined> {
  const view = await readSharedView(deps.pool, turn);
  return view
    ? {
        treeId: view.treeId,
        parts: view.parts,
        leafCount: view.leafCount,
        at: { atEvent: view.eventNo },
        revision: view.revision,
        name: sharedRef,
        cache: new Map(),
        pinned: deps.pinnedNodes,
      }
    : undefined;
}

/**
 * The shared and session blocks within `available` tokens: their needs at full detail (measured by `prepareContext`)
 * decide the 30/70 split with spill-over (core/context.ts splitBudget); each block is then projected into its share.
 */
async function fitMemoryBlocks(
  fitting: BlockFitting,
  prepared: PreparedContext,
  available: number,
): Promise<{ sharedTokens: number; ownTokens: number }> {
  const { turn, own, sharedLines, publishedOwn, sharedFullTokens, ownFullTokens } = prepared;
  const split = splitBudget(available, sharedFullTokens ?? 0, ownFullTokens ?? 0);
  let sharedTokens = 0;
  if (sharedLines && sharedFullTokens !== undefined) {
    const budget = split.shared + Math.max(0, split.own - (ownFullTokens ?? 0));
    sharedTokens = await fitBlock(fitting, "shared_memory", sharedLines, sharedRenderer(turn), budget, split.shared);
  }
  let ownTokens = 0;
  if (ownFullTokens !== undefined) {
    // The session's turns the shared view already holds are not sent twice (docs/caching.md): the session block shows
    // only its lines past the covered prefix, while the shared block is included. Without the shared block, nothing
    // of this session is shown there: the session block then shows all of it.
    const from = sharedTokens === 0 ? 0 : publishedOwn;
    const left = available - sharedTokens;
    const render = ownRenderer(turn, own.ready, from, sharedTokens === 0);
    ownTokens = await fitBlock(fitting, "session_memory", own.lines, render, left, left);
  }
  return { sharedTokens, ownTokens };
}

function sharedRenderer(turn: Turn): (lines: readonly MemoryLine[]) => RenderedBlock {
  return (lines) => renderSharedBlock({ scopeId: turn.snapshot.scopeId }, lines);
}

/** The session block's renderer, showing only the lines that end past record `from`; `whole` when no shared block is sent. */
function ownRenderer(
  turn: Turn,
  ready: boolean,
  from: number,
  whole = false,
): (lines: readonly MemoryLine[]) => RenderedBlock {
  return (lines) =>
    renderSessionBlock(
      {
        sessionId: turn.sessionId,
        generation: turn.generation,
        whole,
        ...(ready
          ? {}
          : { note: "Partial: some earlier messages are not summarized yet; they are missing from this view." }),
      },
      lines.filter((line) => {
        const node = parseRef(line.ref);
        return node === undefined || endOf(node) > from;
      }),
    );
}

/**
 * The own session's view before the turn's boundary: every part must be a summary. Waits (bounded) for that; then
 * strict fails, partial says so in `omitted` and goes on with what is built.
 */
async function readOwnView(
  deps: AssemblyDeps,
  turn: Turn,
  strict: boolean,
  waitMs: number,
  omitted: Omitted[],
): Promise<{ ready: boolean; revision: number | null; lines: TreeLines }> {
  let ready = true;
  try {
    await settleUpTo(deps, turn, waitMs);
  } catch (error) {
    if (strict) throw error;
    ready = false;
    omitted.push({ block: "session memory", reason: (error as Error).message });
  }
  const tree = await findSessionTree(deps.pool, turn.sessionId, turn.generation);
  if (!tree) throw new Error(`session ${turn.sessionId} has no tree`);
  let revision = turn.snapshot.ownViewRevision;
  if (revision === null && ready) revision = await pinOwnView(deps.pool, turn, tree.treeId);
  const view =
    revision !== null
      ? await findViewRevision(deps.pool, tree.treeId, revision)
      : await findViewRevision(deps.pool, tree.treeId);
  return {
    ready,
    revision,
    lines: {
      treeId: tree.treeId,
      parts: view ? restrictToPrefix(view.parts, turn.snapshot.ownBoundary) : [],
      leafCount: turn.snapshot.ownBoundary,
      // As of the turn's revision epoch, so a rebuild committed during the turn changes none of its texts (the own
      // view revision may be pinned after it: its parts exist at the epoch, as the old revisions or first builds).
      at: { epoch: turn.snapshot.revisionEpoch },
      name: refOf,
      cache: new Map(),
    },
  };
}

/**
 * The one write of an assembly: the turn's own view revision, fixed at its first assembly with its history ready
 * (the latest revision then), so that later model steps of the turn render the same session view. Returns the pinned
 * revision (the one a concurrent first assembly pinned, if it won), or null when the tree has no revision yet.
 */
async function pinOwnView(pool: Pool, turn: Turn, treeId: number): Promise<number | null> {
  const latest = await findViewRevision(pool, treeId);
  return latest ? await pinOwnViewRevision(pool, turn, latest.revision) : null;
}

async function readSharedView(pool: Pool, turn: Turn): Promise<ViewRevision | undefined> {
  return turn.snapshot.sharedTreeId !== null && turn.snapshot.sharedViewRevision !== null
    ? await findViewRevision(pool, turn.snapshot.sharedTreeId, turn.snapshot.sharedViewRevision)
    : undefined;
}

/** Where the session's records that the shared view already holds (its published turns, from the start) end. */
async function publishedOwnPrefix(pool: Pool, turn: Turn, sharedLeafCount: number): Promise<number> {
  return coveredPrefixEnd(
    await publishedRangesOfSession(
      pool,
      turn.snapshot.scopeId,
      turn.sessionId,
      turn.generation,
      Math.min(turn.snapshot.publicationHighWater, sharedLeafCount),
    ),
  );
}

async function ownPublicationSeqs(pool: Pool, turn: Turn, sharedLeafCount: number): Promise<number[]> {
  const highWater = Math.min(turn.snapshot.publicationHighWater, sharedLeafCount);
  return publicationSeqsOfSession(pool, turn.snapshot.scopeId, turn.sessionId, turn.generation, highWater);
}

interface BlockFitting {
  readonly pool: Pool;
  readonly strict: boolean;
  readonly windowTokens: number;
  readonly blocks: AssembledBlock[];
  readonly omitted: Omitted[];
  /** Until when (ms since the epoch) a block that does not fit may wait for merges it asks for; absent: never. */
  readonly demandUntil?: number;
}

/**
 * Fits one memory block into `budget` tokens and adds it, returning its tokens; when even its smallest cover does
 * not fit, strict mode throws BUDGET_EXCEEDED and partial mode leaves it out (0), saying so. `reported` is the share
 * the message names (the shared block may also use what the session block leaves of its share).
 */
async function fitBlock(
  fitting: BlockFitting,
  name: "shared_memory" | "session_memory",
  lines: TreeLines,
  render: (lines: readonly MemoryLine[]) => RenderedBlock,
  budget: number,
  reported: number,
): Promise<number> {
  let fitted = await fitTokens(fitting.pool, lines, budget, render);
  // Each round asks for one level of merges (a merge needs its two lines built first).
  for (let round = 0; !fitted.fits && fitting.demandUntil !== undefined && round < 16; round++) {
    if (!(await demandMerges(fitting.pool, lines, fitted.parts, fitted.byteBudget, fitting.demandUntil))) break;
    fitted = await fitTokens(fitting.pool, lines, budget, render);
  }
  const what = name === "shared_memory" ? "shared memory" : "session memory";
  if (!fitted.fits) {
    const message = `the ${what} needs at least ${fitted.tokens} tokens, ${reported} are available (window ${fitting.windowTokens})`;
    if (fitting.strict) throw budgetError(message, fitted.tokens, reported);
    fitting.omitted.push({ block: what, reason: message });
    return 0;
  }
  fitting.blocks.push({ name, text: fitted.text, pieces: fitted.pieces, tokens: fitted.tokens, lines: fitted.lines });
  return fitted.tokens;
}

/**
 * With the previous exchange included, the session block leaves out the lines that hold one of its messages word for
 * word (a free leaf): the message is then sent once, not twice (docs/caching.md). Lines that summarize, and tool calls
 * and results (the exchange holds only user and assistant messages), stay. Returns the session block's tokens.
 */
function dropRepeatedLines(blocks: AssembledBlock[], verbatim: ReadonlySet<string>): number {
  const at = blocks.findIndex((b) => b.name === "session_memory");
  const own = blocks[at];
  if (!own) return 0;
  // The block stays even with no line left: the plugin reads its presence as "the session's history is complete".
  const kept = withoutLines(own, verbatim);
  if (kept === own) return own.tokens;
  const tokens = estimateTokens(kept.text);
  blocks[at] = { name: own.name, text: kept.text, pieces: kept.pieces, tokens, lines: kept.pieces.length - 2 };
  return tokens;
}

function budgetError(message: string, needed: number, available: number): OptchatError {
  return new OptchatError(
    "BUDGET_EXCEEDED",
    `Memory does not fit the model's context: ${message}. Use a model with a larger context window, lower the output reservation, or allow partial memory (readiness mode 'partial').`,
    { needed, available },
  );
}

/** Waits until the own tree's leaves before the turn's boundary are all summaries. */
async function settleUpTo(deps: AssemblyDeps, turn: Turn, timeoutMs: number): Promise<void> {
  const tree = await findSessionTree(deps.pool, turn.sessionId, turn.generation);
  if (tree && tree.builtLeaves >= turn.snapshot.ownBoundary) return;
  await settleTree(deps.pool, deps.listener, turn.sessionId, turn.generation, timeoutMs, turn.snapshot.ownBoundary);
}
