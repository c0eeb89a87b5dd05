/**
 * `bench tree`: the view fold (pure, synthetic) and the compactor (real code path, fake summarizer, pg-boss).
 *
 * Cases (defaults; sizes follow the settings below):
 *   fold-from-scratch     refold of 2,300 messages, every node built, one `applyFoldEvent` append per leaf, median of
 *                         several runs (seed 002 §5.2: 20 ms)
 *   fold-incremental      cost per message of append + fit on a growing view of 20,000 messages, every parent built
 *   view-prefix-sharing   20,000-message replay where the compactor keeps up (leaf built right after its append, each
 *                         parent as soon as both children exist); the view is rendered after every message as the model
 *                         reads it (`start+count|text` lines) and consecutive renders are compared: their common prefix
 *                         in characters (seed 002 §5.4: 73k of ~131k at 20k messages)
 *   compactor-inputs      summarizer calls and request bytes per message through the real code path (memory service,
 *                         compactor worker, pg-boss) with the fake summarizer wrapped to count, on a scratch database
 *   compactor-cache       the same live workload through the real AI SDK providers (Anthropic, OpenAI) at the
 *                         scripted model with its prompt-cache simulator: cache-read share of compactor input tokens,
 *                         calls and tokens per message (scripts/bench/compactor-cache.ts)
 *   pgboss-noop-batch1    bare pg-boss: no-op jobs worked with the compactor's worker options
 *   pgboss-noop-batch100  the same jobs with batchSize 100 and burstWhenBatchFull
 *   compactor-throughput  nodes/s of the compactor (live: worker running while messages arrive; backlog: messages first,
 *                         then the worker) next to the no-op figures
 *
 * Synthetic size model (fold cases): a node's text size is a deterministic function of (seed, level, index).
 *   leaf:   100 + 412·u³ bytes (skewed to short lines: median ≈ 150, mean ≈ 200)
 *   parent: free (left + "\n" + right) when that fits 512 bytes, else a model merge of 120 + 392·u² bytes
 * Calibrated so that a full 128,000-byte view holds ≈ 450 lines of ≈ 285 bytes (seed 002 §5.4: ~500 of ~250).
 *
 * Environment:
 *   OPTCHAT_BENCH_TREE_FOLD_MESSAGES     messages of fold-from-scratch (default 2300)
 *   OPTCHAT_BENCH_TREE_FOLD_RUNS         measured runs of fold-from-scratch (default 9, after 2 warm-up runs)
 *   OPTCHAT_BENCH_TREE_MESSAGES          messages of fold-incremental and view-prefix-sharing (default 20000)
 *   OPTCHAT_BENCH_TREE_VIEW_BYTES        the view budget everywhere, compactor included (default 128000)
 *   OPTCHAT_BENCH_TREE_SEED              seed of the synthetic sizes and texts (default 1)
 *   OPTCHAT_BENCH_TREE_COMPACTOR_MESSAGES  messages ingested while the worker runs (default 2000; 0 skips the compactor)
 *   OPTCHAT_BENCH_TREE_BACKLOG_MESSAGES  messages ingested before the worker starts (default 600; 0 skips)
 *   OPTCHAT_BENCH_TREE_SESSIONS          sessions each compactor phase spreads its messages over (default 4)
 *   OPTCHAT_BENCH_TREE_CONCURRENCY       compactor worker concurrency (default 8, the product default)
 *   OPTCHAT_BENCH_TREE_DRAIN_SECONDS     longest wait for the compactor to finish a phase (default 180)
 *   OPTCHAT_BENCH_TREE_NOOP_JOBS         no-op jobs per pg-boss variant (default 5000; 0 skips)
 *   OPTCHAT_BENCH_TREE_NOOP_SECONDS      longest measurement per pg-boss variant (default 10)
 *   OPTCHAT_BENCH_TREE_MERGES            the compactor cases' OPTCHAT_COMPACTOR_MERGES: needed (default) or all
 */
import { type BenchContext, emit, note } from "../common.js";
import { compactorCases } from "./compactor.js";
import { foldFromScratch, foldIncremental, viewPrefixSharing } from "./fold.js";
import { BENCH, readSettings } from "./settings.js";

export async function runTreeBench(context: BenchContext): Promise<void> {
  const settings = readSettings();
  emit(BENCH, "machine", { ...context.machine, settings });
  note(`tree: fold-from-scratch (${settings.foldMessages} messages × ${settings.foldRuns + 2} runs)`);
  foldFromScratch(settings);
  if (context.signal.aborted) return;
  note(`tree: fold-incremental (${settings.messages} messages)`);
  foldIncremental(settings);
  if (context.signal.aborted) return;
  note(`tree: view-prefix-sharing (${settings.messages} messages, rendered after each)`);
  viewPrefixSharing(settings);
  if (context.signal.aborted) return;
  await compactorCases(context, settings);
}
