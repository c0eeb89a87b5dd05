import { applyFoldEvent, EMPTY_FOLD, type FoldState, tilingProblem } from "../core/fold.js";
import { nodeKey } from "../core/tree.js";
import { listTreeIds, runSqlAudits, type Violation } from "../store/audits.js";
import type { Queryable } from "../store/db.js";
import { listNodeSizes, listTreeEvents, listViewRevisions } from "../store/trees.js";

export interface TreeAuditProblem {
  readonly treeId: number;
  readonly revision?: number;
  readonly problem: string;
}

/**
 * Replays a tree's event log through the pure fold, with each node's size as it was when the event happened, and
 * checks every persisted view revision against the replay: same parts, same shrinking state, and a tiling of its
 * prefix (DESIGN §5: a refold from scratch must reproduce the persisted frontier).
 */
export async function auditTreeViews(db: Queryable, treeId: number): Promise<TreeAuditProblem[]> {
  const [events, sizes, revisions] = await Promise.all([
    listTreeEvents(db, treeId),
    listNodeSizes(db, treeId),
    listViewRevisions(db, treeId),
  ]);
  const problems: TreeAuditProblem[] = [];
  const current = new Map<number, number>();
  let nextSize = 0;
  let state: FoldState = EMPTY_FOLD;
  let r = 0;
  for (const { eventNo, event } of events) {
    while (nextSize < sizes.length && (sizes[nextSize] as { treeEvent: number }).treeEvent <= eventNo) {
      const node = sizes[nextSize] as { level: number; index: number; bytes: number };
      current.set(nodeKey(node), node.bytes);
      nextSize += 1;
    }
    // The thresholds in effect are those recorded by the next persisted revision (settings can change between runs).
    const params = revisions[r]?.params ?? revisions[revisions.length - 1]?.params;
    if (!params) break;
    state = applyFoldEvent(state, event, (node) => current.get(nodeKey(node)), params).state;
    while (r < revisions.length && (revisions[r] as { eventNo: number }).eventNo === eventNo) {
      const revision = revisions[r] as (typeof revisions)[number];
      const tiling = tilingProblem(revision.parts, revision.leafCount);
      if (tiling)
        problems.push({ treeId, revision: revision.revision, problem: `does not tile its prefix: ${tiling}` });
      const same =
        revision.parts.length === state.parts.length &&
        revision.parts.every((p, k) => p.level === state.parts[k]?.level && p.index === state.parts[k]?.index);
      if (!same || revision.shrinking !== state.shrinking || revision.leafCount !== state.leafCount) {
        problems.push({ treeId, revision: revision.revision, problem: "differs from a refold of the event log" });
      }
      r += 1;
    }
  }
  if (r < revisions.length)
    problems.push({ treeId, problem: `${revisions.length - r} revision(s) refer to events that are not in the log` });
  return problems;
}

export interface AuditReport {
  readonly ok: boolean;
  readonly trees: number;
  readonly violations: readonly Violation[];
}

/**
 * Every audit: publication integrity, snapshot visibility and reachability in SQL, and view coverage by replaying
 * each tree's event log (every revision tiles its prefix and equals a refold).
 */
export async function auditAll(db: Queryable): Promise<AuditReport> {
  const violations: Violation[] = [...(await runSqlAudits(db))];
  const trees = await listTreeIds(db);
  for (const tree of trees) {
    for (const problem of await auditTreeViews(db, tree.treeId)) {
      violations.push({
        audit: "view_coverage",
        subject: `${tree.label}${problem.revision !== undefined ? ` revision ${problem.revision}` : ""}`,
        problem: problem.problem,
      });
    }
  }
  return { ok: violations.length === 0, trees: trees.length, violations };
}
