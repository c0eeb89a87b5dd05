import { createHash } from "node:crypto";
import type { PgBoss } from "pg-boss";
import type { FoldParams } from "../core/fold.js";
import { createPayloadTextDecoder } from "../core/payload.js";
import { freeLeafText, freeParentText, leafSourceAffixes, PROMPT_VERSION } from "../core/summary.js";
import { childrenOf, endOf, type NodeAddress, nodeKey, refOf, startOf } from "../core/tree.js";
import { type Pool, withTransaction } from "../store/db.js";
import { notifyTreeChanged } from "../store/notifications.js";
import { PAYLOAD_READ_BYTES, readPayloadBytes, readRecordWithPayload } from "../store/records.js";
import { applyTreeChanges, inspectNodeJob, lockTree } from "../store/tree-changes.js";
import { clearNodeFailure, findNodes, findReadyUnbuiltNodes, recordNodeFailure, type Tree } from "../store/trees.js";
import { findSessionsWithFinishedPendingTurns } from "../store/turns.js";
import { createOpenAiCompatibleSummarizer } from "./openai-summarizer.js";
import { publishTurnJob } from "./publish.js";
import {
  completeFenced,
  createBoss,
  enqueueNodeJobs,
  NODE_QUEUE,
  type NodeJobData,
  PUBLISH_QUEUE,
  type PublishJobData,
} from "./queue.js";
import { schedulePublicationIfReady } from "./schedule-publication.js";
import { type SummaryOutcome, summarizeLeaf, summarizeParent } from "./summarize.js";
import { createFakeSummarizer, type FakeSummarizerOptions, type Summarizer } from "./summarizer.js";

export type CompactorEvent =
  | {
      readonly type: "built";
      readonly treeId: number;
      readonly ref: string;
      readonly level: number;
      readonly calls: number;
      readonly overshoot: boolean;
    }
  | {
      readonly type: "lease_lost";
      readonly treeId: number;
      readonly ref: string;
      readonly level: number;
      readonly jobId: string;
    }
  | {
      readonly type: "failure";
      readonly treeId: number;
      readonly ref: string;
      readonly level: number;
      readonly failures: number;
      readonly error: string;
    }
  | { readonly type: "rescheduled"; readonly nodes: number; readonly publications: number }
  | {
      readonly type: "summarizing";
      readonly treeId: number;
      readonly ref: string;
      readonly level: number;
      readonly jobId: string;
    }
  | { readonly type: "error"; readonly error: string };

export interface CompactorDeps {
  readonly pool: Pool;
  readonly boss: PgBoss;
  readonly summarizer: Summarizer;
  readonly fold: FoldParams;
  readonly failureRetrySeconds: number;
  readonly report: (event: CompactorEvent) => void;
}

export interface NodeJob {
  readonly id: string;
  readonly retryCount: number;
  readonly data: NodeJobData;
}

export type JobOutcome = "built" | "already_built" | "lease_lost" | "failed" | "gone";

