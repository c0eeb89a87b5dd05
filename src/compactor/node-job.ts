import { createHash } from "node:crypto";
import { FALLBACK_SUMMARIZER, fallbackLeafText, fallbackParentText } from "../core/fallback.js";
import { createPayloadTextDecoder } from "../core/payload.js";
import { freeLeafText, freeParentText, leafSourceAffixes, PROMPT_VERSION, utf8Bytes } from "../core/summary.js";
import { childrenOf, endOf, type NodeAddress, nodeKey, refOf, startOf } from "../core/tree.js";
import { type Pool, withTransaction } from "../store/db.js";
import { clearNodeFailure, findNodes, recordNodeFailure } from "../store/nodes.js";
import { notifyTreeChanged } from "../store/notifications.js";
import { PAYLOAD_READ_BYTES, readPayloadBytes, readRecordWithPayload } from "../store/records.js";
import { applyTreeChanges, inspectNodeJob, lockTree } from "../store/tree-changes.js";
import type { Tree } from "../store/trees.js";
import { compactorContextLines } from "./context.js";
import { type CompactorDeps, treeCacheKey, withinBudget } from "./deps.js";
import { failAndReschedule } from "./job-failure.js";
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

/** A node's summary before its commit: the text and calls, what it was made from, and whether it is a fallback. */
interface NodeSummary {
  readonly outcome: SummaryOutcome;
  readonly inputHashes: Buffer[];
  readonly fallback: boolean;
}

type JobState = NonNullable<Awaited<ReturnType<typeof inspectNodeJob>>>;

/**
 * Builds one node. Reads its inputs and context, calls the summarizer outside any transaction (every call goes to the
 * cost ledger, failed ones too), then commits in one transaction that holds the tree row: the job is completed only
 * if this worker still holds the attempt it fetched (job id + retry count), the node is inserted (its input hashes
 * recorded), the view folds, and the nodes that became ready are enqueued. A worker that lost its lease changes
 * nothing.
 */
export async function buildNodeJob(deps: CompactorDeps, job: NodeJob, signal?: AbortSignal): Promise<JobOutcome> {
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
  let summary: NodeSummary;
  try {
    summary = await summarizeNode(deps, state, node, job, calls.record, signal);
  } catch (error) {
    await calls.flush(deps.pool, reportError);
    return await recordFailure(deps, tree, node, job, error);
  }
  await calls.flush(deps.pool, reportError);
  const committed = await commitNode(deps, state, node, job, summary);
  if (committed === "inputs_changed") return "gone";
  // Reported after the commit: withTransaction may run the transaction more than once.
  if (committed === "built") {
    deps.report({
      type: "built",
      treeId: tree.treeId,
      ref: refOf(node),
      level: node.level,
      calls: summary.outcome.calls,
      overshoot: summary.outcome.overshoot,
      ...(summary.fallback ? { fallback: true } : {}),
    });
  } else {
    deps.report({ type: "lease_lost", treeId: tree.treeId, ref: refOf(node), level: node.level, jobId: job.id });
  }
  return committed;
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
): Promise<NodeSummary> {
  const { tree } = state;
  let fallback = false;
  /** The free text when there is one; else the model's summary within the budget, the labelled fallback past it. */
  const nodeText = async (
    free: string | undefined,
    summarize: (step: StepContext, context: string[]) => Promise<SummaryOutcome>,
    fallbackText: () => string,
  ): Promise<SummaryOutcome> => {
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
    const bound = node.level === 0 ? startOf(node) : endOf(node);
    return await summarize(step, await compactorContextLines(deps.pool, tree.treeId, state.latest, bound));
  };
  if (node.level === 0) {
    const leaf = await leafInput(deps.pool, tree, node.index);
    const outcome = await nodeText(
      freeLeafText(leaf.kind, leaf.text),
      (step, context) => summarizeLeaf(step, context, leaf.kind, leaf.text),
      () => fallbackLeafText(leaf.kind, utf8Bytes(leaf.text)),
    );
    return { outcome, inputHashes: [leaf.hash], fallback };
  }
  const children = childrenOf(node);
  const nodes = await findNodes(deps.pool, tree.treeId, children);
  const [a, b] = children.map((child) => nodes.get(nodeKey(child)));
  if (!a || !b) throw new Error(`children of ${refOf(node)} are not built (the job ran before its inputs existed)`);
  const outcome = await nodeText(
    freeParentText(a.text, b.text),
    (step, context) => summarizeParent(step, context, a.text, b.text),
    () => fallbackParentText(2 ** node.level),
  );
  return { outcome, inputHashes: [sha256(a.text), sha256(b.text)], fallback };
}

