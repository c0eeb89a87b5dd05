import type { PgBoss } from "pg-boss";
import { schedulePublicationIfReady } from "../compactor/schedule-publication.js";
import {
  availableMemoryTokens,
  type ContextBudgetInput,
  coveredPrefixEnd,
  estimateTokens,
  type MemoryLine,
  type RenderedBlock,
  renderPreviousExchange,
  renderSessionBlock,
  renderSharedBlock,
  splitBudget,
} from "../core/context.js";
import { InputInvalidError, OptchatError } from "../core/errors.js";
import { type NodeBytes, partBytes, project, restrictToPrefix } from "../core/fold.js";
import { opaqueIdProblem } from "../core/ids.js";
import { payloadAsText } from "../core/payload.js";
import { type MemoryRef, parseMemoryRef, sessionRef, sharedRef } from "../core/refs.js";
import { childrenOf, endOf, type NodeAddress, nodeKey, parseRef, refOf, startOf } from "../core/tree.js";
import { formatRuns, runsOfCover } from "../core/turn-records.js";
import { type Pool, withTransaction } from "../store/db.js";
import type { TreeListener } from "../store/notifications.js";
import {
  findPublication,
  foreignRangeVisible,
  publicationTimeSpan,
  publishedRangesOfSession,
} from "../store/publications.js";
import { listRecords, readTurnMessages, recordTimeSpan } from "../store/records.js";
import { findScope, findSession, listScopeSessions, type Session } from "../store/sessions.js";
import { lockTree } from "../store/tree-changes.js";
import { findNodes, findSessionTree, findSharedTreeOfScope, findViewRevision, type Tree } from "../store/trees.js";
import {
  admitTurn as admitTurnRow,
  findPreviousTurn,
  findTurn,
  finishTurn as finishTurnRow,
  pinOwnViewRevision,
  type Turn,
  type TurnOutcome,
  turnRecordRange,
} from "../store/turns.js";
import type { Config } from "./config.js";
import { type SearchAnswerHit, type SearchOptions, searchPlaces } from "./search.js";
import { settleTree } from "./views.js";

export interface TurnContext {
  readonly sessionId: string;
  readonly turnId: string;
}

export interface SharedDeps {
  readonly pool: Pool;
  readonly boss: PgBoss;
  readonly listener: TreeListener;
  readonly config: Config;
  /** Node texts as of a tree event, which never change: every model step of every turn reuses them. */
  readonly pinnedNodes: PinnedNodeCache;
}

/**
 * Texts of nodes as a view revision pinned at a tree event sees them. Immutable (a rebuild is a new revision with a
 * later event), so they can be kept for the life of the process; the transform runs on every model step, and without
 * this each step would read the whole shared view again. Bounded: past `limit` entries the cache starts over.
 */
export class PinnedNodeCache {
  private readonly entries = new Map<string, { bytes: number; text: string } | undefined>();
  constructor(private readonly limit = 50_000) {}

  async load(
    pool: Pool,
    treeId: number,
    atEvent: number,
    addresses: readonly NodeAddress[],
  ): Promise<Map<number, { bytes: number; text: string } | undefined>> {
    const out = new Map<number, { bytes: number; text: string } | undefined>();
    const missing: NodeAddress[] = [];
    for (const a of addresses) {
      const key = `${treeId}:${atEvent}:${nodeKey(a)}`;
      if (this.entries.has(key)) out.set(nodeKey(a), this.entries.get(key));
      else missing.push(a);
    }
    if (missing.length > 0) {
      const found = await findNodes(pool, treeId, missing, atEvent);
      if (this.entries.size + missing.length > this.limit) this.entries.clear();
      for (const a of missing) {
        const node = found.get(nodeKey(a));
        const value = node ? { bytes: node.byteLength, text: node.text } : undefined;
        // Absent nodes are not cached: a node committed later at an earlier event number cannot exist, but keeping
        // the cache to built nodes is simpler to reason about.
        if (value) this.entries.set(`${treeId}:${atEvent}:${nodeKey(a)}`, value);
        out.set(nodeKey(a), value);
      }
    }
    return out;
  }
}

/** What every retrieval response says about the snapshot it was served from. */
export interface ServedSnapshot {
  readonly scopeId: string;
  readonly publicationHighWater: number;
  readonly sharedViewRevision: number | null;
  readonly ownBoundary: number;
}

