import { OptchatError } from "../core/errors.js";
import { type NodeBytes, PLACEHOLDER_TEXT, partBytes, project } from "../core/fold.js";
import { flattenLine } from "../core/summary.js";
import { childrenOf, endOf, type NodeAddress, nodeKey, parseRef, refOf } from "../core/tree.js";
import type { Queryable } from "../store/db.js";
import { findNodes, listNodeFailures, type RevisionsAt } from "../store/nodes.js";
import type { TreeListener } from "../store/notifications.js";
import { findSessionTree, type Tree } from "../store/trees.js";
import { findProjection, findViewRevision, saveProjection, type ViewRevision } from "../store/view-revisions.js";

export interface ViewLine {
  readonly ref: string;
  readonly level: number;
  /** The summary; for a part not summarized yet, the display placeholder (never cut source text). */
  readonly text: string;
  readonly built: boolean;
  readonly bytes: number;
}

export interface RenderedView {
  readonly treeId: number;
  readonly revision: number;
  readonly leafCount: number;
  readonly lines: readonly ViewLine[];
  /** Bytes of the rendered lines (`start+count|text` and newline; placeholders count their own size), as the fold measures them. */
  readonly bytes: number;
  readonly unbuilt: number;
  /** Present when a budget below the revision's size was asked for. */
  readonly projection?: { readonly budget: number; readonly fits: boolean; readonly minimalBytes?: number };
}

/** `start+count|text` lines, newlines flattened: the view as a model reads it (seed 002 §5.1). */
export function viewAsText(view: RenderedView): string {
  return view.lines.map(lineAsText).join("\n");
}

export function lineAsText(line: Pick<ViewLine, "ref" | "text">): string {
  return `${line.ref}|${flattenLine(line.text)}`;
}

export async function sessionTreeOrThrow(db: Queryable, sessionId: string, generation: number): Promise<Tree> {
  const tree = await findSessionTree(db, sessionId, generation);
  if (!tree)
    throw new OptchatError("SESSION_NOT_FOUND", `Session ${sessionId} has no generation ${generation}`, {
      sessionId,
      generation,
    });
  return tree;
}

/** Renders a view revision (the latest by default), projected to `budget` bytes when it is larger. */
export async function renderView(
  db: Queryable,
  tree: Tree,
  options: { revision?: number; budget?: number } = {},
): Promise<RenderedView> {
  const revision = await findViewRevision(db, tree.treeId, options.revision);
  if (!revision) {
    if (options.revision !== undefined) {
      throw new OptchatError("REF_NOT_FOUND", `No view revision ${options.revision} of tree ${tree.treeId}`, {
        revision: options.revision,
      });
    }
    return { treeId: tree.treeId, revision: 0, leafCount: 0, lines: [], bytes: 0, unbuilt: 0 };
  }
  let parts = revision.parts;
  let projection: RenderedView["projection"];
  if (options.budget !== undefined && revision.bytes > options.budget) {
    const projected = await projectRevision(db, revision, options.budget);
    parts = projected.parts;
    projection = {
      budget: options.budget,
      fits: projected.fits,
      ...(projected.fits ? {} : { minimalBytes: projected.bytes }),
    };
  }
  const nodes = await findNodes(db, tree.treeId, parts, { atEvent: revision.eventNo });
  const lines = parts.map((part): ViewLine => {
    const node = nodes.get(nodeKey(part));
    const bytes = partBytes(part, () => node?.byteLength);
    return node
      ? { ref: refOf(part), level: part.level, text: node.text, built: true, bytes }
      : { ref: refOf(part), level: part.level, text: PLACEHOLDER_TEXT, built: false, bytes };
  });
  return {
    treeId: tree.treeId,
    revision: revision.revision,
    leafCount: revision.leafCount,
    lines,
    bytes: lines.reduce((sum, line) => sum + line.bytes, 0),
    unbuilt: lines.filter((line) => !line.built).length,
    ...(projection ? { projection } : {}),
  };
}

/**
 * A coarser temporary cover of a revision within `budget`, from nodes built at that revision's event; cached per
 * (revision, budget). The canonical view is never changed.
 */
async function projectRevision(
  db: Queryable,
  revision: ViewRevision,
  budget: number,
): Promise<{ parts: readonly NodeAddress[]; fits: boolean; bytes: number }> {
  const cached = await findProjection(db, revision.treeId, revision.revision, budget);
  if (cached) return cached;
  const known = new Map<number, number | undefined>();
  const load = async (addresses: readonly NodeAddress[]) => {
    const found = await findNodes(db, revision.treeId, addresses, { atEvent: revision.eventNo });
    for (const a of addresses) known.set(nodeKey(a), found.get(nodeKey(a))?.byteLength);
  };
  await load(revision.parts);
  for (;;) {
    const asked: NodeAddress[] = [];
    const bytesOf: NodeBytes = (node) => {
      if (!known.has(nodeKey(node))) {
        asked.push(node);
        return undefined;
      }
      return known.get(nodeKey(node));
    };
    const result = project(revision.parts, revision.leafCount, bytesOf, budget);
    if (asked.length > 0) {
      await load(asked);
      continue;
    }
    const answer = { parts: result.parts, fits: result.fits, bytes: result.fits ? result.bytes : result.minimalBytes };
    await saveProjection(db, revision.treeId, revision.revision, budget, answer);
    return answer;
  }
}

