import { leafLineWithoutModel } from "../core/excerpt.js";
import { FALLBACK_SUMMARIZER, fallbackLeafText, fallbackParentText } from "../core/fallback.js";
import { freeParentText, PROMPT_VERSION, utf8Bytes } from "../core/summary.js";
import { childrenOf, endOf, type NodeAddress, nodeKey, refOf, startOf } from "../core/tree.js";
import { withTransaction } from "../store/db.js";
import { openParentJobsOfTree } from "../store/job-queue.js";
import { clearNodeFailure, findNodes, recordNodeFailure } from "../store/nodes.js";
import { notifyTreeChanged } from "../store/notifications.js";
import { applyTreeChanges } from "../store/tree-changes.js";
import { inspectNodeJob, lockTree } from "../store/tree-lock.js";
import type { Tree } from "../store/trees.js";
import {
  type BuiltSummary,
  type LeafSource,
  leafRun,
  MAX_BATCH_ITEMS,
  type NodeSummary,
  otherDueMerges,
  type ParentInputs,
  sha256,
  summarizeLeafRun,
  summarizeMerges,
} from "./batch.js";
import { compactorContextLines } from "./context.js";
import { type CompactorDeps, toolResultsOf, treeCacheKey, withinBudget } from "./deps.js";
import { failAndReschedule } from "./job-failure.js";
import { leafInput } from "./leaf-input.js";
import { callCollector } from "./ledger.js";
import { completeFenced, enqueueNodeJobs, type NodeJobData } from "./queue.js";
import { schedulePublicationIfReady } from "./schedule-publication.js";
import { type CallRecord, type StepContext, type SummaryOutcome, summarizeLeaf, summarizeParent } from "./summarize.js";

export interface NodeJob {
  readonly id: string;
  readonly retryCount: number;
  readonly data: NodeJobData;
}

export type JobOutcome = "built" | "already_built" | "lease_lost" | "failed" | "gone";

type JobState = NonNullable<Awaited<ReturnType<typeof inspectNodeJob>>>;

/**
 * Builds one node. Reads its inputs and context, calls the summarizer outside any transaction (every call goes to the
 * cost ledger, failed ones too), then commits in one transaction that holds the tree row: the job is completed only
 * if this worker still holds the attempt it fetched (job id + retry count), the node is inserted (its input hashes
 * recorded), the view folds, and the nodes that became ready are enqueued. A worker that lost its lease changes
 * nothing.
 */
export async function buildNodeJob(deps: CompactorDeps, job: NodeJob, signal?: AbortSignal): Promise<JobOutcome> {
  // A merge job may make the tree's other due merges in its call: the next one of this worker waits, then finds its
  // node built instead of paying for it again.
  if (job.data.level > 0) return await underTreeLock(deps, job.data.treeId, () => buildOne(deps, job, signal));
  return await buildOne(deps, job, signal);
}

const treeLocks = new WeakMap<CompactorDeps, Map<number, Promise<unknown>>>();

async function underTreeLock<T>(deps: CompactorDeps, treeId: number, run: () => Promise<T>): Promise<T> {
  let locks = treeLocks.get(deps);
  if (!locks) {
    locks = new Map();
    treeLocks.set(deps, locks);
  }
  const before = locks.get(treeId) ?? Promise.resolve();
  const mine = before.then(run);
  const tail = mine.catch(() => {});
  locks.set(treeId, tail);
  try {
    return await mine;
  } finally {
    if (locks.get(treeId) === tail) locks.delete(treeId);
  }
}

