/**
 * Planning a rebuild of one tree (issue 15 item 1): which of its nodes get a new revision, and their texts, written by
 * the current compactor. src/memory/rebuild.ts runs it twice per attempt: outside any transaction with the model
 * (`compute`), and again inside the commit under the trees' locks with the texts computed so far only (`commit`), so
 * that what commits derives exactly from the inputs as they are at the commit.
 *
 * A node is rebuilt when it is selected (core/revisions.ts: another model or prompt version, a labelled fallback, or
 * the prompt version asked for) or when one of its inputs gets a new text in this rebuild: a parent from its two
 * children, a publication's shared leaf from its source cover (the session nodes the publication names). Children
 * come before parents (the plan walks levels upwards), session trees before the shared tree. Texts are computed as
 * the compactor's jobs compute them (free when they fit, else the summarizer with the view as context) and cached by
 * the node and the hashes of its inputs, so a second pass asks the model nothing it has answered.
 */
import { createHash } from "node:crypto";
import { OptchatError } from "../core/errors.js";
import { leafLineWithoutModel, type ToolResultLines } from "../core/excerpt.js";
import { FALLBACK_SUMMARIZER } from "../core/fallback.js";
import { isNewRevision, type RebuildCriteria, selectedForRebuild } from "../core/revisions.js";
import { freeParentText, PROMPT_VERSION } from "../core/summary.js";
import { childrenOf, endOf, type NodeAddress, nodeKey, refOf, startOf } from "../core/tree.js";
import type { Pool, Queryable } from "../store/db.js";
import { findNodes, type NewNode } from "../store/nodes.js";
import {
  type CurrentNode,
  listCurrentNodes,
  listLivePublications,
  type PublicationSource,
} from "../store/revisions.js";
import { findSessionTree, type Tree } from "../store/trees.js";
import { findViewRevision } from "../store/view-revisions.js";
import type { Budget } from "./budget.js";
import { compactorContextLines } from "./context.js";
import { type CompactorEvent, toolResultsOf, treeCacheKey } from "./deps.js";
import { leafInput } from "./leaf-input.js";
import { callCollector } from "./ledger.js";
import { publicationLeaf } from "./publish.js";
import { type StepContext, type SummaryOutcome, summarizeLeaf, summarizeParent } from "./summarize.js";
import type { Summarizer } from "./summarizer.js";

export interface RebuildCompactor {
  readonly pool: Pool;
  readonly summarizer: Summarizer;
  /** How a tool result's leaf line is made (OPTCHAT_COMPACTOR_TOOL_RESULTS); absent: `excerpt`. */
  readonly toolResults?: ToolResultLines;
  readonly budget?: Budget;
  readonly report: (event: CompactorEvent) => void;
}

/** A computed text with what made it; cached across passes by node and inputs. */
interface Computed {
  readonly text: string;
  readonly summarizer: string;
  readonly promptVersion: string | null;
  readonly attempts: number;
  readonly overshoot: boolean;
  readonly chunks: NewNode["chunks"];
}

/** What passes of one rebuild share: the selection (fixed by the first pass) and the computed texts. */
export interface RebuildMemo {
  readonly criteria: RebuildCriteria;
  /**
   * Whether a tree's own nodes are selected; false for the shared tree when one session is rebuilt (its leaves
   * derived from the session and the summaries above them are rebuilt, nothing else of it).
   */
  readonly selects: (tree: Tree) => boolean;
  /**
   * Per tree, `${treeId}:${level}:${index}` of the nodes selected by the first pass over it; later passes select none
   * (a node the running compactor builds meanwhile is left to the next rebuild, so that a busy worker of another model
   * cannot keep the rebuild from committing).
   */
  readonly selected: Map<number, Set<string>>;
  readonly texts: Map<string, Computed>;
  /** Model calls made so far. */
  calls: number;
}

export function newRebuildMemo(criteria: RebuildCriteria, selects: (tree: Tree) => boolean = () => true): RebuildMemo {
  return { criteria, selects, selected: new Map(), texts: new Map(), calls: 0 };
}

/** A commit pass found an input it has no text for: compute again outside the transaction, then commit again. */
export class NeedsCompute extends Error {
  constructor(where: string) {
    super(`rebuild: ${where} changed while the rebuild ran and must be summarized again`);
    this.name = "NeedsCompute";
  }
}

/** The new revisions of one tree, children first, and the texts they changed (what derived nodes read). */
export interface TreePlan {
  readonly tree: Tree;
  readonly revisions: readonly NewNode[];
  readonly changed: ReadonlyMap<number, string>;
  /** How many of the revisions replace a labelled fallback. */
  readonly fallbacksReplaced: number;
}