export interface Readiness {
  readonly ready: boolean;
  readonly leafCount: number;
  readonly builtLeaves: number;
  readonly failing: readonly { ref: string; failures: number; lastError: string }[];
}

export async function readiness(db: Queryable, tree: Tree): Promise<Readiness> {
  const failures = await listNodeFailures(db, tree.treeId);
  return {
    ready: tree.builtLeaves === tree.leafCount,
    leafCount: tree.leafCount,
    builtLeaves: tree.builtLeaves,
    failing: failures.map((f) => ({ ref: refOf(f), failures: f.failures, lastError: f.lastError })),
  };
}

/**
 * Waits until every part of the session's view is a summary (seed 002 §6: wait, don't cut). Leaves are built in
 * order, so that is exactly "all leaves built". Wakes on NOTIFY from the compactor and re-checks every second anyway.
 * On timeout: MEMORY_NOT_READY with what is pending and any failing nodes.
 */
export async function settleTree(
  db: Queryable,
  listener: TreeListener,
  sessionId: string,
  generation: number,
  timeoutMs: number,
  upTo?: number,
): Promise<Readiness> {
  const deadline = Date.now() + timeoutMs;
  await listener.ready().catch(() => undefined);
  for (;;) {
    const tree = await sessionTreeOrThrow(db, sessionId, generation);
    const target = Math.min(upTo ?? tree.leafCount, tree.leafCount);
    if (tree.builtLeaves >= target) return await readiness(db, tree);
    const left = deadline - Date.now();
    if (left <= 0) {
      const state = await readiness(db, tree);
      const pending = target - state.builtLeaves;
      const failing =
        state.failing.length > 0
          ? `; failing: ${state.failing.map((f) => `${f.ref} (${f.failures}x: ${f.lastError})`).join(", ")}`
          : "";
      throw new OptchatError(
        "MEMORY_NOT_READY",
        `Memory of session ${sessionId} is not ready after ${timeoutMs} ms: ${pending} message(s) from ${state.builtLeaves}+1 not summarized yet${failing}. Is a compactor running (optchat worker)? Raise OPTCHAT_SETTLE_TIMEOUT_MS to wait longer.`,
        { sessionId, generation, pending, firstPending: state.builtLeaves, failing: state.failing },
      );
    }
    await listener.waitForChange(tree.treeId, Math.min(1000, left));
  }
}

export type ZoomResult =
  | { readonly ref: string; readonly kind: "children"; readonly lines: readonly ViewLine[] }
  | { readonly ref: string; readonly kind: "record"; readonly seq: number };

/**
 * Seed 002 §7.1: `start+count` with count a power of two, start aligned, inside the tree. A count above 1 opens into the
 * two lines it was made from; a count of 1 means the message itself (the caller reads the record's payload). Anything
 * else, including a range whose children are not built, is "no such line".
 */
export async function zoomTree(db: Queryable, tree: Tree, ref: string): Promise<ZoomResult> {
  const node = parseRef(ref);
  if (!node || endOf(node) > tree.leafCount) {
    throw new OptchatError(
      "REF_NOT_FOUND",
      `No line ${ref}: a ref is start+count with count a power of two, start a multiple of it, inside 0..${tree.leafCount}`,
      { ref },
    );
  }
  if (node.level === 0) return { ref: refOf(node), kind: "record", seq: node.index };
  const lines = await childLinesOf(db, tree.treeId, node, refOf);
  if (!lines) throw new OptchatError("REF_NOT_FOUND", `No line ${ref}: its parts are not summarized yet`, { ref });
  return { ref: refOf(node), kind: "children", lines };
}

/**
 * The two lines a summary opens into (seed 002 §7.1), named by `name`; undefined when either is not built, which
 * every zoom reports as "no such line" (a summary over unbuilt parts cannot exist yet). `at` is the revisions a
 * reader's snapshot resolves to (docs/compactor.md "Revisions and rebuild": at its revision epoch every built address
 * has exactly one, so a line opens into what it was made of even after a rebuild); without it, the newest revisions
 * (operators' reads).
 */
export async function childLinesOf(
  db: Queryable,
  treeId: number,
  node: NodeAddress,
  name: (node: NodeAddress) => string,
  at?: RevisionsAt,
): Promise<ViewLine[] | undefined> {
  const children = childrenOf(node);
  const nodes = await findNodes(db, treeId, children, at);
  const lines: ViewLine[] = [];
  for (const child of children) {
    const found = nodes.get(nodeKey(child));
    if (!found) return undefined;
    lines.push({
      ref: name(child),
      level: child.level,
      text: found.text,
      built: true,
      bytes: partBytes(child, () => found.byteLength),
    });
  }
  return lines;
}