function served(turn: Turn): ServedSnapshot {
  return {
    scopeId: turn.snapshot.scopeId,
    publicationHighWater: turn.snapshot.publicationHighWater,
    sharedViewRevision: turn.snapshot.sharedViewRevision,
    ownBoundary: turn.snapshot.ownBoundary,
  };
}

/**
 * The turn a retrieval runs under. A `Turn` itself is accepted too: `scopeReader` builds one for operators (the CLI),
 * with no own session and the scope's latest snapshot.
 */
export async function turnOrThrow(pool: Pool, ctx: TurnContext | Turn): Promise<Turn> {
  if ("snapshot" in ctx) return ctx;
  const turn = await findTurn(pool, ctx.sessionId, ctx.turnId);
  if (!turn) {
    throw new InputInvalidError("turn", [
      {
        field: "turnId",
        problem: `turn ${ctx.turnId} of session ${ctx.sessionId} was not admitted (call admitTurn first)`,
      },
    ]);
  }
  return turn;
}

// ---------------------------------------------------------------------------------------------------------------
// Turns

export async function admitTurn(
  deps: SharedDeps,
  input: { sessionId: string; turnId: string; query?: string; publishes?: boolean },
): Promise<Turn> {
  const session = await findSession(deps.pool, input.sessionId);
  if (!session) throw new OptchatError("SESSION_NOT_FOUND", `No session ${input.sessionId}`, { field: "sessionId" });
  const { turn } = await admitTurnRow(deps.pool, {
    sessionId: session.sessionId,
    turnId: input.turnId,
    query: input.query ?? null,
    // Subagent sessions are recorded but not published: their report reaches the parent as a tool result.
    publishes: (input.publishes ?? true) && session.parentSessionId === null,
  });
  return turn;
}

/**
 * Records the turn's outcome once, fixing its records (the runs its publication will cover), and, in the same
 * transaction, schedules the session's next publication if this made it ready (the job row is the outbox: a crash
 * after the commit loses nothing, a crash before it changes nothing). A turn whose cover is not summarized yet, or
 * that waits for an earlier turn of its session, is scheduled by the commit that completes that instead.
 */
