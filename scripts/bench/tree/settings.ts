/** `bench tree`'s settings (from the environment, see index.ts) and the seed's reference figures. */
import { envNumber } from "../common.js";

export const BENCH = "tree";
/** Seed 002 §5.2: "2,300 messages: 20 ms". */
export const SEED_REFOLD_MS = 20;
export const SEED_REFOLD_MESSAGES = 2300;
/** Seed 002 §5.4: consecutive views (~131k characters with markup) share 73k characters on average at 20k messages. */
export const SEED_SHARED_CHARS_AT_20K = 73_000;
export const SEED_VIEW_CHARS = 131_000;

export interface Settings {
  readonly foldMessages: number;
  readonly foldRuns: number;
  readonly messages: number;
  readonly viewBytes: number;
  readonly seed: number;
  readonly compactorMessages: number;
  readonly backlogMessages: number;
  readonly sessions: number;
  readonly concurrency: number;
  readonly drainSeconds: number;
  readonly noopJobs: number;
  readonly noopSeconds: number;
  /** OPTCHAT_COMPACTOR_MERGES for the compactor cases (default the product's: needed). */
  readonly merges: "needed" | "all";
}

export function readSettings(): Settings {
  return {
    foldMessages: envNumber("OPTCHAT_BENCH_TREE_FOLD_MESSAGES", SEED_REFOLD_MESSAGES, { min: 1, integer: true }),
    foldRuns: envNumber("OPTCHAT_BENCH_TREE_FOLD_RUNS", 9, { min: 1, integer: true }),
    messages: envNumber("OPTCHAT_BENCH_TREE_MESSAGES", 20_000, { min: 2, integer: true }),
    viewBytes: envNumber("OPTCHAT_BENCH_TREE_VIEW_BYTES", 128_000, { min: 1024, integer: true }),
    seed: envNumber("OPTCHAT_BENCH_TREE_SEED", 1, { integer: true }),
    compactorMessages: envNumber("OPTCHAT_BENCH_TREE_COMPACTOR_MESSAGES", 2000, { integer: true }),
    backlogMessages: envNumber("OPTCHAT_BENCH_TREE_BACKLOG_MESSAGES", 600, { integer: true }),
    sessions: envNumber("OPTCHAT_BENCH_TREE_SESSIONS", 4, { min: 1, integer: true }),
    concurrency: envNumber("OPTCHAT_BENCH_TREE_CONCURRENCY", 8, { min: 1, integer: true }),
    drainSeconds: envNumber("OPTCHAT_BENCH_TREE_DRAIN_SECONDS", 180, { min: 1 }),
    noopJobs: envNumber("OPTCHAT_BENCH_TREE_NOOP_JOBS", 5000, { integer: true }),
    noopSeconds: envNumber("OPTCHAT_BENCH_TREE_NOOP_SECONDS", 10, { min: 0.5 }),
    merges: process.env.OPTCHAT_BENCH_TREE_MERGES === "all" ? "all" : "needed",
  };
}