/**
 * Builds one node. Reads its inputs and context, calls the summarizer outside any transaction, then commits in one
 * transaction that holds the tree row: the job is completed only if this worker still holds the attempt it fetched
 * (job id + retry count), the node is inserted (its input hashes recorded), the view folds, and the nodes that became
 * ready are enqueued. A worker that lost its lease changes nothing.
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
  let outcome: SummaryOutcome;
  let inputHashes: Buffer[];
  try {
    // The summarizer's context (seed 002 §4.2): the current view's lines before a leaf, or up to a parent's last
    // leaf; every one of them is a built summary by the readiness rule. Free nodes need none, so it is read lazily.
    const context = async () => {
      const bound = node.level === 0 ? startOf(node) : endOf(node);
      const parts = (state.latest?.parts ?? []).filter((part) => endOf(part) <= bound);
      const texts = await findNodes(deps.pool, tree.treeId, parts);
      return parts.flatMap((part) => texts.get(nodeKey(part))?.text ?? []);
    };
    // A node that is not free needs the model: say so (a worker busy in a long call must not look dead), then call it.
    const withModel = async (summarize: (context: string[]) => Promise<SummaryOutcome>) => {
      deps.report({ type: "summarizing", treeId: tree.treeId, ref: refOf(node), level: node.level, jobId: job.id });
      return await summarize(await context());
    };
    if (node.level === 0) {
      const leaf = await leafInput(deps.pool, tree, node.index);
      inputHashes = [leaf.hash];
      const free = freeLeafText(leaf.kind, leaf.text);
      outcome =
        free !== undefined
          ? freeOutcome(free)
          : await withModel((context) => summarizeLeaf(deps.summarizer, context, leaf.kind, leaf.text, signal));
    } else {
      const children = childrenOf(node);
      const nodes = await findNodes(deps.pool, tree.treeId, children);
      const [a, b] = children.map((child) => nodes.get(nodeKey(child)));
      if (!a || !b) throw new Error(`children of ${refOf(node)} are not built (the job ran before its inputs existed)`);
      inputHashes = [sha256(a.text), sha256(b.text)];
      const free = freeParentText(a.text, b.text);
      outcome =
        free !== undefined
          ? freeOutcome(free)
          : await withModel((context) => summarizeParent(deps.summarizer, context, a.text, b.text, signal));
    }
  } catch (error) {
    return await recordFailure(deps, tree, node, job, error);
  }

  const committed = await withTransaction(deps.pool, async (tx) => {
    const locked = await lockTree(tx, { treeId: tree.treeId });
    if (!locked) throw new Error(`tree ${tree.treeId} disappeared`);
    if (!(await completeFenced(deps.boss, tx, job))) return "lease_lost" as const;
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
            summarizer: outcome.calls === 0 ? "free" : deps.summarizer.identity,
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
  // Reported after the commit: withTransaction may run the transaction more than once.
  if (committed === "built") {
    deps.report({
      type: "built",
      treeId: tree.treeId,
      ref: refOf(node),
      level: node.level,
      calls: outcome.calls,
      overshoot: outcome.overshoot,
    });
  } else {
    deps.report({ type: "lease_lost", treeId: tree.treeId, ref: refOf(node), level: node.level, jobId: job.id });
  }
  return committed;
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
  const message = error instanceof Error ? error.message : String(error);
  const failures = await withTransaction(deps.pool, async (tx) => {
    if (!(await completeFenced(deps.boss, tx, job))) return 0;
    const { failures } = await recordNodeFailure(tx, tree.treeId, node, message);
    await enqueueNodeJobs(deps.boss, tx, tree.treeId, [node], deps.failureRetrySeconds);
    await notifyTreeChanged(tx, tree.treeId);
    return failures;
  });
  if (failures === 0) return "lease_lost";
  if (failures === 1)
    deps.report({
      type: "failure",
      treeId: tree.treeId,
      ref: refOf(node),
      level: node.level,
      failures,
      error: message,
    });
  return "failed";
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

async function leafInput(pool: Pool, tree: Tree, index: number): Promise<{ kind: string; text: string; hash: Buffer }> {
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

export interface ProviderSettings {
  /** OPTCHAT_SUMMARIZER_URL: base URL ending in /v1. */
  readonly url: string;
  /** OPTCHAT_SUMMARIZER_MODEL. */
  readonly model: string;
  /** OPTCHAT_SUMMARIZER_API_KEY ('' for none). */
  readonly apiKey: string;
}

/**
 * Parses OPTCHAT_SUMMARIZER (validated by the config): 'fake' with optional comma-separated options, or
 * 'openai-compatible', which needs the provider settings.
 */
export function summarizerFromSetting(setting: string, provider?: ProviderSettings): Summarizer {
  if (setting === "openai-compatible") {
    if (!provider?.url) {
      throw new Error("OPTCHAT_SUMMARIZER=openai-compatible needs OPTCHAT_SUMMARIZER_URL (a base URL ending in /v1)");
    }
    return createOpenAiCompatibleSummarizer({ baseUrl: provider.url, model: provider.model, apiKey: provider.apiKey });
  }
  const options: { -readonly [K in keyof FakeSummarizerOptions]: FakeSummarizerOptions[K] } = {};
  for (const option of setting.split(":")[1]?.split(",") ?? []) {
    const [name, value] = option.split("=");
    if (name === "overshoot") options.overshootBytes = Number(value ?? 40);
    else if (name === "fail") options.alwaysFail = true;
    else if (name === "fail-first") options.failFirst = Number(value ?? 1);
    else if (name === "delay") options.delayMs = Number(value ?? 1000);
    else throw new Error(`OPTCHAT_SUMMARIZER: unknown fake option '${name}'`);
  }
  return createFakeSummarizer(options);
}

/**
 * Schedules again what is ready but has no job (a job deleted by an operator, or one that gave up): ready unbuilt
 * nodes, and each session's next publication when it is ready (checked under the session tree's lock, like every
 * other scheduling of a publication). A duplicate of a node job that does exist is harmless: the node is found built.
 */
