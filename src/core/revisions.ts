/**
 * Which node revisions a rebuild replaces (issue 15 item 1; docs/compactor.md "Revisions and rebuild"). Pure.
 *
 * A node is made by a summarizer (its identity names the provider and model, e.g. "anthropic:claude-haiku-4-5"), with
 * a prompt version, or without a model: `free` (its text is its source, verbatim or joined), `removed` (the marker of
 * a retired publication), `fallback` (the labelled line written when the budget allowed no call). A rebuild selects
 * the nodes the current compactor would write differently, and then every node derived from a changed one (a parent
 * from its children, a publication's shared leaf from its source cover), whatever made it.
 */

import { FALLBACK_SUMMARIZER } from "./fallback.js";

/** The summarizer identities that are not a model (besides FALLBACK_SUMMARIZER, core/fallback.ts). */
export const FREE_SUMMARIZER = "free";
/** A retired publication's marker leaf (store/retire-publications.ts). */
export const REMOVED_SUMMARIZER = "removed";

/** What a rebuild is asked to replace. */
export interface RebuildCriteria {
  /** The compactor that will write the new revisions. */
  readonly summarizer: string;
  readonly promptVersion: string;
  /**
   * Only the nodes written with this prompt version (`--prompt-version V`); absent: every node the current compactor
   * would write differently (another model or prompt version) and every labelled fallback.
   */
  readonly onlyPromptVersion?: string;
}

/** What the selection reads of a node revision. */
export interface BuiltBy {
  readonly summarizer: string;
  readonly promptVersion: string | null;
}

/** Whether the node itself is selected (its dependents follow from the rebuild of their inputs, not from here). */
export function selectedForRebuild(node: BuiltBy, criteria: RebuildCriteria): boolean {
  if (node.summarizer === FREE_SUMMARIZER || node.summarizer === REMOVED_SUMMARIZER) return false;
  if (criteria.onlyPromptVersion !== undefined) return node.promptVersion === criteria.onlyPromptVersion;
  if (node.summarizer === FALLBACK_SUMMARIZER) return true;
  return node.summarizer !== criteria.summarizer || node.promptVersion !== criteria.promptVersion;
}

/**
 * Whether a rebuilt text makes a new revision: it does when the text or its maker changed. Same text by the same
 * summarizer and prompt (a deterministic model asked again) is no change, and nothing derived from it is rebuilt.
 */
export function isNewRevision(before: BuiltBy & { readonly text: string }, after: BuiltBy & { text: string }): boolean {
  return (
    before.text !== after.text || before.summarizer !== after.summarizer || before.promptVersion !== after.promptVersion
  );
}