async function buildOne(deps: CompactorDeps, job: NodeJob, signal?: AbortSignal): Promise<JobOutcome> {
  const node = { level: job.data.level, index: job.data.index };
  const state = await inspectNodeJob(deps.pool, job.data.treeId, node);
  if (!state || state.built) {
    const held = await withTransaction(deps.pool, (tx) => completeFenced(deps.boss, tx, job));
    if (!held && state) {
      deps.report({
        type: "lease_lost",
        treeId: state.tree.treeId,
        ref: refOf(node),
        level: node.level,
        jobId: job.id,
      });
      return "lease_lost";
    }
    return state ? "already_built" : "gone";
  }
  const { tree } = state;
  const calls = callCollector(deps.summarizer, {
    scopeId: tree.scopeId,
    sessionId: tree.sessionId,
    treeId: tree.treeId,
    level: node.level,
    index: node.index,
    jobId: job.id,
  });
  const reportError = (error: string) => deps.report({ type: "error", error });
  let built: BuiltSummary[];
  try {
    built = await summarizeNode(deps, state, node, job, calls.record, signal);
  } catch (error) {
    await calls.flush(deps.pool, reportError);
    return await recordFailure(deps, tree, node, job, error);
  }
  await calls.flush(deps.pool, reportError);
  const committed = await commitNodes(deps, state, node, job, built);
  if (committed.outcome === "inputs_changed") return "gone";
  // Reported after the commit: withTransaction may run the transaction more than once.
  if (committed.outcome === "built") {
    for (const { node: made, summary } of committed.built)
      deps.report({
        type: "built",
        treeId: tree.treeId,
        ref: refOf(made),
        level: made.level,
        calls: summary.outcome.calls,
        overshoot: summary.outcome.overshoot,
        ...(summary.fallback ? { fallback: true } : {}),
      });
  } else {
    deps.report({ type: "lease_lost", treeId: tree.treeId, ref: refOf(node), level: node.level, jobId: job.id });
  }
  return committed.outcome;
}

/**
 * How a node gets its text: the free text when there is one; else the model's summary within the budget (its context
 * the view's lines up to `bound`), the labelled fallback past it (`fallback` then says so).
 */
interface NodeText {
  text(
    free: string | undefined,
    bound: number,
    summarize: (step: StepContext, context: string[]) => Promise<SummaryOutcome>,
    fallbackText: () => string,
  ): Promise<SummaryOutcome>;
  /** The one summary of `node` (not batched), with its inputs' hashes. */
  single(outcome: SummaryOutcome, inputHashes: Buffer[]): BuiltSummary[];
}

function nodeTextFor(
  deps: CompactorDeps,
  state: JobState,
  node: NodeAddress,
  job: NodeJob,
  record: (call: CallRecord) => void,
  signal: AbortSignal | undefined,
): NodeText {
  const { tree } = state;
  let fallback = false;
  return {
    async text(free, bound, summarize, fallbackText) {
      if (free !== undefined) return freeOutcome(free);
      if (!(await withinBudget(deps, tree))) {
        fallback = true;
        return freeOutcome(fallbackText());
      }
      deps.report({ type: "summarizing", treeId: tree.treeId, ref: refOf(node), level: node.level, jobId: job.id });
      const step: StepContext = {
        summarizer: deps.summarizer,
        purpose: node.level === 0 ? "leaf" : "merge",
        cacheKey: treeCacheKey(tree.treeId),
        record,
        ...(deps.gate ? { gate: deps.gate } : {}),
        ...(signal ? { signal } : {}),
      };
      // The context (seed 002 §4.2): the view's lines before a leaf, or up to a parent's last leaf, every one a built
      // summary by the readiness rule, checkpointed so the provider's cache can reuse it (context.ts).
      return await summarize(step, await compactorContextLines(deps.pool, tree.treeId, state.latest, bound));
    },
    single: (outcome, inputHashes) => [
      { node, summary: { outcome, inputHashes, fallback, byModel: outcome.calls > 0 } },
    ],
  };
}

/** A leaf's text, with the run of sealed messages from it compressed in one call when there is one (batch.ts). */
async function summarizeLeafNode(deps: CompactorDeps, tree: JobState["tree"], node: NodeAddress, texts: NodeText) {
  const leaf = await leafInput(deps.pool, tree, node.index);
  const source: LeafSource = { index: node.index, ...leaf };
  let batched: BuiltSummary[] | undefined;
  const outcome = await texts.text(
    leafLineWithoutModel(leaf, toolResultsOf(deps)),
    startOf(node),
    async (step, context) => {
      // The run of sealed messages from this one, compressed in one call (batch.ts); a run of one is a single step.
      const run = await leafRun(deps, tree, source, async (index) => ({
        index,
        ...(await leafInput(deps.pool, tree, index)),
      }));
      if (run.length < 2) return await summarizeLeaf(step, context, leaf.kind, leaf.text);
      batched = await summarizeLeafRun(step, context, run, toolResultsOf(deps));
      return (batched[0] as BuiltSummary).summary.outcome;
    },
    () => fallbackLeafText(leaf.kind, utf8Bytes(leaf.text)),
  );
  return batched ?? texts.single(outcome, [leaf.hash]);
}

