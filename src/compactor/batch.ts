/**
 * Several nodes of one tree in one model call (issue 39, docs/compactor.md "Batches"): a leaf job compresses the run of
 * sealed messages that starts at its leaf, a merge job makes every merge of the tree whose job is due. Each answer line
 * becomes its node; a line that is unusable is made alone with the single step's retries. Every node is committed by
 * the job's one fenced transaction (node-job.ts); the other nodes' jobs then find them built.
 */
import { createHash } from "node:crypto";
import { fitsInBytes } from "../core/chunk.js";
import { leafLineWithoutModel, type ToolResultLines } from "../core/excerpt.js";
import { freeParentText, utf8Bytes } from "../core/summary.js";
import { childrenOf, endOf, type NodeAddress, nodeKey } from "../core/tree.js";
import { findNodes } from "../store/nodes.js";
import type { Tree } from "../store/trees.js";
import { runBatch } from "./batch-step.js";
import { type CompactorDeps, toolResultsOf } from "./deps.js";
import { type StepContext, type SummaryOutcome, summarizeLeaf, summarizeParent } from "./summarize.js";

/** Model items per call at most: each answer line is up to 512 bytes, and a long answer is slow to stream. */
export const MAX_BATCH_ITEMS = 16;
/** Leaves looked at past the first (short ones are shown for context and cost no answer line). */
const MAX_SCANNED_LEAVES = 48;
/** Message bytes per leaf batch at most (and a quarter of the model's window). */
const MAX_BATCH_BYTES = 64 * 1024;

/** A node's summary before its commit: the text and calls, what it was made from, and who made it. */
export interface NodeSummary {
  readonly outcome: SummaryOutcome;
  readonly inputHashes: Buffer[];
  readonly fallback: boolean;
  /** Written by the model (in a batch, only the first node carries the batch's calls). */
  readonly byModel: boolean;
}

export interface BuiltSummary {
  readonly node: NodeAddress;
  readonly summary: NodeSummary;
}

export interface LeafSource {
  readonly index: number;
  readonly kind: string;
  readonly toolName?: string | null;
  readonly text: string;
  readonly hash: Buffer;
}

/**
 * The run of leaves a leaf job compresses: its own leaf (which needs the model) and the sealed leaves after it, up to
 * the last one that needs the model within the limits; short ones in between go along as context (they are their own
 * lines). A leaf too large for one step (it is chunked) ends the run before it.
 */
export async function leafRun(
  deps: CompactorDeps,
  tree: Tree,
  first: LeafSource,
  read: (index: number) => Promise<LeafSource>,
): Promise<LeafSource[]> {
  const maxStep = Math.floor(deps.summarizer.windowBytes / 2);
  const byteCap = Math.min(MAX_BATCH_BYTES, Math.floor(deps.summarizer.windowBytes / 4));
  const run: LeafSource[] = [first];
  let lastModel = 0;
  let models = 1;
  let bytes = utf8Bytes(first.text);
  for (let index = first.index + 1; index < tree.leafCount && index <= first.index + MAX_SCANNED_LEAVES; index++) {
    const leaf = await read(index);
    const free = leafLineWithoutModel(leaf, toolResultsOf(deps)) !== undefined;
    const size = utf8Bytes(leaf.text);
    if (!free && (!fitsInBytes(leaf.text, maxStep) || models >= MAX_BATCH_ITEMS)) break;
    if (bytes + size > byteCap) break;
    run.push(leaf);
    bytes += size;
    if (!free) {
      models += 1;
      lastModel = run.length - 1;
    }
  }
  return run.slice(0, lastModel + 1);
}

/**
 * The leaves of a run summarized: one call for the messages that need the model, lines made without it (free ones,
 * tool results' excerpts) for the others.
 */
export async function summarizeLeafRun(
  step: StepContext,
  context: readonly string[],
  run: readonly LeafSource[],
  toolResults: ToolResultLines,
): Promise<BuiltSummary[]> {
  const items = run.map((leaf) => {
    const line = leafLineWithoutModel(leaf, toolResults);
    return { kind: leaf.kind, text: leaf.text, kept: line !== undefined, ...(line !== undefined ? { line } : {}) };
  });
  const answer = await runBatch(step, context, { type: "compress_batch", items });
  const out: BuiltSummary[] = [];
  const before: string[] = [...context];
  let k = 0;
  let calls = answer.calls;
  for (const leaf of run) {
    const free = leafLineWithoutModel(leaf, toolResults);
    let outcome: SummaryOutcome;
    if (free !== undefined) outcome = plain(free, 0);
    else {
      const line = answer.lines[k++];
      // An unusable line: this message alone, with the single step's retries, after the lines before it.
      const made = line !== undefined ? plain(line, 0) : await summarizeLeaf(step, before, leaf.kind, leaf.text);
      outcome = { ...made, calls: made.calls + calls };
      calls = 0;
    }
    before.push(outcome.text);
    out.push({
      node: { level: 0, index: leaf.index },
      summary: { outcome, inputHashes: [leaf.hash], fallback: false, byModel: free === undefined },
    });
  }
  return out;
}

export interface ParentInputs {
  readonly node: NodeAddress;
  readonly left: string;
  readonly right: string;
}

/**
 * Other merges of the tree due now that the model must make, with their children's texts, at most
 * MAX_BATCH_ITEMS - 1: each has a job (the view wants it, src/core/wanted.ts), both children built, and no node yet.
 */
export async function otherDueMerges(
  deps: CompactorDeps,
  tree: Tree,
  own: NodeAddress,
  candidates: readonly NodeAddress[],
): Promise<ParentInputs[]> {
  const others = candidates.filter(
    (node) => node.level > 0 && nodeKey(node) !== nodeKey(own) && endOf(node) <= tree.builtLeaves,
  );
  if (others.length === 0) return [];
  const found = await findNodes(deps.pool, tree.treeId, [...others, ...others.flatMap((node) => childrenOf(node))]);
  const out: ParentInputs[] = [];
  for (const node of others) {
    if (found.has(nodeKey(node))) continue;
    const [a, b] = childrenOf(node).map((child) => found.get(nodeKey(child))?.text);
    if (a === undefined || b === undefined || freeParentText(a, b) !== undefined) continue;
    out.push({ node, left: a, right: b });
    if (out.length >= MAX_BATCH_ITEMS - 1) break;
  }
  return out;
}

/** Merges summarized in one call; an unusable line is made alone. */
export async function summarizeMerges(
  step: StepContext,
  context: readonly string[],
  merges: readonly ParentInputs[],
): Promise<BuiltSummary[]> {
  const answer = await runBatch(step, context, {
    type: "merge_batch",
    pairs: merges.map(({ left, right }) => ({ left, right })),
  });
  const out: BuiltSummary[] = [];
  let calls = answer.calls;
  for (const [k, merge] of merges.entries()) {
    const line = answer.lines[k];
    const made = line !== undefined ? plain(line, 0) : await summarizeParent(step, context, merge.left, merge.right);
    const outcome = { ...made, calls: made.calls + calls };
    calls = 0;
    out.push({
      node: merge.node,
      summary: { outcome, inputHashes: [sha256(merge.left), sha256(merge.right)], fallback: false, byModel: true },
    });
  }
  return out;
}

function plain(text: string, calls: number): SummaryOutcome {
  return { text, calls, overshoot: false, inputBytes: 0, chunks: [] };
}

export function sha256(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}
