import { InputInvalidError, OptchatError } from "../core/errors.js";
import type { Pool } from "../store/db.js";
import { readRevisionClock } from "../store/revisions.js";
import { findScope, type Session } from "../store/sessions.js";
import { findSessionTree, findSharedTreeOfScope } from "../store/trees.js";
import { findTurn, type Snapshot, type Turn } from "../store/turns.js";
import { findViewRevision } from "../store/view-revisions.js";
import { currentTurn } from "./retention-epoch.js";

/** A turn as callers name it: its session and the host's turn ID. */
export interface TurnContext {
  readonly sessionId: string;
  readonly turnId: string;
}

/** What of the scope a read sees: the shared view and the publications below the high-water mark. */
export type ScopeSnapshot = Pick<
  Snapshot,
  | "scopeId"
  | "policyRevision"
  | "retentionEpoch"
  | "revisionEpoch"
  | "sharedTreeId"
  | "sharedViewRevision"
  | "publicationHighWater"
>;

/** The reading session's own history: its records before the boundary, and the turn's own records. */
export interface OwnHistory {
  readonly sessionId: string;
  readonly generation: number;
  readonly turnId: string;
  readonly boundary: number;
  /** The own view revision the turn pinned at its first assembly (null before it); zoom opens its lines as it shows them. */
  readonly viewRevision: number | null;
}

/**
 * What a retrieval (zoom, date, sessions, search) runs under. A turn reads as of the snapshot pinned at its admission,
 * with its own session's history; a scope reader (operators: the CLI's search, zoom and sessions with --scope) reads
 * the scope's latest snapshot and has no own session, so every session is another session to it.
 */
export type Reader =
  | { readonly kind: "turn"; readonly scope: ScopeSnapshot; readonly own: OwnHistory }
  | { readonly kind: "scope"; readonly scope: ScopeSnapshot; readonly own: null };

export type ScopeReader = Extract<Reader, { kind: "scope" }>;

/** How callers name a reader: a turn by its IDs, a turn they hold (the plugin keeps the one it admitted), or a scope reader. */
export type ReadAs = TurnContext | Turn | ScopeReader;

/** What every retrieval response says about the snapshot it was served from. */
export interface ServedSnapshot {
  readonly scopeId: string;
  readonly publicationHighWater: number;
  readonly sharedViewRevision: number | null;
  readonly ownBoundary: number;
}

export function served(reader: Reader): ServedSnapshot {
  return {
    scopeId: reader.scope.scopeId,
    publicationHighWater: reader.scope.publicationHighWater,
    sharedViewRevision: reader.scope.sharedViewRevision,
    ownBoundary: reader.own?.boundary ?? 0,
  };
}

/** The admitted turn, or INPUT_INVALID naming it. A `Turn` the caller holds is taken as it is (its snapshot is pinned). */
export async function turnOrThrow(pool: Pool, ctx: TurnContext | Turn): Promise<Turn> {
  // Every read of a turn checks its snapshot against the scope's retention epoch first (retention-epoch.ts).
  return await currentTurn(pool, isTurn(ctx) ? ctx : await storedTurnOrThrow(pool, ctx));
}

/** The admitted turn as stored, without the epoch check (its metadata, not a read of memory under it). */
export async function storedTurnOrThrow(pool: Pool, ctx: TurnContext): Promise<Turn> {
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

export function isTurn(ctx: ReadAs): ctx is Turn {
  return "snapshot" in ctx;
}

export function isScopeReader(ctx: ReadAs): ctx is ScopeReader {
  return "kind" in ctx && ctx.kind === "scope";
}

export function turnReader(turn: Turn): Reader {
  return {
    kind: "turn",
    scope: turn.snapshot,
    own: {
      sessionId: turn.sessionId,
      generation: turn.generation,
      turnId: turn.turnId,
      boundary: turn.snapshot.ownBoundary,
      viewRevision: turn.snapshot.ownViewRevision,
    },
  };
}

export async function readerOf(pool: Pool, ctx: ReadAs): Promise<Reader> {
  if (isScopeReader(ctx)) return ctx;
  return turnReader(await turnOrThrow(pool, ctx));
}

/** The scope's snapshot as a turn admitted now would pin it (store/turns.ts admitTurn), or SCOPE_DENIED. */
async function latestScopeSnapshot(pool: Pool, scopeId: string): Promise<ScopeSnapshot> {
  const scope = await findScope(pool, scopeId);
  if (!scope)
    throw new OptchatError(
      "SCOPE_DENIED",
      `No scope ${scopeId}. Scopes look like project:<project id>; \`optchat scopes\` lists those in memory.`,
      { scopeId },
    );
  const tree = scope.kind === "isolated" ? undefined : await findSharedTreeOfScope(pool, scopeId);
  // Read after the tree: every revision its view shows is at or below the clock (admitTurn reads both at once).
  const revisionEpoch = await readRevisionClock(pool);
  return {
    scopeId,
    policyRevision: scope.policyRevision,
    retentionEpoch: scope.retentionEpoch,
    revisionEpoch,
    sharedTreeId: tree?.treeId ?? null,
    sharedViewRevision: tree && tree.viewRevision > 0 ? tree.viewRevision : null,
    publicationHighWater: tree?.leafCount ?? 0,
  };
}

/**
 * An operator's reader of a scope: its latest snapshot, no own session. It sees exactly what a new turn in a session
 * of that scope would see, minus that session's own history.
 */
export async function scopeReader(pool: Pool, scopeId: string): Promise<ScopeReader> {
  return { kind: "scope", scope: await latestScopeSnapshot(pool, scopeId), own: null };
}

/**
 * The turn a session's next prompt would be admitted as, built in memory: nothing is admitted or pinned. Its snapshot
 * is the one admitTurn would pin now (store/turns.ts: the shared view's latest revision and publication count, the
 * session's records so far as its history), and its own view is fixed to the latest revision, so that assembling
 * context for it never pins one (the only write an assembly makes). Operators' previews (`optchat browse`) use it.
 */
export async function nextTurnOf(pool: Pool, session: Session): Promise<Turn> {
  const scope = await latestScopeSnapshot(pool, session.scopeId);
  const own = await findSessionTree(pool, session.sessionId, session.currentGeneration);
  const ownView = own ? await findViewRevision(pool, own.treeId) : undefined;
  return {
    sessionId: session.sessionId,
    generation: session.currentGeneration,
    turnId: "",
    state: "active",
    admittedAt: new Date(),
    finishedAt: null,
    query: null,
    publishes: false,
    snapshot: {
      ...scope,
      ownGeneration: session.currentGeneration,
      // Leaves are appended in the transaction that seals their records: the leaf count is the next seq.
      ownBoundary: own?.leafCount ?? 0,
      ownViewRevision: ownView?.revision ?? null,
    },
    admissionSeq: 0,
    runs: null,
    publicationState: "none",
  };
}
