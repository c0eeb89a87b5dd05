import { endOf, type NodeAddress, nodeKey } from "../core/tree.js";
import type { Queryable } from "../store/db.js";
import { findNodes } from "../store/nodes.js";
import { findViewRevision, type ViewRevision } from "../store/view-revisions.js";

/**
 * How many view revisions a context checkpoint stands for (each tree event is one revision: about two per message).
 */
export const CHECKPOINT_REVISIONS = 128;

/**
 * The compactor's `<chat>` context for a node whose context ends at `bound` (seed 002 §4.2: the view's lines before a
 * leaf, or up to a parent's last message), built to be read from a provider's prompt cache (issue 13 item 3).
 *
 * Taken literally, the context is the current view, and the view changes wherever the fold merges two lines: once a
 * view is at its budget nearly every message merges a pair somewhere, and a prompt cache can only reuse what comes
 * before the first change (the tree benchmark measured 0.85 of input tokens read from cache, and less as sessions
 * grow). So the context is the view as it was at a checkpoint revision (the latest multiple of CHECKPOINT_REVISIONS),
 * up to where that view was built, followed by the current view's lines after that point. Between two checkpoints
 * every call's context is the previous one's plus lines at its end; at a checkpoint it is written once. The
 * checkpoint's lines are the same summaries the view showed then, finer than the current ones where merges happened
 * since (more detail, never less), and every line is a built summary, as the readiness rule requires. When the
 * checkpoint revision is gone (retention) the current view is used.
 */
export async function compactorContextLines(
  db: Queryable,
  treeId: number,
  latest: ViewRevision | undefined,
  bound: number,
): Promise<string[]> {
  const current = (latest?.parts ?? []).filter((part) => endOf(part) <= bound);
  const at = latest ? Math.floor(latest.revision / CHECKPOINT_REVISIONS) * CHECKPOINT_REVISIONS : 0;
  const checkpoint = at > 0 && latest && at < latest.revision ? await findViewRevision(db, treeId, at) : undefined;
  const candidates = checkpoint ? checkpoint.parts.filter((part) => endOf(part) <= bound) : [];
  const texts = await findNodes(db, treeId, [...candidates, ...current]);
  return stitchContext(candidates, current, (part) => texts.get(nodeKey(part))?.text).map((entry) => entry.text);
}

/**
 * The checkpoint's parts while they are built (in order), then the current parts that end after the last of them.
 * Pure; `textOf` says whether a part is built. A current part that straddles the cut is kept whole (a little overlap,
 * never a gap).
 */
export function stitchContext(
  checkpoint: readonly NodeAddress[],
  current: readonly NodeAddress[],
  textOf: (part: NodeAddress) => string | undefined,
): { part: NodeAddress; text: string }[] {
  const out: { part: NodeAddress; text: string }[] = [];
  let cut = 0;
  for (const part of checkpoint) {
    const text = textOf(part);
    if (text === undefined) break;
    out.push({ part, text });
    cut = endOf(part);
  }
  for (const part of current) {
    if (endOf(part) <= cut) continue;
    const text = textOf(part);
    if (text !== undefined) out.push({ part, text });
  }
  return out;
}
