/**
 * The memory browser's page model (`optchat browse`, `optchat export --html`): what each page shows, read through the
 * service API (views, zoom, search, payload pages, health, injections) and the store's read-only listings. Nothing
 * here writes: the browser opens the service read-only (`openMemory(…, { readOnly: true })`), and the session's memory
 * as a model reads it comes from `previewContext`, which pins nothing.
 */
import { renderSharedBlock } from "../core/context.js";
import { OptchatError } from "../core/errors.js";
import { highlightSegments, type Segment } from "../core/highlight.js";
import { parseMemoryRef, sharedRef } from "../core/refs.js";
import { queryGroups } from "../core/tokenize.js";
import { endOf, type NodeAddress, nodeKey, parseRef, refOf, startOf } from "../core/tree.js";
import { formatRuns, runsOfCover } from "../core/turn-records.js";
import {
  type CompactorWork,
  type LevelSummary,
  listCompactorWork,
  listSessionsOfScope,
  listTreeLevels,
  rangeTimeSpans,
  type SessionSummary,
  type TimeSpan,
} from "../store/browse.js";
import { listPublicationFailures, listPublications, type PublicationFailure } from "../store/publications.js";
import type { SourceRecord } from "../store/records.js";
import { findScope, type Scope, type Session } from "../store/sessions.js";
import {
  findNodes,
  findSessionTree,
  findSharedTreeOfScope,
  listNodeFailures,
  type NodeRecord,
  type Tree,
} from "../store/trees.js";
import type { TurnOutcome } from "../store/turns.js";
import type { AdapterProblem, Injection } from "./host.js";
import { inspectStoredSession } from "./inspect.js";
import { resolveSession } from "./resolve-session.js";
import { listScopes, type ScopeSummary } from "./scopes.js";
import type { Memory, PayloadPage } from "./service.js";
import type { AssembledContext, SearchAnswer } from "./shared.js";
import { renderView } from "./views.js";

export const PAGE_SIZE = { sessions: 100, records: 50, nodes: 100, publications: 100, hits: 20 } as const;
/** Bytes of each payload shown in a page of records; the message's own page shows it whole, in parts. */
export const RECORD_PREVIEW_BYTES = 64 * 1024;
export const MESSAGE_PART_BYTES = 1024 * 1024;

/**
 * The model the session page assembles memory for: a 200,000-token window with the plugin's default reservations
 * (OPTCHAT_TOOLS_TOKENS, OPTCHAT_OUTPUT_TOKENS' fallback, OPTCHAT_RESERVE_TOKENS), before the turn's own messages.
 */
export const PREVIEW_WINDOW = {
  windowTokens: 200_000,
  instructionsTokens: 10_000,
  activeTokens: 0,
  outputTokens: 4096,
  reserveTokens: 2048,
} as const;

/** Whose tree a page shows. */
export type TreeOwner =
  | { readonly kind: "session"; readonly sessionId: string }
  | { readonly kind: "shared"; readonly scopeId: string };

/** A line of a tree: a view part, a zoomed node or one of its children, with its leaf range and time span. */
export interface BrowseLine {
  readonly ref: string;
  readonly node: NodeAddress;
  readonly text: string;
  readonly built: boolean;
  /** Bytes of the summary text (0 while not summarized). */
  readonly bytes: number;
  readonly span: TimeSpan | undefined;
}

export interface ScopePage {
  readonly scope: Scope;
  readonly sharedTree: Tree | undefined;
  readonly sessions: readonly SessionSummary[];
  readonly from: number;
  readonly next: number | null;
}

export interface TreeView {
  readonly tree: Tree;
  readonly revision: number;
  readonly leafCount: number;
  readonly bytes: number;
  readonly unbuilt: number;
  readonly lines: readonly BrowseLine[];
  readonly levels: readonly LevelSummary[];
  readonly work: readonly CompactorWork[];
}

export interface SharedPage extends TreeView {
  readonly scopeId: string;
  /** The shared block exactly as a new turn of the scope reads it (the unprojected view). */
  readonly block: string;
}

export interface PublicationRow {
  readonly seq: number;
  readonly sessionId: string;
  readonly turnId: string;
  readonly outcome: TurnOutcome;
  readonly records: string;
  readonly completedAt: Date;
  readonly publishedAt: Date;
}

export interface PublicationsPage {
  readonly scopeId: string;
  readonly publications: readonly PublicationRow[];
  readonly from: number;
  readonly next: number | null;
}

export interface LevelPage {
  readonly owner: TreeOwner;
  readonly level: number;
  readonly lines: readonly (BrowseLine & Pick<NodeRecord, "summarizer" | "attempts" | "overshoot">)[];
  readonly from: number;
  readonly next: number | null;
}

