import { expandFoldedRef } from "../core/checkpoint-lines.js";
import { InputInvalidError, OptchatError } from "../core/errors.js";
import { opaqueIdProblem } from "../core/ids.js";
import { type MemoryRef, parseMemoryRef, sessionRef, sharedRef } from "../core/refs.js";
import { endOf, type NodeAddress, nodeKey, refOf, startOf } from "../core/tree.js";
import { formatRuns, runsOfCover } from "../core/turn-records.js";
import type { Pool } from "../store/db.js";
import { findNodes, type RevisionsAt } from "../store/nodes.js";
import { findPublication, foreignRangeVisible, publicationTimeSpan } from "../store/publications.js";
import { listRecords, recordTimeSpan } from "../store/records.js";
import { findSession, listScopeSessions, type Session } from "../store/sessions.js";
import { findSessionTree, type Tree } from "../store/trees.js";
import { type TurnOutcome, turnRecordRange } from "../store/turns.js";
import { type ReadAs, type Reader, readerOf, type ServedSnapshot, served } from "./reader.js";
import { childLinesOf } from "./views.js";

// Retrieval (seed 000 §8): every lookup under the reader's scope and pinned snapshot. A ref that is not visible fails
// exactly like a ref that does not exist.

/**
 * REF_NOT_FOUND for a reader, saying which refs it can open (issue 40 item 4): the shared lines of its snapshot and,
 * for a turn, its own history; a scope reader (the CLI's --scope) has no session of its own, so a bare `0+8` is never
 * valid there. It names only what the reader may see: no existence oracle.
 */
function notFound(ref: string, reader?: Reader): OptchatError {
  if (!reader) {
    return new OptchatError(
      "REF_NOT_FOUND",
      `No line ${ref}. Refs look like pub:24+1, 0+8 or <session>:<generation>:0+8, as shown in the memory blocks.`,
      { ref },
    );
  }
  const count = reader.scope.publicationHighWater;
  const shared =
    count === 0
      ? "it has no published turns yet"
      : count === 1
        ? "its shared lines are pub:0+1 (one published turn)"
        : `its shared lines are pub:0+1 to pub:${count - 1}+1 (${count} published turns; a summary over them is pub:<start>+<count> with count a power of two, start a multiple of it)`;
  if (reader.kind === "scope") {
    const bare = /^\s*\d+\+\d+\s*$/.test(ref)
      ? ` A bare ${ref.trim()} is a line of one session's own tree: \`optchat zoom <session> ${ref.trim()}\` opens it.`
      : "";
    return new OptchatError(
      "REF_NOT_FOUND",
      `No line ${ref} in scope ${reader.scope.scopeId} at its latest snapshot: ${shared}; a session's lines are <session>:<generation>:<start>+<count> inside its published turns.${bare}`,
      { ref, publications: count },
    );
  }
  return new OptchatError(
    "REF_NOT_FOUND",
    `No line ${ref} in this turn's memory: ${shared}; your own history is 0+1 to ${Math.max(0, reader.own.boundary - 1)}+1 and other sessions' lines are <session>:<generation>:<start>+<count>, as shown in the memory blocks.`,
    { ref, publications: count },
  );
}

interface ResolvedSessionRef {
  readonly session: Session;
  readonly tree: Tree;
  readonly node: NodeAddress;
  readonly own: boolean;
}

/**
 * Resolves a session ref for the reader, or undefined when it is not visible (other scope, old generation, beyond
 * snapshot; an own-session ref for a scope reader, which has no session).
 */
async function resolveSessionRef(pool: Pool, reader: Reader, ref: MemoryRef): Promise<ResolvedSessionRef | undefined> {
  if (ref.tree === "shared") return undefined;
  const named = ref.tree === "own" ? reader.own : ref;
  if (!named) return undefined;
  const session = await findSession(pool, named.sessionId);
  if (!session || session.scopeId !== reader.scope.scopeId) return undefined;
  const generation = named.generation;
  if (generation !== session.currentGeneration) return undefined;
  const tree = await findSessionTree(pool, session.sessionId, generation);
  if (!tree) return undefined;
  const own = session.sessionId === reader.own?.sessionId;
  // Own session: its history before the turn's boundary, and the turn's own records (already in the transcript), as
  // of this turn: a later turn's records are not visible from an earlier turn. Another session: only ranges inside
  // one of its publications below the snapshot's high-water mark.
  if (own && reader.own) {
    const current = await turnRecordRange(pool, session.sessionId, generation, reader.own.turnId);
    const inHistory = endOf(ref.node) <= reader.own.boundary;
    const inTurn = current !== undefined && startOf(ref.node) >= current.start && endOf(ref.node) <= current.end;
    if (!inHistory && !inTurn) return undefined;
  } else if (
    !(await foreignRangeVisible(
      pool,
      reader.scope.scopeId,
      session.sessionId,
      startOf(ref.node),
      endOf(ref.node),
      reader.scope.publicationHighWater,
    ))
  ) {
    return undefined;
  }
  return { session, tree, node: ref.node, own };
}