export async function sweepLostWork(deps: CompactorDeps): Promise<{ nodes: number; publications: number }> {
  const nodes = await findReadyUnbuiltNodes(deps.pool, 10_000);
  const sessions = await findSessionsWithFinishedPendingTurns(deps.pool, 10_000);
  const byTree = new Map<number, NodeAddress[]>();
  for (const { treeId, node } of nodes) byTree.set(treeId, [...(byTree.get(treeId) ?? []), node]);
  await withTransaction(deps.pool, async (tx) => {
    for (const [treeId, ready] of byTree) await enqueueNodeJobs(deps.boss, tx, treeId, ready);
  });
  let publications = 0;
  for (const session of sessions) {
    const scheduled = await withTransaction(deps.pool, async (tx) => {
      const locked = await lockTree(tx, session);
      return locked
        ? await schedulePublicationIfReady(deps.boss, tx, { treeId: locked.tree.treeId, ...session })
        : undefined;
    });
    if (scheduled !== undefined) publications += 1;
  }
  if (nodes.length + publications > 0) deps.report({ type: "rescheduled", nodes: nodes.length, publications });
  return { nodes: nodes.length, publications };
}

export interface CompactorSettings {
  readonly databaseUrl: string;
  readonly concurrency: number;
  readonly fold: FoldParams;
  readonly failureRetrySeconds: number;
  /** How often this worker's pg-boss deletes finished jobs past their retention (src/compactor/retention.ts). */
  readonly retentionSweepSeconds?: number;
}

export interface RunningCompactor {
  readonly boss: PgBoss;
  /** Stops fetching, waits for running jobs (up to `timeoutMs`), releases what is left to other workers. */
  stop(timeoutMs?: number): Promise<void>;
}

/** Starts a compactor worker: `concurrency` jobs at once, sharing the queue with every other worker. */
export async function startCompactor(
  pool: Pool,
  settings: CompactorSettings,
  summarizer: Summarizer,
  report: (event: CompactorEvent) => void,
): Promise<RunningCompactor> {
  const boss = createBoss(settings.databaseUrl, "worker", {
    maintenanceIntervalSeconds: settings.retentionSweepSeconds,
  });
  boss.on("error", (error) => report({ type: "error", error: `pg-boss: ${(error as Error).message}` }));
  await boss.start();
  const deps: CompactorDeps = {
    pool,
    boss,
    summarizer,
    fold: settings.fold,
    failureRetrySeconds: settings.failureRetrySeconds,
    report,
  };
  // Fetch in batches of up to 4 and run a batch's jobs concurrently, with burst fetching while batches come back
  // full. With batchSize 1, pg-boss ignores burst mode and a worker that got no NOTIFY during its job sleeps the
  // whole polling interval: a backlog of independent jobs (after a restart, retries becoming due) drained at
  // 8 jobs per 5 s per process in the tree benchmark. Polling every second bounds the wait for delayed retries.
  const batchSize = Math.min(4, settings.concurrency);
  const options = {
    localConcurrency: Math.max(1, Math.ceil(settings.concurrency / batchSize)),
    batchSize,
    burstWhenBatchFull: true,
    includeMetadata: true,
    pollingIntervalSeconds: 1,
    notifyPollingIntervalSeconds: 1,
  } as const;
  // Every job of a batch runs to its end before the batch settles: with Promise.all, the first failure would make
  // pg-boss fail (and re-run elsewhere) siblings that are still in the middle of their model calls.
  const runAll = async <T>(
    jobs: readonly { id: string; retryCount: number; data: T }[],
    run: (job: { id: string; retryCount: number; data: T }) => Promise<unknown>,
    what: string,
  ) => {
    const results = await Promise.allSettled(
      jobs.map(async (job) => {
        try {
          await run({ id: job.id, retryCount: job.retryCount, data: job.data });
        } catch (error) {
          // A database error while committing: report it; pg-boss retries the batch's unsettled jobs (retryDelay
          // 1 s). Jobs of the batch that already completed are not affected: pg-boss's own settle is fenced like ours.
          report({ type: "error", error: `${what} job ${job.id}: ${(error as Error).message}` });
          throw error;
        }
      }),
    );
    const failed = results.find((result) => result.status === "rejected");
    if (failed) throw failed.reason;
  };
  await boss.work<NodeJobData>(NODE_QUEUE, options, (jobs) => runAll(jobs, (job) => buildNodeJob(deps, job), "node"));
  await sweepLostWork(deps).catch((error) =>
    report({ type: "error", error: `start-up sweep: ${(error as Error).message}` }),
  );
  await boss.work<PublishJobData>(PUBLISH_QUEUE, { ...options, localConcurrency: 1 }, (jobs) =>
    runAll(jobs, (job) => publishTurnJob(deps, job), "publication"),
  );
  return {
    boss,
    async stop(timeoutMs = 30_000) {
      await boss.stop({ graceful: true, timeout: timeoutMs });
    },
  };
}
