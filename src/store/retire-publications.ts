/**
 * Retiring publications from a scope's shared tree (issue 15 item 4): the one operation a deletion and a revocation
 * share. Runs in the caller's transaction, which holds the scope row and the shared tree row (lockScopes, lockTree).
 *
 * A retired publication keeps its number (numbering stays gap-free, seed 000 §5). Its shared leaf keeps its address
 * and event, its text becomes a short removed marker; every shared node above it is deleted, so nothing surviving
 * derives from its text, and the compactor builds those ancestors again from the surviving children (the first ones
 * are enqueued by the caller; each commit enqueues what it makes ready). The fold's event log is derived from the node
 * rows (migration 006): the deleted nodes' build events are taken out and the later events renumbered, and the view
 * history is replaced by one base revision, the refold of that log (core/refold.ts), which is exactly what the audit
 * replays. Old revisions cannot be read any more: the scope's retention epoch is bumped by the caller, so no snapshot
 * pinned before this transaction is used again without re-pinning.
 */
import { EMPTY_FOLD, type FoldParams, foldParamsFor, viewBytes } from "../core/fold.js";
import { refoldLog } from "../core/refold.js";
import { REMOVED_SUMMARIZER } from "../core/revisions.js";
import { tokenize, toTsvectorLiteral } from "../core/tokenize.js";
import type { NodeAddress } from "../core/tree.js";
import type { Queryable } from "./db.js";
import type { LockedTree } from "./tree-lock.js";
import { listNodeSizes, listTreeEvents } from "./tree-log.js";
import { writeTreeChanges } from "./tree-writes.js";

export type RetireReason = "deleted" | "revoked" | "reverted";

/**
 * Which live publications of the scope to retire: every one of some sessions (deletion, revocation), or those of one
 * session generation that reach past `from`, its records a rewind superseded (memory/inherit.ts rewindSession).
 */
export type RetiredSelection =
  | { readonly sessionIds: readonly string[] }
  | { readonly superseded: { readonly sessionId: string; readonly generation: number; readonly from: number } };

/** What a retired publication's shared leaf shows instead of its text. */
export function removedMarker(reason: RetireReason): string {
  if (reason === "deleted") return "[removed: this turn's session was deleted from memory]";
  if (reason === "reverted") return "[removed: this turn was reverted in its session]";
  return "[removed: this turn's session stopped sharing its memory]";
}

/** The summarizer name of a removed marker leaf (audits recognise it; a rebuild never replaces it). */
export { REMOVED_SUMMARIZER };

export interface RetiredPublications {
  readonly publicationSeqs: readonly number[];
  /** Shared nodes deleted because they were derived from a retired leaf. */
  readonly nodesRemoved: number;
  /** Ancestors ready to build again now (both children exist): enqueue exactly these. */
  readonly ready: readonly NodeAddress[];
}

/**
 * Retires the selected live publications in `scopeId` and rebuilds the shared tree's fold over them. The
 * records must still exist (their search statistics are subtracted here).
 */
export async function retirePublications(
  db: Queryable,
  shared: LockedTree,
  input: { scopeId: string; reason: RetireReason } & RetiredSelection,
  params: FoldParams,
): Promise<RetiredPublications> {
  const seqs = await markRetired(db, input);
  if (seqs.length === 0) return { publicationSeqs: [], nodesRemoved: 0, ready: [] };
  const treeId = shared.tree.treeId;
  const removed = await removeDerivedNodes(
    db,
    treeId,
    input.scopeId,
    seqs,
    shared.tree.leafCount,
    removedMarker(input.reason),
  );
  await rebaseView(db, shared, removed.events, foldParamsFor("shared", params));
  const leafCount = shared.tree.leafCount;
  // Level-1 ancestors have two leaves (the marker and its sibling, both built): ready now. Higher ones wait for their
  // children, and the commit that builds the second child enqueues them (tree-changes.ts readiness).
  const ready = removed.nodes.filter((n) => n.level === 1 && 2 * n.index + 1 < leafCount);
  return { publicationSeqs: seqs, nodesRemoved: removed.nodes.length, ready };
}

/**
 * Marks the publications retired and subtracts their records from the scope's BM25 statistics (migration 007 counts
 * exactly these records when a turn is published, publications.ts insertPublication). Returns their numbers.
 */