/**
 * Which node revisions a reader's zooms resolve to: those of its snapshot's revision epoch (migration 014), in every
 * tree. For the trees a turn was shown this is what its pinned views show (both are pinned by one statement at
 * admission); a node first built since is read as it is; a rebuild committed since is not seen.
 */
function revisionsOf(reader: Reader): RevisionsAt {
  return { epoch: reader.scope.revisionEpoch };
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

/** Reads one page of a record's payload (the service's readPayload). */
export type PageReader = (
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
}>;

export async function zoomFor(
  deps: { readonly pool: Pool },
  ctx: ReadAs,
  refText: string,
  options: ZoomOptions,
  readPage: PageReader,
): Promise<ZoomAnswer> {
  const reader = await readerOf(deps.pool, ctx);
  const folded = expandFoldedRef(refText);
  if (folded) {
    // A checkpoint line folded from alike lines (src/core/checkpoint-lines.ts): its ref opens into the refs it stands for.
    const text = "one of the calls the folded checkpoint line stands for: zoom this ref for its exact output";
    return {
      kind: "lines",
      ref: refText.trim(),
      lines: folded.map((r) => ({ ref: r, text })),
      snapshot: served(reader),
    };
  }
  const ref = parseMemoryRef(refText);
  if (!ref) throw notFound(refText, reader);
  if (ref.tree === "shared") return await zoomShared(deps.pool, reader, ref.node, refText);

  const resolved = await resolveSessionRef(deps.pool, reader, ref);
  if (!resolved) throw notFound(refText, reader);
  const name = (node: NodeAddress) =>
    resolved.own && ref.tree === "own"
      ? refOf(node)
      : sessionRef(resolved.session.sessionId, resolved.tree.generation ?? 0, node);
  if (resolved.node.level > 0) {
    const lines = await childLinesOf(deps.pool, resolved.tree.treeId, resolved.node, name, revisionsOf(reader));
    if (!lines) throw notFound(refText, reader);
    return { kind: "lines", ref: name(resolved.node), lines: lines.map(refAndText), snapshot: served(reader) };
  }
  return await zoomMessage(deps.pool, reader, resolved, name(resolved.node), options, readPage);
}

/** A shared line: a summary opens into its two lines, a single publication into its turn's cover. */
async function zoomShared(pool: Pool, reader: Reader, node: NodeAddress, refText: string): Promise<ZoomAnswer> {
  const snapshot = served(reader);
  const treeId = reader.scope.sharedTreeId;
  if (treeId === null || endOf(node) > reader.scope.publicationHighWater) throw notFound(refText, reader);
  if (node.level > 0) {
    const lines = await childLinesOf(pool, treeId, node, sharedRef, revisionsOf(reader));
    if (!lines) throw notFound(refText, reader);
    return { kind: "lines", ref: sharedRef(node), lines: lines.map(refAndText), snapshot };
  }
  const publication = await findPublication(pool, reader.scope.scopeId, node.index, reader.scope.publicationHighWater);
  if (!publication) throw notFound(refText, reader);
  if (publication.retired) {
    // A retired publication keeps its number and shows only its removed marker (its shared leaf's text): nothing of
    // its session is reachable from it (issue 15 item 4).
    const leaf = await findNodes(pool, treeId, [node], revisionsOf(reader));
    return {
      kind: "lines",
      ref: sharedRef(node),
      lines: [{ ref: sharedRef(node), text: leaf.get(nodeKey(node))?.text ?? "[removed]" }],
      snapshot,
    };
  }
  const tree = await findSessionTree(pool, publication.sessionId, publication.generation);
  // The cover as the reader's snapshot resolves it: the texts the pinned leaf revision was made from (a rebuild that
  // changes a cover text writes the leaf again, in the same commit and epoch).
  const nodes = tree ? await findNodes(pool, tree.treeId, publication.sourceCover, revisionsOf(reader)) : new Map();
  return {
    kind: "publication",
    ref: sharedRef(node),
    sessionId: publication.sessionId,
    generation: publication.generation,
    turnId: publication.turnId,
    outcome: publication.outcome,
    // The turn's own records: one run, or several when another turn's records lie between them.
    range: formatRuns(runsOfCover(publication.sourceCover)),
    completedAt: publication.completedAt.toISOString(),
    publishedAt: publication.publishedAt.toISOString(),
    cover: publication.sourceCover.map((cover) => ({
      ref: sessionRef(publication.sessionId, publication.generation, cover),
      text: nodes.get(nodeKey(cover))?.text ?? "",
    })),
    snapshot,
  };
}

/** A single message: its stored payload, paged; maxTokens bounds the page (conservatively, 3 bytes per token). */
async function zoomMessage(
  pool: Pool,
  reader: Reader,
  resolved: ResolvedSessionRef,
  ref: string,
  options: ZoomOptions,
  readPage: PageReader,
): Promise<ZoomAnswer> {
  const maxBytes = Math.max(256, Math.min(4 * 1024 * 1024, Math.floor((options.maxTokens ?? 4000) * 3)));
  const generation = resolved.tree.generation ?? 0;
  const page = await readPage(
    { sessionId: resolved.session.sessionId, generation, seq: resolved.node.index },
    options.cursor,
    maxBytes,
  );
  const [record] = await listRecords(pool, resolved.session.sessionId, generation, resolved.node.index, 1);
  // Fields named one by one: the reader hands back a whole payload page, whose own `ref` (the record's coordinates)
  // once overwrote the line's ref here when the page was spread.
  return {
    kind: "message",
    ref,
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
    snapshot: served(reader),
  };
}

export async function dateFor(
  deps: { readonly pool: Pool },
  ctx: ReadAs,
  refText: string,
): Promise<{ ref: string; first: string; last: string; snapshot: ServedSnapshot }> {
  const reader = await readerOf(deps.pool, ctx);
  const ref = parseMemoryRef(refText);
  if (!ref) throw notFound(refText, reader);
  let span: { first: Date; last: Date } | undefined;
  if (ref.tree === "shared") {
    if (reader.scope.sharedTreeId !== null && endOf(ref.node) <= reader.scope.publicationHighWater) {
      span = await publicationTimeSpan(deps.pool, reader.scope.scopeId, startOf(ref.node), endOf(ref.node));
    }
  } else {
    const resolved = await resolveSessionRef(deps.pool, reader, ref);
    if (resolved)
      span = await recordTimeSpan(
        deps.pool,
        resolved.session.sessionId,
        resolved.tree.generation ?? 0,
        startOf(ref.node),
        endOf(ref.node),
      );
  }
  if (!span) throw notFound(refText, reader);
  return {
    ref: refText.trim(),
    first: span.first.toISOString(),
    last: span.last.toISOString(),
    snapshot: served(reader),
  };
}

export async function sessionsFor(
  deps: { readonly pool: Pool },
  ctx: ReadAs,
  options: { cursor?: string; limit?: number },
): Promise<{ sessions: readonly Record<string, unknown>[]; nextCursor: string | null; snapshot: ServedSnapshot }> {
  const reader = await readerOf(deps.pool, ctx);
  // A scope reader has no session of its own; session IDs are never empty, so "" matches none.
  const ownSessionId = reader.own?.sessionId ?? "";
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
    reader.scope.scopeId,
    reader.scope.publicationHighWater,
    ownSessionId,
    after,
    limit + 1,
  );
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return {
    sessions: page.map((s) => ({
      sessionId: s.sessionId,
      own: s.sessionId === ownSessionId,
      title: s.title,
      publishedTurns: s.publications,
      firstAt: s.firstAt?.toISOString() ?? null,
      lastAt: s.lastAt?.toISOString() ?? null,
    })),
    nextCursor:
      rows.length > limit && last ? Buffer.from(`${last.cursorTime}|${last.sessionId}`).toString("base64url") : null,
    snapshot: served(reader),
  };
}

function refAndText(line: { ref: string; text: string }): { ref: string; text: string } {
  return { ref: line.ref, text: line.text };
}
