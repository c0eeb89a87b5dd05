import type { PgBoss } from "pg-boss";
import type { ToolResultLines } from "../core/excerpt.js";
import type { FoldParams } from "../core/fold.js";
import type { Pool } from "../store/db.js";
import type { Tree } from "../store/trees.js";
import type { Budget } from "./budget.js";
import type { PrefixGate } from "./prefix-gate.js";
import { type Summarizer, SummarizerError } from "./summarizer.js";

/** What the compactor reports to whoever runs it (the worker CLI prints it, the plugin keeps the last one). */
export type CompactorEvent =
  | {
      readonly type: "built";
      readonly treeId: number;
      readonly ref: string;
      readonly level: number;
      readonly calls: number;
      readonly overshoot: boolean;
      /** Built as a labelled fallback: the budget allowed no model call. */
      readonly fallback?: boolean;
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
      /** The budget cap was reached (nodes become labelled fallbacks) or allows calls again; reported on change. */
      readonly type: "budget";
      readonly state: "spent" | "available";
      readonly reason: string;
    }
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
  /** The daily caps; absent: no cap. */
  readonly budget?: Budget;
  /** Orders a tree's concurrent calls for the provider's prompt cache; absent: no ordering. */
  readonly gate?: PrefixGate;
  readonly fold: FoldParams;
  readonly failureRetrySeconds: number;
  /** How a tool result's leaf line is made (OPTCHAT_COMPACTOR_TOOL_RESULTS); absent: `excerpt`, the default. */
  readonly toolResults?: ToolResultLines;
  readonly report: (event: CompactorEvent) => void;
}

export function toolResultsOf(deps: { readonly toolResults?: ToolResultLines }): ToolResultLines {
  return deps.toolResults ?? "excerpt";
}

/**
 * Whether the budget allows a model call for the tree now; a change of that answer is reported once (not per node).
 */
export async function withinBudget(
  deps: Pick<CompactorDeps, "budget" | "report">,
  tree: Pick<Tree, "treeId" | "scopeId">,
): Promise<boolean> {
  if (!deps.budget?.limited) return true;
  const verdict = await deps.budget.checkTree(tree.treeId, tree.scopeId);
  const state = verdict.allowed ? "available" : "spent";
  if (deps.budget.noteState(state)) {
    deps.report({ type: "budget", state, reason: verdict.allowed ? "within every cap again" : verdict.reason });
  }
  return verdict.allowed;
}

/**
 * When a failed node is tried again: the fixed delay (seed 002 §4.1: no backoff), or later when the provider said so
 * with Retry-After (a 429 or 529 asks for exactly that).
 */
export function retryDelaySeconds(deps: Pick<CompactorDeps, "failureRetrySeconds">, error: unknown): number {
  const asked = error instanceof SummarizerError && error.retryAfterMs !== undefined ? error.retryAfterMs / 1000 : 0;
  return Math.max(deps.failureRetrySeconds, Math.ceil(asked));
}

/** The prompt-cache key of a tree's calls: the same for all of them, different for every tree. */
export function treeCacheKey(treeId: number): string {
  return `optchat-tree-${treeId}`;
}