export type ZoomPage =
  | {
      readonly kind: "lines";
      readonly owner: TreeOwner;
      readonly line: BrowseLine;
      readonly children: readonly BrowseLine[];
    }
  | { readonly kind: "message"; readonly sessionId: string; readonly seq: number }
  | {
      readonly kind: "publication";
      readonly scopeId: string;
      readonly line: BrowseLine;
      readonly publication: PublicationRow;
      /** The turn's records as its session's lines (zoom into the session from there). */
      readonly cover: readonly {
        readonly ref: string;
        readonly sessionId: string;
        readonly node: NodeAddress;
        readonly text: string;
      }[];
    };

export interface SessionPage {
  readonly session: Session;
  readonly view: TreeView;
  /** The memory blocks the session's next request would get, or why they could not be assembled. */
  readonly preview: { readonly context: AssembledContext } | { readonly error: string };
  readonly windowTokens: number;
  readonly health: Record<string, unknown>;
  readonly nodeFailures: readonly { ref: string; failures: number; lastFailedAt: Date; lastError: string }[];
  readonly publicationFailures: readonly PublicationFailure[];
  readonly problems: readonly AdapterProblem[];
}

export interface RecordsPage {
  readonly session: Session;
  readonly records: readonly { readonly record: SourceRecord; readonly page: PayloadPage }[];
  readonly from: number;
  readonly next: number | null;
}

export interface MessagePage {
  readonly session: Session;
  readonly record: SourceRecord;
  readonly page: PayloadPage;
}

export interface SearchPage {
  readonly scopeId: string;
  readonly query: string;
  readonly hits: readonly (SearchAnswer["hits"][number] & { readonly segments: readonly Segment[] })[];
  readonly nextCursor: string | null;
}

export interface BrowseModel {
  scopes(): Promise<ScopeSummary[]>;
  scope(scopeId: string, from: number): Promise<ScopePage>;
  shared(scopeId: string): Promise<SharedPage>;
  publications(scopeId: string, from: number): Promise<PublicationsPage>;
  level(owner: TreeOwner, level: number, from: number): Promise<LevelPage>;
  zoom(owner: TreeOwner, ref: string): Promise<ZoomPage>;
  session(sessionId: string, windowTokens?: number): Promise<SessionPage>;
  records(sessionId: string, from: number): Promise<RecordsPage>;
  message(sessionId: string, seq: number, cursor?: string): Promise<MessagePage>;
  injections(sessionId: string): Promise<{ session: Session; injections: readonly Injection[] }>;
  search(scopeId: string, query: string, cursor?: string): Promise<SearchPage>;
}

const textBytes = (text: string) => Buffer.byteLength(text, "utf8");
const refOfRecord = (r: SourceRecord) => ({ sessionId: r.sessionId, generation: r.generation, seq: r.seq });

/** The start of the page after the one starting at `from`, or null when `from + size` reaches `total`. */
function pageAfter(from: number, size: number, total: number): number | null {
  return from + size < total ? from + size : null;
}

function noScope(scopeId: string): OptchatError {
  return new OptchatError("SCOPE_DENIED", `No scope ${scopeId}`, { scopeId });
}