/** The fenced commit: complete the job if still held, insert the node, fold, enqueue what became ready. */
async function commitNode(
  deps: CompactorDeps,
  state: JobState,
  node: NodeAddress,
  job: NodeJob,
  { outcome, inputHashes, fallback }: NodeSummary,
): Promise<"built" | "lease_lost" | "inputs_changed"> {
  const { tree } = state;
  return await withTransaction(deps.pool, async (tx) => {
    const locked = await lockTree(tx, { treeId: tree.treeId });
    if (!locked) throw new Error(`tree ${tree.treeId} disappeared`);
    if (!(await completeFenced(deps.boss, tx, job))) return "lease_lost" as const;
    // A deletion (src/memory/forget.ts) may have removed or replaced a child while the summarizer ran: a parent is
    // committed only over the children it was built from (seed 000 §9 fencing by input hashes), else it is dropped
    // and built again once both children exist (now, or when the commit that rebuilds the missing one enqueues it).
    if (node.level > 0 && !(await childrenUnchanged(tx, tree.treeId, node, inputHashes))) {
      const children = await findNodes(tx, tree.treeId, childrenOf(node));
      if (children.size === 2) await enqueueNodeJobs(deps.boss, tx, tree.treeId, [node]);
      return "inputs_changed" as const;
    }
    const applied = await applyTreeChanges(
      tx,
      locked,
      [
        {
          type: "built",
          node: {
            level: node.level,
            index: node.index,
            text: outcome.text,
            inputHashes,
            summarizer: outcome.calls > 0 ? deps.summarizer.identity : fallback ? FALLBACK_SUMMARIZER : "free",
            promptVersion: outcome.calls === 0 ? null : PROMPT_VERSION,
            attempts: outcome.calls,
            overshoot: outcome.overshoot,
            jobId: job.id,
            jobAttempt: job.retryCount,
            chunks: outcome.chunks,
          },
        },
      ],
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
    return "built" as const;
  });
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

function sha256(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}

/**
 * Payload bytes read and decoded per step for a leaf's text. Read whole, a 64 MiB payload arrived as one 128 MiB hex
 * string that was parsed and decoded in one task; 1 MiB pages keep each step to a few milliseconds, and the event
 * loop turns between them (every page is a round trip).
 */
const LEAF_PAGE_BYTES = PAYLOAD_READ_BYTES;

/** A session leaf's source text (its record's kind and payload as the summarizer reads it) and payload hash. */
export async function leafInput(
  pool: Pool,
  tree: Pick<Tree, "treeId" | "kind" | "sessionId" | "generation">,
  index: number,
): Promise<{ kind: string; text: string; hash: Buffer }> {
  if (tree.kind !== "session" || tree.sessionId === null || tree.generation === null) {
    throw new Error(`tree ${tree.treeId}: leaves of ${tree.kind} trees are not built by this job`);
  }
  // One round trip for a payload of at most a page (nearly every record), with the record's fields.
  const found = await readRecordWithPayload(pool, tree.sessionId, tree.generation, index, LEAF_PAGE_BYTES);
  if (!found) throw new Error(`record ${tree.sessionId}:${tree.generation}:${index} is missing (integrity error)`);
  const { record } = found;
  // The text is joined once, with the leaf's prefix and suffix: each concatenation of a 64 MiB string is another
  // copy of it in one task when the chunker first reads it.
  const { prefix, suffix } = leafSourceAffixes(record);
  const decoder = createPayloadTextDecoder();
  const pieces: string[] = [prefix];
  if (found.payload) {
    pieces.push(decoder.push(found.payload));
  } else {
    // Blobs are immutable (addressed by their hash), so pages read in separate statements belong to one payload.
    for (let offset = 0; offset < record.payloadBytes; offset += LEAF_PAGE_BYTES) {
      pieces.push(decoder.push(await readPayloadBytes(pool, record.payloadHash, offset, LEAF_PAGE_BYTES)));
    }
  }
  pieces.push(decoder.end(), suffix);
  return { kind: record.kind, text: pieces.join(""), hash: record.payloadHash };
}
