/**
 * What a snapshot sees of its scope (seed 000 §5), stated once for every query that needs it (search, publications,
 * session listings, the browser): another session's turn is seen once its publication is of the scope, below the
 * snapshot's high-water mark, not retired (a deletion, a revocation or a revert took it back) and of its session's
 * current generation (a rewind's earlier generation is history the session no longer has). The caller's own session
 * is seen below its boundary instead. Each function returns SQL text over the caller's aliases and parameters
 * (`$1::text` and the like, cast by the caller): the queries stay one statement each, the rule one text.
 */

/** Publication `p` is of scope `scope`, below high-water mark `highWater` and not retired. */
export function publishedInSnapshot(p: string, scope: string, highWater: string): string {
  return `${p}.scope_id = ${scope} AND ${p}.publication_seq < ${highWater} AND ${p}.retired_at IS NULL`;
}

/** Join condition: publication `p` is of session `s`'s current generation. */
export function ofCurrentGeneration(p: string, s: string): string {
  return `${s}.session_id = ${p}.session_id AND ${s}.current_generation = ${p}.generation`;
}

/**
 * The publications a snapshot sees, as `FROM` and `WHERE` texts (a query puts its own joins between them and adds its
 * conditions with AND): publication `p` joined to its session (alias `${p}_s`) at its current generation,
 * {@link publishedInSnapshot}, and, with `except`, of another session than that one (the caller's own history is
 * read from its records, not its publications).
 */
export function visiblePublications(
  p: string,
  snapshot: { readonly scope: string; readonly highWater: string; readonly except?: string },
): { readonly from: string; readonly where: string } {
  const s = `${p}_s`;
  const other = snapshot.except ? ` AND ${p}.session_id <> ${snapshot.except}` : "";
  return {
    from: `optchat.publications ${p} JOIN optchat.sessions ${s} ON ${ofCurrentGeneration(p, s)}`,
    where: `${publishedInSnapshot(p, snapshot.scope, snapshot.highWater)}${other}`,
  };
}