export function createBrowseModel(memory: Memory): BrowseModel {
  const pool = memory.pool;

  async function sharedTreeOf(scopeId: string): Promise<Tree> {
    const tree = await findSharedTreeOfScope(pool, scopeId);
    if (!tree) throw noScope(scopeId);
    return tree;
  }

  async function treeOf(owner: TreeOwner): Promise<Tree> {
    if (owner.kind === "shared") return await sharedTreeOf(owner.scopeId);
    const session = await resolveSession(memory, owner.sessionId);
    const tree = await findSessionTree(pool, session.sessionId, session.currentGeneration);
    if (!tree) throw new OptchatError("SESSION_NOT_FOUND", `Session ${session.sessionId} has no tree`, {});
    return tree;
  }

  /** Lines with their time spans (one statement for all). */
  async function withSpans(tree: Tree, lines: readonly Omit<BrowseLine, "span">[]): Promise<BrowseLine[]> {
    const spans = await rangeTimeSpans(
      pool,
      tree,
      lines.map((line) => ({ start: startOf(line.node), end: endOf(line.node) })),
    );
    return lines.map((line) => ({ ...line, span: spans.get(`${startOf(line.node)}:${endOf(line.node)}`) }));
  }

  const nameIn = (tree: Tree) => (node: NodeAddress) => (tree.kind === "shared" ? sharedRef(node) : refOf(node));

  /** The tree's latest view revision (unprojected: a projection would be cached, a write), its levels and work. */
  async function treeView(tree: Tree): Promise<TreeView> {
    const [view, levels, work] = await Promise.all([
      renderView(pool, tree),
      listTreeLevels(pool, tree.treeId),
      listCompactorWork(pool, tree.treeId),
    ]);
    const name = nameIn(tree);
    const lines = await withSpans(
      tree,
      view.lines.map((line) => {
        const node = parseRef(line.ref) as NodeAddress;
        return {
          ref: name(node),
          node,
          text: line.text,
          built: line.built,
          bytes: line.built ? textBytes(line.text) : 0,
        };
      }),
    );
    return {
      tree,
      revision: view.revision,
      leafCount: view.leafCount,
      bytes: view.bytes,
      unbuilt: view.unbuilt,
      lines,
      levels,
      work,
    };
  }

  const publicationRow = (p: Awaited<ReturnType<typeof listPublications>>[number]): PublicationRow => ({
    seq: p.publicationSeq,
    sessionId: p.sessionId,
    turnId: p.turnId,
    outcome: p.outcome,
    records: formatRuns(runsOfCover(p.sourceCover)),
    completedAt: p.completedAt,
    publishedAt: p.publishedAt,
  });

  async function nodeLine(tree: Tree, node: NodeAddress): Promise<BrowseLine> {
    const found = (await findNodes(pool, tree.treeId, [node])).get(nodeKey(node));
    const [line] = await withSpans(tree, [
      {
        ref: nameIn(tree)(node),
        node,
        text: found?.text ?? "",
        built: found !== undefined,
        bytes: found?.byteLength ?? 0,
      },
    ]);
    return line as BrowseLine;
  }

  async function sharedZoom(scopeId: string, ref: string): Promise<ZoomPage> {
    const tree = await sharedTreeOf(scopeId);
    const answer = await memory.zoom(await memory.readScope(scopeId), ref);
    const node = parseMemoryRef(answer.ref)?.node as NodeAddress;
    const line = await nodeLine(tree, node);
    if (answer.kind === "lines") {
      const children = answer.lines.map((child) => {
        const at = parseMemoryRef(child.ref)?.node as NodeAddress;
        return { ref: child.ref, node: at, text: child.text, built: true, bytes: textBytes(child.text) };
      });
      return { kind: "lines", owner: { kind: "shared", scopeId }, line, children: await withSpans(tree, children) };
    }
    if (answer.kind !== "publication")
      throw new OptchatError("REF_NOT_FOUND", `No line ${ref} in the shared tree`, { ref });
    const [publication] = await listPublications(pool, scopeId, node.index, 1);
    if (!publication) throw new OptchatError("REF_NOT_FOUND", `No publication ${ref}`, { ref });
    return {
      kind: "publication",
      scopeId,
      line,
      publication: publicationRow(publication),
      cover: answer.cover.map((c) => {
        const parsed = parseMemoryRef(c.ref);
        return { ref: c.ref, sessionId: answer.sessionId, node: parsed?.node as NodeAddress, text: c.text };
      }),
    };
  }

  async function sessionZoom(sessionId: string, ref: string): Promise<ZoomPage> {
    const session = await resolveSession(memory, sessionId);
    const result = await memory.zoomSession(session.sessionId, ref);
    if (result.kind === "record") return { kind: "message", sessionId: session.sessionId, seq: result.seq };
    const tree = await treeOf({ kind: "session", sessionId: session.sessionId });
    const line = await nodeLine(tree, parseRef(result.ref) as NodeAddress);
    const children = await withSpans(
      tree,
      result.lines.map((child) => ({
        ref: child.ref,
        node: parseRef(child.ref) as NodeAddress,
        text: child.text,
        built: true,
        bytes: textBytes(child.text),
      })),
    );
    return { kind: "lines", owner: { kind: "session", sessionId: session.sessionId }, line, children };
  }

  return {
    scopes: () => listScopes(memory, { includeIsolated: true }),

    async scope(scopeId, from) {
      const scope = await findScope(pool, scopeId);
      if (!scope) throw noScope(scopeId);
      const [sessions, sharedTree] = await Promise.all([
        listSessionsOfScope(pool, scopeId, from, PAGE_SIZE.sessions + 1),
        findSharedTreeOfScope(pool, scopeId),
      ]);
      return {
        scope,
        sharedTree,
        sessions: sessions.slice(0, PAGE_SIZE.sessions),
        from,
        next: sessions.length > PAGE_SIZE.sessions ? from + PAGE_SIZE.sessions : null,
      };
    },

    async shared(scopeId) {
      const view = await treeView(await sharedTreeOf(scopeId));
      // The block a new turn reads: every built line, the same rendering context assembly uses (core/context.ts).
      const block = renderSharedBlock(
        { scopeId },
        view.lines.filter((line) => line.built),
      ).text;
      return { ...view, scopeId, block };
    },

    async publications(scopeId, from) {
      if (!(await findScope(pool, scopeId))) throw noScope(scopeId);
      const rows = await listPublications(pool, scopeId, from, PAGE_SIZE.publications + 1);
      return {
        scopeId,
        publications: rows.slice(0, PAGE_SIZE.publications).map(publicationRow),
        from,
        next: rows.length > PAGE_SIZE.publications ? from + PAGE_SIZE.publications : null,
      };
    },

    async level(owner, level, from) {
      const tree = await treeOf(owner);
      // Only whole ranges are nodes: a level holds at most leafCount / 2^level of them.
      const nodesAtLevel = Math.floor(tree.leafCount / 2 ** level);
      const addresses: NodeAddress[] = [];
      for (let index = from; index < Math.min(from + PAGE_SIZE.nodes, nodesAtLevel); index++)
        addresses.push({ level, index });
      const found = await findNodes(pool, tree.treeId, addresses);
      const page = addresses.flatMap((a) => found.get(nodeKey(a)) ?? []);
      const lines = await withSpans(
        tree,
        page.map((n) => {
          const node = { level: n.level, index: n.index };
          return { ref: nameIn(tree)(node), node, text: n.text, built: true, bytes: n.byteLength };
        }),
      );
      return {
        owner,
        level,
        lines: lines.map((line, k) => {
          const n = page[k] as NodeRecord;
          return { ...line, summarizer: n.summarizer, attempts: n.attempts, overshoot: n.overshoot };
        }),
        from,
        next: pageAfter(from, PAGE_SIZE.nodes, nodesAtLevel),
      };
    },

    zoom: (owner, ref) =>
      owner.kind === "shared" ? sharedZoom(owner.scopeId, ref) : sessionZoom(owner.sessionId, ref),

    async session(sessionId, windowTokens = PREVIEW_WINDOW.windowTokens) {
      const session = await resolveSession(memory, sessionId);
      const tree = await treeOf({ kind: "session", sessionId: session.sessionId });
      const [view, preview, health, nodeFailures, publicationFailures, problems] = await Promise.all([
        treeView(tree),
        memory
          .previewContext(session.sessionId, { ...PREVIEW_WINDOW, windowTokens })
          .then((context) => ({ context }))
          .catch((error: Error) => ({ error: error.message })),
        inspectStoredSession(memory, session),
        listNodeFailures(pool, tree.treeId),
        listPublicationFailures(pool, session.sessionId),
        memory.host.listProblems(session.host, session.hostSessionId, 100),
      ]);
      return {
        session,
        view,
        preview,
        windowTokens,
        health: health.health as Record<string, unknown>,
        nodeFailures: nodeFailures.map((f) => ({
          ref: refOf(f),
          failures: f.failures,
          lastFailedAt: f.lastFailedAt,
          lastError: f.lastError,
        })),
        publicationFailures,
        problems,
      };
    },

    async records(sessionId, from) {
      const session = await resolveSession(memory, sessionId);
      const tree = await treeOf({ kind: "session", sessionId: session.sessionId });
      const shown = await memory.listRecords(session.sessionId, { fromSeq: from, limit: PAGE_SIZE.records });
      const records = [];
      for (const record of shown) {
        const page = await memory.readPayload(refOfRecord(record), { maxBytes: RECORD_PREVIEW_BYTES });
        records.push({ record, page });
      }
      // Seqs are gap-free from 0 and every record is a leaf: pages start at multiples of the page size.
      return { session, records, from, next: pageAfter(from, PAGE_SIZE.records, tree.leafCount) };
    },

    async message(sessionId, seq, cursor) {
      const session = await resolveSession(memory, sessionId);
      const [record] = await memory.listRecords(session.sessionId, { fromSeq: seq, limit: 1 });
      if (!record || record.seq !== seq)
        throw new OptchatError("REF_NOT_FOUND", `Session ${session.sessionId} has no message ${seq}`, { seq });
      const page = await memory.readPayload(refOfRecord(record), {
        maxBytes: MESSAGE_PART_BYTES,
        ...(cursor ? { cursor } : {}),
      });
      return { session, record, page };
    },

    async injections(sessionId) {
      const session = await resolveSession(memory, sessionId);
      return { session, injections: await memory.host.listInjections(session.sessionId, 100) };
    },

    async search(scopeId, query, cursor) {
      const answer = await memory.search(await memory.readScope(scopeId), {
        query,
        limit: PAGE_SIZE.hits,
        ...(cursor ? { cursor } : {}),
      });
      const terms = queryGroups(query).flat();
      return {
        scopeId,
        query,
        hits: answer.hits.map((hit) => ({ ...hit, segments: highlightSegments(hit.excerpt, terms) })),
        nextCursor: answer.nextCursor,
      };
    },
  };
}
