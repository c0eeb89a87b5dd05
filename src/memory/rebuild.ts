/**
 * Rebuilding memory as new node revisions (issue 15 item 1; docs/compactor.md "Revisions and rebuild"): the nodes of
 * a session, a scope or every scope that the current compactor would write differently (another model or prompt
 * version, a labelled fallback, or the prompt version asked for), and every node derived from them, get new
 * revisions; each tree that changed gets a new view revision. Old revisions stay: a pinned snapshot keeps resolving
 * exactly the revisions its view revision resolves to (the newest at or before its event), and new snapshots pin the
 * new views. No retention epoch is bumped: nothing was removed, so nothing pinned is invalidated.
 *
 * One commit (a crash leaves the previous state or the complete new one, tests/integration/rebuild-crash.test.ts): the
 * texts are computed first, outside any transaction (model calls take seconds each), then one transaction locks the
 * trees, plans again from what is stored now with those texts only, and writes every revision through the fold. If a
 * node changed in between (the compactor built a parent over a child being rebuilt, a turn was published over a
 * rebuilt cover), the commit finds an input it has no text for, rolls back, and the texts still missing are computed
 * before the next try; what was computed is kept (compactor/rebuild.ts).
 */
import { createBudget } from "../compactor/budget.js";
import type { CompactorEvent } from "../compactor/deps.js";
import {
  NeedsCompute,
  newRebuildMemo,
  type PlanPass,
  planTreeRebuild,
  type RebuildMemo,
  type TreePlan,
} from "../compactor/rebuild.js";
import type { Summarizer } from "../compactor/summarizer.js";
import { InputInvalidError } from "../core/errors.js";
import type { ToolResultLines } from "../core/excerpt.js";
import type { FoldParams } from "../core/fold.js";
import { didYouMean } from "../core/suggest.js";
import { PROMPT_VERSION } from "../core/summary.js";
import { type Pool, type Queryable, withTransaction } from "../store/db.js";
import { promptVersionsInUse } from "../store/nodes.js";
import {
  advanceRevisionClock,
  countCurrentNodes,
  findRebuildTrees,
  lockRebuildTrees,
  type RebuildSelection,
} from "../store/revisions.js";
import { applyTreeChanges } from "../store/tree-changes.js";
import type { Tree } from "../store/trees.js";
import { budgetSettingsOf, type Config, foldParamsOf } from "./config.js";

export interface RebuildRequest extends RebuildSelection {
  /** Only the nodes written with this prompt version (`--prompt-version V`). */
  readonly promptVersion?: string;
}

export interface RebuildDeps {
  readonly pool: Pool;
  /** The compactor the new revisions are written by. */
  readonly summarizer: Summarizer;
  readonly fold: FoldParams;
  /** How a tool result's leaf line is made (OPTCHAT_COMPACTOR_TOOL_RESULTS); absent: `excerpt`. */
  readonly toolResults?: ToolResultLines;
  readonly budget?: ReturnType<typeof createBudget>;
  readonly report?: (event: CompactorEvent) => void;
}

/** The rebuild's dependencies from the resolved settings (fold thresholds, budget caps) and a summarizer. */
export function rebuildDepsOf(pool: Pool, config: Config, summarizer: Summarizer): RebuildDeps {
  return {
    pool,
    summarizer,
    fold: foldParamsOf(config),
    toolResults: config.compactorToolResults,
    budget: createBudget(pool, budgetSettingsOf(config)),
  };
}

export interface RebuildOptions {
  /** Nodes examined so far of `total`, while texts are computed (the CLI's progress bar). */
  readonly onProgress?: (done: number, total: number) => void;
  /** A line per step of the commit (the CLI prints them; crash tests stop there). */
  readonly onStep?: (message: string) => void;
  /** Runs inside the commit after every write, before COMMIT (crash tests stop the process there). */
  readonly beforeCommit?: () => Promise<void>;
}

export interface RebuiltTree {
  readonly treeId: number;
  readonly kind: Tree["kind"];
  /** `sessionId:generation`, or `shared:scopeId`. */
  readonly label: string;
  readonly revisions: number;
  readonly fallbacksReplaced: number;
  /** The tree's view revision after the commit (a new one when the view shows a rebuilt node). */
  readonly viewRevision: number;
}

export interface RebuildReport {
  /** The trees with new revisions. */
  readonly trees: readonly RebuiltTree[];
  /** New node revisions committed. */
  readonly revisions: number;
  readonly fallbacksReplaced: number;
  /** Model calls made for them (the cost ledger has each one). */
  readonly calls: number;
  /** Compute-and-commit rounds (more than one when memory changed while the rebuild ran). */
  readonly rounds: number;
  readonly summarizer: string;
  readonly promptVersion: string;
}

/** How many times the texts are computed again because memory changed before the commit. */
const MAX_ROUNDS = 5;