export async function finishTurn(
  deps: SharedDeps,
  ctx: TurnContext,
  outcome: TurnOutcome,
): Promise<{ turn: Turn; finished: boolean }> {
  const notAdmitted = () =>
    new InputInvalidError("finishTurn", [
      { field: "turnId", problem: `turn ${ctx.turnId} of session ${ctx.sessionId} was not admitted` },
    ]);
  const admitted = await findTurn(deps.pool, ctx.sessionId, ctx.turnId);
  if (!admitted) throw notAdmitted();
  return await withTransaction(deps.pool, async (tx) => {
    // The session tree's lock first, like every writer of the tree: records sealed and nodes built by other
    // transactions are then either committed before the runs and the readiness are read here, or they see this
    // turn finished when they check readiness themselves.
    const locked = await lockTree(tx, { sessionId: admitted.sessionId, generation: admitted.generation });
    const result = await finishTurnRow(tx, ctx.sessionId, ctx.turnId, outcome);
    if (!result) throw notAdmitted();
    if (result.finished && locked) {
      await schedulePublicationIfReady(deps.boss, tx, {
        treeId: locked.tree.treeId,
        sessionId: result.turn.sessionId,
        generation: result.turn.generation,
      });
    }
    return result;
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Retrieval (seed 000 §8): every lookup under the turn's scope and pinned snapshot. A ref that is not visible fails
// exactly like a ref that does not exist.

function notFound(ref: string): OptchatError {
  return new OptchatError(
    "REF_NOT_FOUND",
    `No line ${ref} in this turn's memory. Refs look like pub:24+1, 0+8 or <session>:<generation>:0+8, as shown in the memory blocks.`,
    { ref },
  );
}

interface ResolvedSessionRef {
  readonly session: Session;
  readonly tree: Tree;
  readonly node: NodeAddress;
  readonly own: boolean;
}

/** Resolves a session ref for the turn, or undefined when it is not visible (other scope, old generation, beyond snapshot). */
async function resolveSessionRef(pool: Pool, turn: Turn, ref: MemoryRef): Promise<ResolvedSessionRef | undefined> {
  if (ref.tree === "shared") return undefined;
  const sessionId = ref.tree === "own" ? turn.sessionId : ref.sessionId;
  const session = await findSession(pool, sessionId);
  if (!session || session.scopeId !== turn.snapshot.scopeId) return undefined;
  const generation = ref.tree === "own" ? turn.generation : ref.generation;
  if (generation !== session.currentGeneration) return undefined;
  const tree = await findSessionTree(pool, session.sessionId, generation);
  if (!tree) return undefined;
  const own = session.sessionId === turn.sessionId;
  // Own session: its history before the turn's boundary, and the turn's own records (already in the transcript), as
  // of this turn: a later turn's records are not visible from an earlier turn. Another session: only ranges inside
  // one of its publications below the snapshot's high-water mark.
  if (own) {
    const current = await turnRecordRange(pool, session.sessionId, generation, turn.turnId);
    const inHistory = endOf(ref.node) <= turn.snapshot.ownBoundary;
    const inTurn = current !== undefined && startOf(ref.node) >= current.start && endOf(ref.node) <= current.end;
    if (!inHistory && !inTurn) return undefined;
  } else if (
    !(await foreignRangeVisible(
      pool,
      turn.snapshot.scopeId,
      session.sessionId,
      startOf(ref.node),
      endOf(ref.node),
      turn.snapshot.publicationHighWater,
    ))
  ) {
    return undefined;
  }
  return { session, tree, node: ref.node, own };
}

export type ZoomAnswer =
  | {
      readonly kind: "lines";
      readonly ref: string;
      readonly lines: readonly { ref: string; text: string }[];
      readonly snapshot: ServedSnapshot;
    }
  | {
      readonly kind: "publication";
      readonly ref: string;
      readonly sessionId: string;
      readonly generation: number;
      readonly turnId: string;
      readonly outcome: TurnOutcome;
      readonly range: string;
      readonly completedAt: string;
      readonly publishedAt: string;
      readonly cover: readonly { ref: string; text: string }[];
      readonly snapshot: ServedSnapshot;
    }
  | {
      readonly kind: "message";
      readonly ref: string;
      readonly recordKind: string;
      readonly toolName: string | null;
      readonly occurredAt: string;
      readonly text: string;
      readonly validUtf8: boolean;
      readonly hostTruncated: boolean;
      readonly offset: number;
      readonly totalBytes: number;
      readonly nextCursor: string | null;
      readonly complete: boolean;
      readonly snapshot: ServedSnapshot;
    };

export interface ZoomOptions {
  readonly cursor?: string;
  readonly maxTokens?: number;
}

export async function zoomFor(
  deps: SharedDeps,
  ctx: TurnContext | Turn,
  refText: string,
  options: ZoomOptions,
  readPage: (
    ref: { sessionId: string; generation: number; seq: number },
    cursor: string | undefined,
    maxBytes: number,
  ) => Promise<{
    text: string;
    validUtf8: boolean;
    hostTruncated: boolean;
    offset: number;
    totalBytes: number;
    nextCursor: string | null;
    complete: boolean;
  }>,
): Promise<ZoomAnswer> {
  const turn = await turnOrThrow(deps.pool, ctx);
  const ref = parseMemoryRef(refText);
  if (!ref) throw notFound(refText);
  const snapshot = served(turn);

  if (ref.tree === "shared") {
    const treeId = turn.snapshot.sharedTreeId;
    if (treeId === null || endOf(ref.node) > turn.snapshot.publicationHighWater) throw notFound(refText);
    if (ref.node.level > 0) {
      const children = childrenOf(ref.node);
      const nodes = await findNodes(deps.pool, treeId, children);
      const lines = children.map((child) => ({ ref: sharedRef(child), text: nodes.get(nodeKey(child))?.text }));
      if (lines.some((line) => line.text === undefined)) throw notFound(refText);
      return { kind: "lines", ref: sharedRef(ref.node), lines: lines as { ref: string; text: string }[], snapshot };
    }
    const publication = await findPublication(
      deps.pool,
      turn.snapshot.scopeId,
      ref.node.index,
      turn.snapshot.publicationHighWater,
    );
    if (!publication) throw notFound(refText);
    const tree = await findSessionTree(deps.pool, publication.sessionId, publication.generation);
    const nodes = tree ? await findNodes(deps.pool, tree.treeId, publication.sourceCover) : new Map();
    return {
      kind: "publication",
      ref: sharedRef(ref.node),
      sessionId: publication.sessionId,
      generation: publication.generation,
      turnId: publication.turnId,
      outcome: publication.outcome,
      // The turn's own records: one run, or several when another turn's records lie between them.
      range: formatRuns(runsOfCover(publication.sourceCover)),
      completedAt: publication.completedAt.toISOString(),
      publishedAt: publication.publishedAt.toISOString(),
      cover: publication.sourceCover.map((node) => ({
        ref: sessionRef(publication.sessionId, publication.generation, node),
        text: nodes.get(nodeKey(node))?.text ?? "",
      })),
      snapshot,
    };
  }

  const resolved = await resolveSessionRef(deps.pool, turn, ref);
  if (!resolved) throw notFound(refText);
  const name = (node: NodeAddress) =>
    resolved.own && ref.tree === "own"
      ? refOf(node)
      : sessionRef(resolved.session.sessionId, resolved.tree.generation ?? 0, node);
  if (resolved.node.level > 0) {
    const children = childrenOf(resolved.node);
    const nodes = await findNodes(deps.pool, resolved.tree.treeId, children);
    const lines = children.map((child) => ({ ref: name(child), text: nodes.get(nodeKey(child))?.text }));
    if (lines.some((line) => line.text === undefined)) throw notFound(refText);
    return { kind: "lines", ref: name(resolved.node), lines: lines as { ref: string; text: string }[], snapshot };
  }
  // A message: its stored payload, paged; maxTokens bounds the page (conservatively, 3 bytes per token).
  const maxBytes = Math.max(256, Math.min(4 * 1024 * 1024, Math.floor((options.maxTokens ?? 4000) * 3)));
  const page = await readPage(
    { sessionId: resolved.session.sessionId, generation: resolved.tree.generation ?? 0, seq: resolved.node.index },
    options.cursor,
    maxBytes,
  );
  const [record] = await listRecords(
    deps.pool,
    resolved.session.sessionId,
    resolved.tree.generation ?? 0,
    resolved.node.index,
    1,
  );
  // Fields named one by one: the reader hands back a whole payload page, whose own `ref` (the record's coordinates)
  // once overwrote the line's ref here when the page was spread.
  return {
    kind: "message",
    ref: name(resolved.node),
    recordKind: record?.kind ?? "?",
    toolName: record?.toolName ?? null,
    occurredAt: record?.occurredAt.toISOString() ?? "",
    text: page.text,
    validUtf8: page.validUtf8,
    hostTruncated: page.hostTruncated,
    offset: page.offset,
    totalBytes: page.totalBytes,
    nextCursor: page.nextCursor,
    complete: page.complete,
    snapshot,
  };
}

export async function dateFor(
  deps: SharedDeps,
  ctx: TurnContext | Turn,
  refText: string,
): Promise<{ ref: string; first: string; last: string; snapshot: ServedSnapshot }> {
  const turn = await turnOrThrow(deps.pool, ctx);
  const ref = parseMemoryRef(refText);
  if (!ref) throw notFound(refText);
  let span: { first: Date; last: Date } | undefined;
  if (ref.tree === "shared") {
    if (turn.snapshot.sharedTreeId !== null && endOf(ref.node) <= turn.snapshot.publicationHighWater) {
      span = await publicationTimeSpan(deps.pool, turn.snapshot.scopeId, startOf(ref.node), endOf(ref.node));
    }
  } else {
    const resolved = await resolveSessionRef(deps.pool, turn, ref);
    if (resolved)
      span = await recordTimeSpan(
        deps.pool,
        resolved.session.sessionId,
        resolved.tree.generation ?? 0,
        startOf(ref.node),
        endOf(ref.node),
      );
  }
  if (!span) throw notFound(refText);
  return {
    ref: refText.trim(),
    first: span.first.toISOString(),
    last: span.last.toISOString(),
    snapshot: served(turn),
  };
}

export async function sessionsFor(
  deps: SharedDeps,
  ctx: TurnContext | Turn,
  options: { cursor?: string; limit?: number },
): Promise<{ sessions: readonly Record<string, unknown>[]; nextCursor: string | null; snapshot: ServedSnapshot }> {
  const turn = await turnOrThrow(deps.pool, ctx);
  let after: { cursorTime: string; sessionId: string } | undefined;
  if (options.cursor) {
    const [cursorTime, sessionId] = Buffer.from(options.cursor, "base64url").toString("utf8").split("|");
    // The session part goes into a text parameter: anything but an opaque ID (a forged NUL) is not our cursor.
    if (!sessionId || opaqueIdProblem(sessionId) || !cursorTime || Number.isNaN(new Date(cursorTime).getTime())) {
      throw new InputInvalidError("sessions", [{ field: "cursor", problem: "is not a cursor from a previous answer" }]);
    }
    after = { cursorTime, sessionId };
  }
  const limit = Math.min(50, Math.max(1, options.limit ?? 20));
  const rows = await listScopeSessions(
    deps.pool,
    turn.snapshot.scopeId,
    turn.snapshot.publicationHighWater,
    turn.sessionId,
    after,
    limit + 1,
  );
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return {
    sessions: page.map((s) => ({
      sessionId: s.sessionId,
      own: s.sessionId === turn.sessionId,
      title: s.title,
      publishedTurns: s.publications,
      firstAt: s.firstAt?.toISOString() ?? null,
      lastAt: s.lastAt?.toISOString() ?? null,
    })),
    nextCursor:
      rows.length > limit && last ? Buffer.from(`${last.cursorTime}|${last.sessionId}`).toString("base64url") : null,
    snapshot: served(turn),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Context assembly (seed 000 §7)

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

export interface AssembledContext {
  readonly blocks: readonly AssembledBlock[];
  readonly tokens: {
    readonly available: number;
    readonly used: number;
    readonly shared: number;
    readonly own: number;
    readonly previous: number;
  };
  readonly snapshot: ServedSnapshot & { readonly ownViewRevision: number | null };
  /** What could not be included, and why (partial mode, or the previous exchange not fitting). */
  readonly omitted: readonly string[];
}

interface TreeLines {
  readonly treeId: number;
  readonly parts: readonly NodeAddress[];
  readonly leafCount: number;
  readonly atEvent: number | undefined;
  readonly name: (node: NodeAddress) => string;
  readonly cache: Map<number, { bytes: number; text: string } | undefined>;
  /** For trees read at a pinned event: the process-wide cache of immutable node texts. */
  readonly pinned?: PinnedNodeCache;
}

/**
 * The largest cover of `lines.parts` (the parts themselves, or a coarser projection) whose rendering fits `tokens`,
 * or the smallest cover and the fact that it does not fit. Projections work in bytes; tokens are estimated on the
 * rendered text and the byte budget tightened until the estimate fits.
 */
async function fitTokens(
  pool: Pool,
  lines: TreeLines,
  tokens: number,
  render: (lines: readonly MemoryLine[]) => RenderedBlock,
): Promise<{ text: string; pieces: readonly string[]; tokens: number; lines: number; fits: boolean }> {
  // Node texts are shared by every fitting of the same tree in one assembly (the full-size measure, then the fit):
  // they never change for a pinned revision, so the view is read once, not once per fitting.
  const known = lines.cache;
  const load = async (addresses: readonly NodeAddress[]) => {
    const missing = addresses.filter((a) => !known.has(nodeKey(a)));
    if (missing.length === 0) return;
    if (lines.atEvent !== undefined && lines.pinned) {
      for (const [key, value] of await lines.pinned.load(pool, lines.treeId, lines.atEvent, missing))
        known.set(key, value);
      return;
    }
    const found = await findNodes(pool, lines.treeId, missing, lines.atEvent);
    for (const a of missing) {
      const node = found.get(nodeKey(a));
      known.set(nodeKey(a), node ? { bytes: node.byteLength, text: node.text } : undefined);
    }
  };
  await load(lines.parts);
  // Parts not summarized yet are left out (partial mode says so in the block's note); no placeholder reaches a model.
  const renderParts = (parts: readonly NodeAddress[]) => {
    const built = parts.flatMap((part) => {
      const node = known.get(nodeKey(part));
      return node ? [{ ref: lines.name(part), text: node.text }] : [];
    });
    const { text, pieces } = render(built);
    // Opening and closing pieces aside, one piece per line shown (the session block may leave some out).
    return { text, pieces, tokens: estimateTokens(text), lines: pieces.length - 2 };
  };
  const full = renderParts(lines.parts);
  if (full.tokens <= tokens) return { ...full, fits: true };
  const bytesOf: NodeBytes = (node) => known.get(nodeKey(node))?.bytes;
  // The projection asks for ancestors' sizes as it goes; unknown ones are loaded and the projection re-run.
  const asks: NodeAddress[] = [];
  const asking: NodeBytes = (node) => {
    if (!known.has(nodeKey(node))) {
      asks.push(node);
      return undefined;
    }
    return bytesOf(node);
  };
  let byteBudget = Math.floor((viewBytesOf(lines.parts, bytesOf) * tokens) / Math.max(1, full.tokens));
  let last = full;
  for (let round = 0; round < 8; round++) {
    let projection = project(lines.parts, lines.leafCount, asking, byteBudget);
    while (asks.length > 0) {
      await load(asks.splice(0));
      projection = project(lines.parts, lines.leafCount, asking, byteBudget);
    }
    last = renderParts(projection.parts);
    if (last.tokens <= tokens) return { ...last, fits: true };
    if (!projection.fits) break; // even the smallest cover is too big
    byteBudget = Math.floor((byteBudget * tokens) / last.tokens) - 1;
    if (byteBudget <= 0) break;
  }
  return { ...last, fits: false };
}

function viewBytesOf(parts: readonly NodeAddress[], bytesOf: NodeBytes): number {
  return parts.reduce((sum, part) => sum + partBytes(part, bytesOf), 0);
}

export async function assembleContext(
  deps: SharedDeps,
  ctx: TurnContext,
  options: AssembleOptions,
): Promise<AssembledContext> {
  const turn = await turnOrThrow(deps.pool, ctx);
  const readinessMode = options.readiness ?? "strict";
  const omitted: string[] = [];
  const available = availableMemoryTokens(options);

  // Own history: every part before the boundary must be a summary. Wait (bounded), then strict fails, partial says so.
  let ownReady = true;
  try {
    await settleUpTo(deps, turn, options.waitMs ?? deps.config.settleTimeoutMs);
  } catch (error) {
    if (readinessMode === "strict") throw error;
    ownReady = false;
    omitted.push(`session memory: ${(error as Error).message}`);
  }

  const ownTree = await findSessionTree(deps.pool, turn.sessionId, turn.generation);
  if (!ownTree) throw new Error(`session ${turn.sessionId} has no tree`);
  let ownRevision = turn.snapshot.ownViewRevision;
  if (ownRevision === null && ownReady) {
    const latest = await findViewRevision(deps.pool, ownTree.treeId);
    if (latest) ownRevision = await pinOwnViewRevision(deps.pool, turn, latest.revision);
  }
  const ownView =
    ownRevision !== null
      ? await findViewRevision(deps.pool, ownTree.treeId, ownRevision)
      : await findViewRevision(deps.pool, ownTree.treeId);
  const ownParts = ownView ? restrictToPrefix(ownView.parts, turn.snapshot.ownBoundary) : [];
  const ownLines: TreeLines = {
    treeId: ownTree.treeId,
    parts: ownParts,
    leafCount: turn.snapshot.ownBoundary,
    atEvent: undefined,
    name: refOf,
    cache: new Map(),
  };

  const sharedView =
    turn.snapshot.sharedTreeId !== null && turn.snapshot.sharedViewRevision !== null
      ? await findViewRevision(deps.pool, turn.snapshot.sharedTreeId, turn.snapshot.sharedViewRevision)
      : undefined;
  const sharedLines: TreeLines | undefined = sharedView
    ? {
        treeId: sharedView.treeId,
        parts: sharedView.parts,
        leafCount: sharedView.leafCount,
        atEvent: sharedView.eventNo,
        name: sharedRef,
        cache: new Map(),
        pinned: deps.pinnedNodes,
      }
    : undefined;

  // The session's turns the shared view already holds are not sent twice (docs/caching.md): the session block shows
  // only its lines past the covered prefix, while the shared block is included.
  const publishedOwn = sharedView
    ? coveredPrefixEnd(
        await publishedRangesOfSession(
          deps.pool,
          turn.snapshot.scopeId,
          turn.sessionId,
          turn.generation,
          Math.min(turn.snapshot.publicationHighWater, sharedView.leafCount),
        ),
      )
    : 0;
  let ownFrom = publishedOwn;
  const renderShared = (lines: readonly MemoryLine[]) => renderSharedBlock({ scopeId: turn.snapshot.scopeId }, lines);
  const renderOwn = (lines: readonly MemoryLine[]) =>
    renderSessionBlock(
      {
        sessionId: turn.sessionId,
        generation: turn.generation,
        through: turn.snapshot.ownBoundary,
        ...(ownReady
          ? {}
          : { note: "Partial: some earlier messages are not summarized yet; they are missing from this view." }),
      },
      lines.filter((line) => {
        const node = parseRef(line.ref);
        return node === undefined || endOf(node) > ownFrom;
      }),
    );

  // Needs at full detail decide the 30/70 split with spill-over; each block is then projected into its share.
  const sharedFull = sharedLines
    ? await fitTokens(deps.pool, sharedLines, Number.MAX_SAFE_INTEGER, renderShared)
    : undefined;
  const ownFull =
    ownParts.length > 0 ? await fitTokens(deps.pool, ownLines, Number.MAX_SAFE_INTEGER, renderOwn) : undefined;
  const split = splitBudget(available, sharedFull?.tokens ?? 0, ownFull?.tokens ?? 0);
  const blocks: AssembledBlock[] = [];
  let sharedTokens = 0;
  let ownTokens = 0;
  if (sharedLines && sharedFull) {
    const fitted = await fitTokens(
      deps.pool,
      sharedLines,
      split.shared + Math.max(0, split.own - (ownFull?.tokens ?? 0)),
      renderShared,
    );
    if (!fitted.fits) {
      const message = `the shared memory needs at least ${fitted.tokens} tokens, ${split.shared} are available (window ${options.windowTokens})`;
      if (readinessMode === "strict") throw budgetError(message, fitted.tokens, split.shared);
      omitted.push(`shared memory: ${message}`);
    } else {
      blocks.push({
        name: "shared_memory",
        text: fitted.text,
        pieces: fitted.pieces,
        tokens: fitted.tokens,
        lines: fitted.lines,
      });
      sharedTokens = fitted.tokens;
    }
  }
  if (ownFull) {
    // Without the shared block, nothing of this session is shown there: the session block then shows all of it.
    if (sharedTokens === 0) ownFrom = 0;
    const fitted = await fitTokens(deps.pool, ownLines, available - sharedTokens, renderOwn);
    if (!fitted.fits) {
      const message = `the session memory needs at least ${fitted.tokens} tokens, ${available - sharedTokens} are available (window ${options.windowTokens})`;
      if (readinessMode === "strict") throw budgetError(message, fitted.tokens, available - sharedTokens);
      omitted.push(`session memory: ${message}`);
    } else {
      blocks.push({
        name: "session_memory",
        text: fitted.text,
        pieces: fitted.pieces,
        tokens: fitted.tokens,
        lines: fitted.lines,
      });
      ownTokens = fitted.tokens;
    }
  }
  let previousTokens = 0;
  if (options.previousExchange !== false) {
    const previous = await findPreviousTurn(deps.pool, turn);
    if (previous) {
      const messages = await readTurnMessages(deps.pool, turn.sessionId, turn.generation, previous.turnId);
      if (messages.length > 0) {
        const first = messages[0]?.seq as number;
        const last = messages[messages.length - 1]?.seq as number;
        const { text, pieces } = renderPreviousExchange(
          { sessionId: turn.sessionId, refs: `${first}+1..${last}+1` },
          messages.map((m) => ({ kind: m.kind, text: payloadAsText(m.payload) })),
        );
        const tokens = estimateTokens(text);
        if (tokens <= available - sharedTokens - ownTokens) {
          blocks.push({ name: "previous_exchange", text, pieces, tokens, lines: messages.length });
          previousTokens = tokens;
        } else {
          omitted.push(`previous exchange: needs ${tokens} tokens, ${available - sharedTokens - ownTokens} left`);
        }
      }
    }
  }
  const used = sharedTokens + ownTokens + previousTokens;
  // Validation: the whole is within the budget, measured again on the final text.
  const measured = blocks.reduce((sum, block) => sum + estimateTokens(block.text), 0);
  if (measured !== used || used > available)
    throw new Error(`context assembly exceeded its budget: ${measured} tokens for ${available}`);
  return {
    blocks,
    tokens: { available, used, shared: sharedTokens, own: ownTokens, previous: previousTokens },
    snapshot: { ...served(turn), ownViewRevision: ownRevision },
    omitted,
  };
}

function budgetError(message: string, needed: number, available: number): OptchatError {
  return new OptchatError(
    "BUDGET_EXCEEDED",
    `Memory does not fit the model's context: ${message}. Use a model with a larger context window, lower the output reservation, or allow partial memory (readiness mode 'partial').`,
    { needed, available },
  );
}

/** Waits until the own tree's leaves before the turn's boundary are all summaries. */
async function settleUpTo(deps: SharedDeps, turn: Turn, timeoutMs: number): Promise<void> {
  const tree = await findSessionTree(deps.pool, turn.sessionId, turn.generation);
  if (tree && tree.builtLeaves >= turn.snapshot.ownBoundary) return;
  await settleTree(deps.pool, deps.listener, turn.sessionId, turn.generation, timeoutMs, turn.snapshot.ownBoundary);
}

// ---------------------------------------------------------------------------------------------------------------
// Search (seed 000 §8)

export type { SearchAnswerHit, SearchOptions } from "./search.js";

export interface SearchAnswer {
  readonly hits: readonly SearchAnswerHit[];
  readonly nextCursor: string | null;
  readonly snapshot: ServedSnapshot;
}

/** BM25 search as distinct places: src/memory/search.ts. */
export async function searchFor(
  deps: SharedDeps,
  ctx: TurnContext | Turn,
  options: SearchOptions,
): Promise<SearchAnswer> {
  const turn = await turnOrThrow(deps.pool, ctx);
  return { ...(await searchPlaces(deps.pool, turn, options)), snapshot: served(turn) };
}

/**
 * A reader for operators (the CLI's search, zoom and sessions with --scope): the scope's latest snapshot, no own
 * session. It sees exactly what a new turn in a session of that scope would see, minus that session's own history.
 */
export async function scopeReader(pool: Pool, scopeId: string): Promise<Turn> {
  const scope = await findScope(pool, scopeId);
  if (!scope)
    throw new OptchatError(
      "SCOPE_DENIED",
      `No scope ${scopeId}. Scopes look like project:<project id>; \`optchat status\` counts them.`,
      { scopeId },
    );
  const tree = scope.kind === "isolated" ? undefined : await findSharedTreeOfScope(pool, scopeId);
  return {
    sessionId: "",
    generation: 0,
    turnId: "",
    state: "active",
    admittedAt: new Date(),
    finishedAt: null,
    query: null,
    publishes: false,
    snapshot: {
      scopeId,
      policyRevision: scope.policyRevision,
      retentionEpoch: scope.retentionEpoch,
      sharedTreeId: tree?.treeId ?? null,
      sharedViewRevision: tree && tree.viewRevision > 0 ? tree.viewRevision : null,
      publicationHighWater: tree?.leafCount ?? 0,
      ownGeneration: 0,
      ownBoundary: 0,
      ownViewRevision: null,
    },
    admissionSeq: 0,
    runs: null,
    publicationState: "none",
  };
}

/**
 * The turn a session's next prompt would be admitted as, built in memory: nothing is admitted or pinned. Its snapshot
 * is the one admitTurn would pin now (store/turns.ts: the shared view's latest revision and publication count, the
 * session's records so far as its history), and its own view is fixed to the latest revision, so that assembling
 * context for it never pins one (the only write an assembly makes). Operators' previews (`optchat browse`) use it.
 */
export async function nextTurnOf(pool: Pool, session: Session): Promise<Turn> {
  const reader = await scopeReader(pool, session.scopeId);
  const own = await findSessionTree(pool, session.sessionId, session.currentGeneration);
  const ownView = own ? await findViewRevision(pool, own.treeId) : undefined;
  return {
    ...reader,
    sessionId: session.sessionId,
    generation: session.currentGeneration,
    publishes: false,
    snapshot: {
      ...reader.snapshot,
      ownGeneration: session.currentGeneration,
      // Leaves are appended in the transaction that seals their records: the leaf count is the next seq.
      ownBoundary: own?.leafCount ?? 0,
      ownViewRevision: ownView?.revision ?? null,
    },
  };
}
