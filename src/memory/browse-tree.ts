/**
 * The browser's tree pages (src/memory/browse.ts): a tree's view line by line, its levels, and a line zoomed into
 * what it summarizes, each line with its range, time span and size. Read through the service (views, zoom) and the
 * store's read-only listings.
 */
import { OptchatError } from "../core/errors.js";
import { parseMemoryRef, sharedRef } from "../core/refs.js";
import { endOf, type NodeAddress, nodeKey, parseRef, refOf, startOf } from "../core/tree.js";
import { formatRuns, runsOfCover } from "../core/turn-records.js";
import {
  type CompactorWork,
  type LevelSummary,
  listCompactorWork,
  listTreeLevels,
  rangeTimeSpans,
  type TimeSpan,
} from "../store/browse.js";
import { findNodes, type NodeRecord } from "../store/nodes.js";
import { listPublications, type Publication } from "../store/publications.js";
import { findSessionTree, findSharedTreeOfScope, type Tree } from "../store/trees.js";
import type { TurnOutcome } from "../store/turns.js";
import { resolveSession } from "./resolve-session.js";
import type { Memory } from "./service.js";
import { renderView } from "./views.js";

/** Rows per page of each paged listing (pages start at multiples of these, so the export can name its files). */
export const PAGE_SIZE = { sessions: 100, records: 50, nodes: 100, publications: 100, hits: 20 } as const;

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

export interface PublicationRow {
  readonly seq: number;
  readonly sessionId: string;
  readonly turnId: string;
  readonly outcome: TurnOutcome;
  readonly records: string;
  readonly completedAt: Date;
  readonly publishedAt: Date;
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

export interface TreeReader {
  treeOf(owner: TreeOwner): Promise<Tree>;
  sharedTreeOf(scopeId: string): Promise<Tree>;
  treeView(tree: Tree): Promise<TreeView>;
  level(owner: TreeOwner, level: number, from: number): Promise<LevelPage>;
  zoom(owner: TreeOwner, ref: string): Promise<ZoomPage>;
}

export const textBytes = (text: string) => Buffer.byteLength(text, "utf8");

/** The start of the page after the one starting at `from`, or null when `from + size` reaches `total`. */
export function pageAfter(from: number, size: number, total: number): number | null {
  return from + size < total ? from + size : null;
}

export function noScope(scopeId: string): OptchatError {
  return new OptchatError("SCOPE_DENIED", `No scope ${scopeId}`, { scopeId });
}

export function publicationRow(p: Publication): PublicationRow {
  return {
    seq: p.publicationSeq,
    sessionId: p.sessionId,
    turnId: p.turnId,
    outcome: p.outcome,
    records: formatRuns(runsOfCover(p.sourceCover)),
    completedAt: p.completedAt,
    publishedAt: p.publishedAt,
  };
}

export function createTreeReader(memory: Memory): TreeReader {
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
    treeOf,
    sharedTreeOf,
    treeView,
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
  };
}