/** Rebuilds what `request` selects, in one commit; rebuilding nothing (all current) is not an error. */
export async function rebuild(
  deps: RebuildDeps,
  request: RebuildRequest,
  options: RebuildOptions = {},
): Promise<RebuildReport> {
  if (request.promptVersion !== undefined) await checkPromptVersion(deps.pool, request.promptVersion);
  const memo = newRebuildMemo(
    {
      summarizer: deps.summarizer.identity,
      promptVersion: PROMPT_VERSION,
      ...(request.promptVersion !== undefined ? { onlyPromptVersion: request.promptVersion } : {}),
    },
    // One session: the shared tree only follows (the leaves derived from the session, the summaries above them).
    (tree) => request.sessionId === undefined || tree.kind === "session",
  );
  const selection = { scopeId: request.scopeId, sessionId: request.sessionId };
  for (let round = 1; round <= MAX_ROUNDS; round++) {
    const trees = await findRebuildTrees(deps.pool, selection);
    const total = await countCurrentNodes(
      deps.pool,
      trees.map((t) => t.treeId),
    );
    let done = 0;
    const examined = () => {
      done += 1;
      options.onProgress?.(done, total);
    };
    await planAll(pass(deps, memo, deps.pool, "compute", examined), trees);
    try {
      return await withTransaction(deps.pool, (tx) => commit(deps, memo, tx, selection, round, options));
    } catch (error) {
      if (!(error instanceof NeedsCompute)) throw error;
      options.onStep?.(`${error.message}; computing it before committing again`);
    }
  }
  throw new Error(
    `optchat rebuild: memory kept changing under the rebuild (${MAX_ROUNDS} rounds); nothing was changed. Run it again when the compactor is less busy.`,
  );
}

/** The commit: lock, plan from what is stored now with the computed texts only, write every tree's revisions. */
async function commit(
  deps: RebuildDeps,
  memo: RebuildMemo,
  tx: Queryable,
  selection: RebuildSelection,
  round: number,
  options: RebuildOptions,
): Promise<RebuildReport> {
  const step = options.onStep ?? (() => {});
  const wanted = await findRebuildTrees(tx, selection);
  const locked = await lockRebuildTrees(
    tx,
    wanted.map((t) => t.treeId),
  );
  const plans = await planAll(pass(deps, memo, tx, "commit"), [...locked.values()]);
  const changed = plans.filter((plan) => plan.revisions.length > 0);
  step(
    `committing ${changed.reduce((n, p) => n + p.revisions.length, 0)} new revision(s) in ${changed.length} tree(s)`,
  );
  // One epoch for the whole commit, taken under the tree locks: every revision below carries it, so a turn admitted
  // before the commit keeps reading the revisions it could see (migration 014).
  if (changed.length > 0) await advanceRevisionClock(tx);
  const trees: RebuiltTree[] = [];
  for (const plan of changed) {
    const tree = locked.get(plan.tree.treeId) as Tree;
    const applied = await applyTreeChanges(
      tx,
      { tree },
      plan.revisions.map((node) => ({ type: "rebuilt" as const, node })),
      deps.fold,
    );
    const label = tree.kind === "shared" ? `shared:${tree.scopeId}` : `${tree.sessionId}:${tree.generation}`;
    trees.push({
      treeId: tree.treeId,
      kind: tree.kind,
      label,
      revisions: plan.revisions.length,
      fallbacksReplaced: plan.fallbacksReplaced,
      viewRevision: applied.viewRevision,
    });
    step(`${label}: ${plan.revisions.length} new revision(s), view revision ${applied.viewRevision}`);
  }
  await options.beforeCommit?.();
  return {
    trees,
    revisions: trees.reduce((n, t) => n + t.revisions, 0),
    fallbacksReplaced: trees.reduce((n, t) => n + t.fallbacksReplaced, 0),
    calls: memo.calls,
    rounds: round,
    summarizer: deps.summarizer.identity,
    promptVersion: PROMPT_VERSION,
  };
}

function pass(
  deps: RebuildDeps,
  memo: RebuildMemo,
  db: Queryable,
  mode: PlanPass["mode"],
  onNode?: () => void,
): Omit<PlanPass, "sessionPlans"> {
  return {
    db,
    memo,
    mode,
    compactor: {
      pool: deps.pool,
      summarizer: deps.summarizer,
      ...(deps.toolResults ? { toolResults: deps.toolResults } : {}),
      ...(deps.budget ? { budget: deps.budget } : {}),
      report: deps.report ?? (() => {}),
    },
    ...(onNode ? { onNode } : {}),
  };
}

/** Plans every tree, session trees first: a shared leaf reads the new texts of its session's plan. */
async function planAll(base: Omit<PlanPass, "sessionPlans">, trees: readonly Tree[]): Promise<TreePlan[]> {
  const sessionPlans = new Map<string, TreePlan>();
  const plans: TreePlan[] = [];
  const ordered = [...trees].sort((a, b) => Number(a.kind === "shared") - Number(b.kind === "shared"));
  for (const tree of ordered) {
    const plan = await planTreeRebuild({ ...base, sessionPlans }, tree);
    if (tree.kind === "session") sessionPlans.set(`${tree.sessionId}:${tree.generation}`, plan);
    plans.push(plan);
  }
  return plans;
}

/**
 * A prompt version no summary was written with selects nothing; saying "every summary is current" then would hide the
 * typo (issue 40 item 10).
 */
async function checkPromptVersion(pool: Pool, version: string): Promise<void> {
  const versions = await promptVersionsInUse(pool);
  if (versions.includes(version)) return;
  throw new InputInvalidError("rebuild", [
    {
      field: "promptVersion",
      problem: `names no prompt version of a summary in memory (${versions.length > 0 ? versions.join(", ") : "none yet"}; the current one is ${PROMPT_VERSION}).${didYouMean(version, versions)}`,
    },
  ]);
}
