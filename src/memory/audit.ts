import { EMPTY_FOLD, type FoldState, type NodeBytes, tilingProblem, viewBytes } from "../core/fold.js";
import { replayFold } from "../core/refold.js";
import { listTreeIds, runSqlAudits, type Violation } from "../store/audits.js";
import type { Queryable } from "../store/db.js";
import { listNodeSizes, listTreeEvents } from "../store/tree-log.js";
import { findTree } from "../store/trees.js";
import { listViewRevisions } from "../store/view-revisions.js";

export interface TreeAuditProblem {
  readonly treeId: number;
  readonly revision?: number;
  readonly problem: string;
}

/**
 * Replays a tree's event log (derived from its nodes and counters, listTreeEvents) through the pure fold, with each
 * node's size as it was when the event happened, and checks every persisted view revision against the replay: same
 * parts, same shrinking state, same size, and a tiling of its prefix (DESIGN §5: a refold from scratch must reproduce
 * the persisted frontier). Also checks the tree row's fold state (the size and mode appends continue from) against
 * the replay's end.
 */
export async function auditTreeViews(db: Queryable, treeId: number): Promise<TreeAuditProblem[]> {
  const [{ events, problems: eventProblems }, sizes, revisions, tree] = await Promise.all([
    listTreeEvents(db, treeId),
    listNodeSizes(db, treeId),
    listViewRevisions(db, treeId),
    findTree(db, treeId),
  ]);
  const problems: TreeAuditProblem[] = eventProblems.map((problem) => ({ treeId, problem: `event log: ${problem}` }));
  let state: FoldState = EMPTY_FOLD;
  let bytesOf: NodeBytes = () => undefined;
  let r = 0;
  // The thresholds in effect are those recorded by the next persisted revision (settings can change between runs).
  const paramsAt = () => revisions[r]?.params ?? revisions[revisions.length - 1]?.params;
  for (const step of replayFold(events, sizes, paramsAt)) {
    ({ state, bytesOf } = step);
    while (r < revisions.length && (revisions[r] as { eventNo: number }).eventNo === step.eventNo) {
      const revision = revisions[r] as (typeof revisions)[number];
      const tiling = tilingProblem(revision.parts, revision.leafCount);
      if (tiling)
        problems.push({ treeId, revision: revision.revision, problem: `does not tile its prefix: ${tiling}` });
      const same =
        revision.parts.length === state.parts.length &&
        revision.parts.every((p, k) => p.level === state.parts[k]?.level && p.index === state.parts[k]?.index);
      if (!same || revision.shrinking !== state.shrinking || revision.leafCount !== state.leafCount) {
        problems.push({ treeId, revision: revision.revision, problem: "differs from a refold of the event log" });
      } else if (revision.bytes !== viewBytes(state.parts, bytesOf)) {
        problems.push({ treeId, revision: revision.revision, problem: "records a size other than its parts' size" });
      }
      r += 1;
    }
  }
  if (r < revisions.length)
    problems.push({ treeId, problem: `${revisions.length - r} revision(s) refer to events that are not in the log` });
  // Appends continue from the tree row's size and mode without reading the parts (appendWithoutFit): they must be
  // those of the refold's end.
  if (
    tree &&
    revisions.length > 0 &&
    (tree.viewBytes !== viewBytes(state.parts, bytesOf) || tree.viewShrinking !== state.shrinking)
  ) {
    problems.push({ treeId, problem: "the tree's recorded view size or mode differs from a refold of the event log" });
  }
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