/** A parent's text, with the tree's other merges due now in the same call (batch.ts). */
async function summarizeParentNode(deps: CompactorDeps, tree: JobState["tree"], node: NodeAddress, texts: NodeText) {
  const children = childrenOf(node);
  const nodes = await findNodes(deps.pool, tree.treeId, children);
  const [a, b] = children.map((child) => nodes.get(nodeKey(child)));
  if (!a || !b) throw new Error(`children of ${refOf(node)} are not built (the job ran before its inputs existed)`);
  const free = freeParentText(a.text, b.text);
  // The context reaches the last merge's end.
  const others: ParentInputs[] =
    free === undefined
      ? await otherDueMerges(deps, tree, node, await openParentJobsOfTree(deps.pool, tree.treeId, 4 * MAX_BATCH_ITEMS))
      : [];
  const bound = Math.max(endOf(node), ...others.map((other) => endOf(other.node)));
  let batched: BuiltSummary[] | undefined;
  const outcome = await texts.text(
    free,
    bound,
    async (step, context) => {
      if (others.length === 0) return await summarizeParent(step, context, a.text, b.text);
      batched = await summarizeMerges(step, context, [{ node, left: a.text, right: b.text }, ...others]);
      return (batched[0] as BuiltSummary).summary.outcome;
    },
    () => fallbackParentText(2 ** node.level),
  );
  return batched ?? texts.single(outcome, [sha256(a.text), sha256(b.text)]);
}

/**
 * The node's text: free when it fits (seed 002 §3); else, within the budget, from the model (say so first: a worker
 * busy in a long call must not look dead); past the budget, the labelled fallback (seed 000 §10, issue 13 item 5).
 */
async function summarizeNode(
  deps: CompactorDeps,
  state: JobState,
  node: NodeAddress,
  job: NodeJob,
  record: (call: CallRecord) => void,
  signal: AbortSignal | undefined,
): Promise<BuiltSummary[]> {
  const texts = nodeTextFor(deps, state, node, job, record, signal);
  return node.level === 0
    ? await summarizeLeafNode(deps, state.tree, node, texts)
    : await summarizeParentNode(deps, state.tree, node, texts);
}

type Committed =
  | { readonly outcome: "built"; readonly built: readonly BuiltSummary[] }
  | { readonly outcome: "lease_lost" | "inputs_changed"; readonly built: readonly BuiltSummary[] };

/**
 * The fenced commit: complete the job if still held, insert the nodes (the job's own, and a batch's others that are
 * still unbuilt over the same inputs), fold, enqueue what became ready.
 */
async function commitNodes(
  deps: CompactorDeps,
  state: JobState,
  node: NodeAddress,
  job: NodeJob,
  summaries: readonly BuiltSummary[],
): Promise<Committed> {
  const { tree } = state;
  return await withTransaction(deps.pool, async (tx): Promise<Committed> => {
    const locked = await lockTree(tx, { treeId: tree.treeId });
    if (!locked) throw new Error(`tree ${tree.treeId} disappeared`);
    if (!(await completeFenced(deps.boss, tx, job))) return { outcome: "lease_lost", built: [] };
    // A deletion (src/memory/forget.ts) may have removed or replaced a child while the summarizer ran: a parent is
    // committed only over the children it was built from (seed 000 §9 fencing by input hashes), else it is dropped
    // and built again once both children exist (now, or when the commit that rebuilds the missing one enqueues it).
    const own = summaries.find((s) => nodeKey(s.node) === nodeKey(node));
    if (node.level > 0 && own && !(await childrenUnchanged(tx, tree.treeId, node, own.summary.inputHashes))) {
      const children = await findNodes(tx, tree.treeId, childrenOf(node));
      if (children.size === 2) await enqueueNodeJobs(deps.boss, tx, tree.treeId, [node]);
      return { outcome: "inputs_changed", built: [] };
    }
    const kept = await stillToBuild(tx, locked.tree, node, summaries);
    const applied = await applyTreeChanges(
      tx,
      locked,
      kept.map(({ node: made, summary }) => ({ type: "built" as const, node: newNode(deps, made, summary, job) })),
      deps.fold,
      { buildFreeInline: true },
    );
    await enqueueNodeJobs(deps.boss, tx, tree.treeId, applied.ready);
    if (state.failing) await clearNodeFailure(tx, tree.treeId, node);
    // A session node may complete the cover of the session's next turn to publish (dependency-driven publication).
    if (tree.kind === "session" && tree.sessionId !== null && tree.generation !== null)
      await schedulePublicationIfReady(deps.boss, tx, {
        treeId: tree.treeId,
        sessionId: tree.sessionId,
        generation: tree.generation,
      });
    return { outcome: "built", built: kept };
  });
}