async function markRetired(
  db: Queryable,
  input: { scopeId: string; reason: RetireReason } & RetiredSelection,
): Promise<number[]> {
  const result = await db.query<{ publication_seq: string }>(
    `WITH retired AS (
       UPDATE optchat.publications SET retired_at = now(), retired_reason = $3::text
        WHERE scope_id = $1::text AND retired_at IS NULL
          AND (session_id = ANY($2::text[])
               OR (session_id = $4::text AND generation = $5::int AND end_seq_exclusive > $6::bigint))
       RETURNING publication_seq, session_id, generation, turn_id, start_seq, end_seq_exclusive
     ), turn_records AS (
       SELECT r.search FROM retired p
         JOIN optchat.records r ON r.session_id = p.session_id AND r.generation = p.generation AND r.turn_id = p.turn_id
          AND r.seq >= p.start_seq AND r.seq < p.end_seq_exclusive
        WHERE r.search IS NOT NULL
     ), term_drops AS (
       SELECT u.lexeme AS term, count(*) AS documents
         FROM turn_records tr CROSS JOIN LATERAL unnest(tr.search) AS u(lexeme, positions, weights) GROUP BY u.lexeme
     ), terms_lowered AS (
       UPDATE optchat.search_term_counts c SET documents = c.documents - d.documents
         FROM term_drops d WHERE c.scope_id = $1::text AND c.term = d.term AND c.documents > d.documents
     ), terms_gone AS (
       DELETE FROM optchat.search_term_counts c USING term_drops d
        WHERE c.scope_id = $1::text AND c.term = d.term AND c.documents <= d.documents
     ), lengths AS (
       UPDATE optchat.search_scope_stats s
          SET documents = s.documents - x.documents, total_length = s.total_length - x.total_length
         FROM (SELECT count(*) AS documents, coalesce(sum(length(search)), 0) AS total_length FROM turn_records) x
        WHERE s.scope_id = $1::text AND x.documents > 0
     )
     SELECT publication_seq FROM retired ORDER BY publication_seq`,
    [
      input.scopeId,
      "sessionIds" in input ? input.sessionIds : [],
      input.reason,
      "superseded" in input ? input.superseded.sessionId : null,
      "superseded" in input ? input.superseded.generation : null,
      "superseded" in input ? input.superseded.from : null,
    ],
  );
  return result.rows.map((row) => Number(row.publication_seq));
}

/**
 * Replaces the retired leaves' text with the marker and deletes every existing ancestor of them (all revisions, their
 * chunks and failures), keeping the tree's node statistics exact. Returns the deleted nodes and their build events.
 */