export interface PlanPass {
  readonly db: Queryable;
  readonly memo: RebuildMemo;
  /** With the model (outside a transaction); without: only cached and free texts (inside the commit). */
  readonly mode: "compute" | "commit";
  readonly compactor: RebuildCompactor;
  /** The plans of the session trees done in this pass, by `${sessionId}:${generation}` (shared leaves read them). */
  readonly sessionPlans: ReadonlyMap<string, TreePlan>;
  /** Called after each node is planned (progress). */
  readonly onNode?: () => void;
}

/** Plans one tree: see the module comment. */
export async function planTreeRebuild(pass: PlanPass, tree: Tree): Promise<TreePlan> {
  const nodes = await listCurrentNodes(pass.db, tree.treeId);
  const at: TreeAt = {
    tree,
    current: new Map(nodes.map((node) => [nodeKey(node), node])),
    changed: new Map(),
    publications:
      tree.kind === "shared" && tree.scopeId ? await listLivePublications(pass.db, tree.scopeId) : new Map(),
    latest: undefined,
  };
  const revisions: NewNode[] = [];
  let fallbacksReplaced = 0;
  const firstPass = !pass.memo.selected.has(tree.treeId);
  const selected = pass.memo.selected.get(tree.treeId) ?? new Set<string>();
  for (const node of nodes) {
    pass.onNode?.();
    const id = `${tree.treeId}:${node.level}:${node.index}`;
    if (firstPass && pass.memo.selects(tree) && selectedForRebuild(node, pass.memo.criteria)) selected.add(id);
    const input = await inputsOf(pass, at, node, selected.has(id));
    if (!input) continue;
    const key = `${id}:${input.hashes.map((h) => h.toString("hex")).join(",")}`;
    let made = pass.memo.texts.get(key);
    if (!made) {
      if (pass.mode === "commit") throw new NeedsCompute(`${refOf(node)} of tree ${tree.treeId}`);
      made = await input.build();
      pass.memo.texts.set(key, made);
      pass.memo.calls += made.attempts;
    }
    if (!isNewRevision(node, made)) continue;
    revisions.push({
      level: node.level,
      index: node.index,
      inputHashes: [...input.hashes],
      jobId: null,
      jobAttempt: null,
      ...made,
    });
    if (made.text !== node.text) at.changed.set(nodeKey(node), made.text);
    if (node.summarizer === FALLBACK_SUMMARIZER) fallbacksReplaced += 1;
  }
  if (firstPass) pass.memo.selected.set(tree.treeId, selected);
  return { tree, revisions, changed: at.changed, fallbacksReplaced };
}

/** One tree while it is planned. */
interface TreeAt {
  readonly tree: Tree;
  readonly current: ReadonlyMap<number, CurrentNode>;
  /** New texts of this plan so far. */
  readonly changed: Map<number, string>;
  readonly publications: ReadonlyMap<number, PublicationSource>;
  /** The latest view, read once for the compactor's context. */
  latest: { revision: Awaited<ReturnType<typeof findViewRevision>> } | undefined;
}

interface NodeInputs {
  readonly hashes: readonly Buffer[];
  readonly build: () => Promise<Computed>;
}

/**
 * What a node is made from now and how to make it, when it must be rebuilt (selected, or an input has a new text);
 * undefined otherwise, and for nodes no rebuild makes (a retired publication's marker leaf).
 */
async function inputsOf(
  pass: PlanPass,
  at: TreeAt,
  node: CurrentNode,
  selected: boolean,
): Promise<NodeInputs | undefined> {
  if (node.level > 0) {
    const children = childrenOf(node);
    const [left, right] = children.map(
      (child) => at.changed.get(nodeKey(child)) ?? at.current.get(nodeKey(child))?.text,
    );
    if (left === undefined || right === undefined) return undefined;
    if (!selected && !children.some((child) => at.changed.has(nodeKey(child)))) return undefined;
    return { hashes: [sha256(left), sha256(right)], build: () => buildParent(pass, at, node, left, right) };
  }
  if (at.tree.kind === "session") {
    // A session leaf's input is its record's payload, which never changes: only a selected leaf is rebuilt.
    if (!selected) return undefined;
    return { hashes: node.inputHashes, build: () => buildLeaf(pass, at, node) };
  }
  const publication = at.publications.get(node.index);
  if (!publication) return undefined;
  const plan = pass.sessionPlans.get(`${publication.sessionId}:${publication.generation}`);
  const coverChanged = plan !== undefined && publication.cover.some((c) => plan.changed.has(nodeKey(c)));
  if (!selected && !coverChanged) return undefined;
  const texts = await coverTexts(pass.db, publication, plan);
  return {
    hashes: texts.map(sha256),
    build: () => buildPublicationLeaf(pass, at, publication, texts.join("\n")),
  };
}