/**
 * What of a job's summaries the commit still writes, under the tree's lock: leaves from the first unbuilt one on, in
 * order (none if another worker built it meanwhile); the job's own parent (its inputs were checked); a batch's other
 * parents that are still unbuilt and whose children are the ones they were made from.
 */
async function stillToBuild(
  tx: Parameters<typeof findNodes>[0],
  tree: Tree,
  node: NodeAddress,
  summaries: readonly BuiltSummary[],
): Promise<BuiltSummary[]> {
  const leaves = summaries.filter((s) => s.node.level === 0 && s.node.index >= tree.builtLeaves);
  const keptLeaves = leaves[0]?.node.index === tree.builtLeaves ? leaves : [];
  const parents = summaries.filter((s) => s.node.level > 0);
  if (parents.length === 0) return keptLeaves;
  const others = parents.filter((s) => nodeKey(s.node) !== nodeKey(node));
  const found = await findNodes(tx, tree.treeId, [
    ...parents.map((s) => s.node),
    ...others.flatMap((s) => childrenOf(s.node)),
  ]);
  const unchanged = (s: BuiltSummary) =>
    childrenOf(s.node).every((child, k) => {
      const text = found.get(nodeKey(child))?.text;
      return text !== undefined && s.summary.inputHashes[k]?.equals(sha256(text)) === true;
    });
  const keptParents = parents.filter(
    (s) => !found.has(nodeKey(s.node)) && (nodeKey(s.node) === nodeKey(node) || unchanged(s)),
  );
  return [...keptLeaves, ...keptParents];
}

function newNode(deps: CompactorDeps, node: NodeAddress, summary: NodeSummary, job: NodeJob) {
  const { outcome, inputHashes, fallback, byModel } = summary;
  return {
    level: node.level,
    index: node.index,
    text: outcome.text,
    inputHashes,
    summarizer: byModel ? deps.summarizer.identity : fallback ? FALLBACK_SUMMARIZER : "free",
    promptVersion: byModel ? PROMPT_VERSION : null,
    attempts: outcome.calls,
    overshoot: outcome.overshoot,
    jobId: job.id,
    jobAttempt: job.retryCount,
    chunks: outcome.chunks,
  };
}

/**
 * A failed summary: the sources stay as they are; the node is tried again after the fixed delay (seed 002 §4.1: no
 * exponential backoff, the next turn waits on it) by a fresh job that replaces this one in the same transaction. The
 * first failure of a node is reported; later ones only counted.
 */
async function recordFailure(
  deps: CompactorDeps,
  tree: Tree,
  node: NodeAddress,
  job: NodeJob,
  error: unknown,
): Promise<JobOutcome> {
  return await failAndReschedule(
    deps,
    {
      job,
      record: async (tx, message) => (await recordNodeFailure(tx, tree.treeId, node, message)).failures,
      reschedule: async (tx, delaySeconds) => {
        await enqueueNodeJobs(deps.boss, tx, tree.treeId, [node], delaySeconds);
        await notifyTreeChanged(tx, tree.treeId);
      },
      where: { treeId: tree.treeId, ref: refOf(node), level: node.level },
    },
    error,
  );
}

async function childrenUnchanged(
  tx: Parameters<typeof findNodes>[0],
  treeId: number,
  node: NodeAddress,
  inputHashes: readonly Buffer[],
): Promise<boolean> {
  const children = childrenOf(node);
  const found = await findNodes(tx, treeId, children);
  return children.every((child, k) => {
    const text = found.get(nodeKey(child))?.text;
    return text !== undefined && inputHashes[k]?.equals(sha256(text)) === true;
  });
}

function freeOutcome(text: string): SummaryOutcome {
  return { text, calls: 0, overshoot: false, inputBytes: 0, chunks: [] };
}