async function removeDerivedNodes(
  db: Queryable,
  treeId: number,
  scopeId: string,
  seqs: readonly number[],
  leafCount: number,
  marker: string,
): Promise<{ nodes: NodeAddress[]; events: number[] }> {
  // Every address above a retired leaf up to the tree's root level (addresses never built are simply not found).
  const ancestors = new Map<string, NodeAddress>();
  for (const seq of seqs)
    for (let level = 1; 2 ** (level - 1) < leafCount; level++) {
      const index = Math.floor(seq / 2 ** level);
      ancestors.set(`${level}:${index}`, { level, index });
    }
  const list = [...ancestors.values()];
  const levels = list.map((n) => n.level);
  const idxs = list.map((n) => n.index);
  await db.query(
    `DELETE FROM optchat.node_chunks c USING unnest($2::int[], $3::bigint[]) AS a(level, idx)
      WHERE c.tree_id = $1::bigint AND c.level = a.level AND c.idx = a.idx`,
    [treeId, [...levels, ...seqs.map(() => 0)], [...idxs, ...seqs]],
  );
  const result = await db.query<{ level: number; idx: string; tree_event: string }>(
    `WITH doomed AS (
       -- Superseded revisions keep their search vectors (migration 014) but are not in the statistics.
       SELECT n.level, n.idx, n.revision, n.tree_event, CASE WHEN NOT n.superseded THEN length(n.search) END AS terms
         FROM unnest($2::int[], $3::bigint[]) AS a(level, idx)
         JOIN optchat.nodes n ON n.tree_id = $1::bigint AND n.level = a.level AND n.idx = a.idx
     ), failures_gone AS (
       DELETE FROM optchat.node_failures f USING doomed d
        WHERE f.tree_id = $1::bigint AND f.level = d.level AND f.idx = d.idx
     ), old_leaves AS (
       SELECT n.idx, n.revision, CASE WHEN NOT n.superseded THEN length(n.search) END AS terms FROM optchat.nodes n
        WHERE n.tree_id = $1::bigint AND n.level = 0 AND n.idx = ANY($4::bigint[])
     ), leaves AS (
       UPDATE optchat.nodes n SET text = $5::text, byte_length = octet_length($5::text), input_hashes = '{}',
                                  summarizer = '${REMOVED_SUMMARIZER}', prompt_version = NULL, attempts = 0,
                                  overshoot = false, job_id = NULL, job_attempt = NULL,
                                  search = CASE WHEN n.superseded THEN NULL ELSE $6::tsvector END
         FROM old_leaves o WHERE n.tree_id = $1::bigint AND n.level = 0 AND n.idx = o.idx AND n.revision = o.revision
       RETURNING o.terms AS old_terms, length(n.search) AS new_terms
     ), stats AS (
       UPDATE optchat.search_tree_stats s
          SET documents = s.documents - (SELECT count(terms) FROM doomed),
              total_length = s.total_length - (SELECT coalesce(sum(terms), 0) FROM doomed)
                           - (SELECT coalesce(sum(old_terms), 0) FROM leaves) + (SELECT coalesce(sum(new_terms), 0) FROM leaves)
        WHERE s.scope_id = $7::text AND s.tree_id = $1::bigint
     )
     DELETE FROM optchat.nodes n USING doomed d
      WHERE n.tree_id = $1::bigint AND n.level = d.level AND n.idx = d.idx AND n.revision = d.revision
     RETURNING n.level, n.idx, n.tree_event`,
    [treeId, levels, idxs, seqs, marker, toTsvectorLiteral(tokenize(marker)), scopeId],
  );
  const seen = new Map<string, NodeAddress>();
  for (const row of result.rows) seen.set(`${row.level}:${row.idx}`, { level: row.level, index: Number(row.idx) });
  return { nodes: [...seen.values()], events: result.rows.map((row) => Number(row.tree_event)).sort((a, b) => a - b) };
}

/**
 * Takes the deleted nodes' build events out of the derived log (later events move down, width_bucket counts the
 * removed events below each in O(log n)), drops the tree's view history and writes one base revision: the refold of
 * the whole log as it now is, under the current thresholds.
 */
async function rebaseView(
  db: Queryable,
  { tree }: LockedTree,
  removedEvents: readonly number[],
  params: FoldParams,
): Promise<void> {
  const treeId = tree.treeId;
  if (removedEvents.length > 0) {
    await db.query(
      `UPDATE optchat.nodes SET tree_event = tree_event - width_bucket(tree_event, $2::bigint[])
        WHERE tree_id = $1::bigint AND tree_event > $3::bigint`,
      [treeId, removedEvents, removedEvents[0]],
    );
  }
  const eventCount = tree.eventCount - removedEvents.length;
  await db.query("UPDATE optchat.trees SET event_count = $2::bigint WHERE tree_id = $1::bigint", [treeId, eventCount]);
  await db.query(
    `WITH p AS (DELETE FROM optchat.view_projections WHERE tree_id = $1::bigint),
          v AS (DELETE FROM optchat.view_parts WHERE tree_id = $1::bigint)
     DELETE FROM optchat.view_revisions WHERE tree_id = $1::bigint`,
    [treeId],
  );
  const [{ events }, sizes] = await Promise.all([listTreeEvents(db, treeId), listNodeSizes(db, treeId)]);
  const { state, bytesOf } =
    events.length > 0 ? refoldLog(events, sizes, params) : { state: EMPTY_FOLD, bytesOf: () => undefined };
  const revision = tree.viewRevision + 1;
  await writeTreeChanges(db, [
    {
      treeId,
      leafCount: tree.leafCount,
      builtLeaves: tree.builtLeaves,
      eventNo: eventCount,
      revision,
      newRevision: true,
      left: [],
      entered: state.parts,
      bytes: viewBytes(state.parts, bytesOf),
      shrinking: state.shrinking,
      unbuilt: state.parts.filter((part) => bytesOf(part) === undefined).length,
      upperBytes: params.upperBytes,
      lowerBytes: params.lowerBytes,
      notify: true,
      ready: [],
    },
  ]);
}