/** The texts of a publication's source cover: this rebuild's new ones, else the stored ones. */
async function coverTexts(
  db: Queryable,
  publication: PublicationSource,
  plan: TreePlan | undefined,
): Promise<string[]> {
  const tree = plan?.tree ?? (await findSessionTree(db, publication.sessionId, publication.generation));
  const stored = tree ? await findNodes(db, tree.treeId, publication.cover) : new Map();
  return publication.cover.map((node) => plan?.changed.get(nodeKey(node)) ?? stored.get(nodeKey(node))?.text ?? "");
}

function free(text: string): Computed {
  return { text, summarizer: "free", promptVersion: null, attempts: 0, overshoot: false, chunks: [] };
}

function byModel(pass: PlanPass, outcome: SummaryOutcome): Computed {
  return {
    text: outcome.text,
    summarizer: outcome.calls > 0 ? pass.compactor.summarizer.identity : "free",
    promptVersion: outcome.calls > 0 ? PROMPT_VERSION : null,
    attempts: outcome.calls,
    overshoot: outcome.overshoot,
    chunks: outcome.chunks,
  };
}

async function buildLeaf(pass: PlanPass, at: TreeAt, node: CurrentNode): Promise<Computed> {
  const leaf = await leafInput(pass.compactor.pool, at.tree, node.index);
  const text = leafLineWithoutModel(leaf, toolResultsOf(pass.compactor));
  if (text !== undefined) return free(text);
  return await withModel(pass, at, node, startOf(node), (step, context) =>
    summarizeLeaf(step, context, leaf.kind, leaf.text),
  );
}

async function buildParent(pass: PlanPass, at: TreeAt, node: CurrentNode, left: string, right: string) {
  const text = freeParentText(left, right);
  if (text !== undefined) return free(text);
  return await withModel(pass, at, node, endOf(node), (step, context) => summarizeParent(step, context, left, right));
}

/** A model step for a node of the tree, with the view as context, its calls in the ledger, within the budget. */
async function withModel(
  pass: PlanPass,
  at: TreeAt,
  node: NodeAddress,
  bound: number,
  summarize: (step: StepContext, context: string[]) => Promise<SummaryOutcome>,
): Promise<Computed> {
  const { compactor } = pass;
  const { tree } = at;
  await requireBudget(compactor, tree);
  at.latest ??= { revision: await findViewRevision(compactor.pool, tree.treeId) };
  const context = await compactorContextLines(compactor.pool, tree.treeId, at.latest.revision, bound);
  const calls = callCollector(compactor.summarizer, {
    scopeId: tree.scopeId,
    sessionId: tree.sessionId,
    treeId: tree.treeId,
    level: node.level,
    index: node.index,
    jobId: null,
  });
  const step: StepContext = {
    summarizer: compactor.summarizer,
    purpose: node.level === 0 ? "leaf" : "merge",
    cacheKey: treeCacheKey(tree.treeId),
    record: calls.record,
  };
  try {
    return byModel(pass, await summarize(step, context));
  } finally {
    await calls.flush(compactor.pool, (error) => compactor.report({ type: "error", error }));
  }
}

async function buildPublicationLeaf(
  pass: PlanPass,
  at: TreeAt,
  publication: PublicationSource,
  coverText: string,
): Promise<Computed> {
  const { tree } = at;
  const leaf = await publicationLeaf(
    pass.compactor,
    null,
    { scopeId: tree.scopeId as string, sessionId: publication.sessionId, sharedTree: tree },
    publication.outcome,
    coverText,
    publication.records,
  );
  if (leaf.fallback) await requireBudget(pass.compactor, tree);
  return {
    text: leaf.text,
    summarizer: leaf.calls > 0 ? pass.compactor.summarizer.identity : leaf.fallback ? FALLBACK_SUMMARIZER : "free",
    promptVersion: leaf.calls > 0 ? PROMPT_VERSION : null,
    attempts: leaf.calls,
    overshoot: leaf.overshoot,
    chunks: [],
  };
}

/**
 * A rebuild never writes fallbacks (it would replace a line by another one as poor): past a budget cap it stops, and
 * nothing of it is committed.
 */
async function requireBudget(compactor: RebuildCompactor, tree: Pick<Tree, "treeId" | "scopeId">): Promise<void> {
  if (!compactor.budget?.limited) return;
  const verdict = await compactor.budget.checkTree(tree.treeId, tree.scopeId);
  if (verdict.allowed) return;
  throw new OptchatError(
    "BUDGET_EXCEEDED",
    `optchat rebuild stopped: the compactor's budget is spent (${verdict.reason}); nothing was changed. Raise the cap it names (OPTCHAT_BUDGET_DAILY_USD, OPTCHAT_BUDGET_DAILY_TOKENS, OPTCHAT_BUDGET_SCOPE_DAILY_USD, OPTCHAT_BUDGET_SCOPE_DAILY_TOKENS; 0 turns one off) or run it again on the next UTC day.`,
    { reason: verdict.reason },
  );
}

function sha256(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}
