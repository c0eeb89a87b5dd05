/** Inserting a built node (its first build, or a new revision of it) with its chunks and the tree's search statistics. */
import { tokenize, toTsvectorLiteral } from "../core/tokenize.js";
import type { Queryable } from "./db.js";
import type { NewNode } from "./nodes.js";

export async function insertNode(db: Queryable, treeId: number, node: NewNode, eventNo: number): Promise<void> {
  await db.query(
    // The tree's search statistics (migrations/007) in the same statement; the writer holds the tree row's lock. A
    // new revision of a built address (a rebuild) supersedes the previous one (migration 013): only the newest is
    // counted; both carry the revision clock a rebuild advanced (migration 014), so a snapshot pinned before it keeps
    // seeing, and searching, the previous one. A first build is epoch 0 (nothing to tell apart).
    `WITH previous AS (
       SELECT revision, length(search) AS terms FROM optchat.nodes
        WHERE tree_id = $1::bigint AND level = $2::int AND idx = $3::bigint AND NOT superseded
     ), epoch AS (
       SELECT CASE WHEN EXISTS (SELECT 1 FROM previous) THEN (SELECT epoch FROM optchat.revision_clock) ELSE 0 END AS epoch
     ), superseded AS (
       UPDATE optchat.nodes n SET superseded = true, superseded_epoch = (SELECT epoch FROM epoch) FROM previous p
        WHERE n.tree_id = $1::bigint AND n.level = $2::int AND n.idx = $3::bigint AND n.revision = p.revision
       RETURNING p.terms
     ), node AS (
       INSERT INTO optchat.nodes (tree_id, level, idx, revision, text, byte_length, input_hashes, summarizer, prompt_version,
                                  attempts, overshoot, tree_event, job_id, job_attempt, search, revision_epoch)
       VALUES ($1::bigint, $2::int, $3::bigint,
               coalesce((SELECT max(revision) + 1 FROM optchat.nodes WHERE tree_id = $1::bigint AND level = $2::int AND idx = $3::bigint), 0),
               $4::text, octet_length($4::text), $5::bytea[], $6::text, $7::text, $8::int, $9::boolean, $10::bigint, $11::uuid, $12::int,
               $13::tsvector, (SELECT epoch FROM epoch))
       RETURNING tree_id, length(search) AS terms
     )
     INSERT INTO optchat.search_tree_stats AS s (scope_id, tree_id, documents, total_length)
     SELECT coalesce(t.scope_id, ss.scope_id), node.tree_id, 1, node.terms
       FROM node JOIN optchat.trees t ON t.tree_id = node.tree_id
       LEFT JOIN optchat.sessions ss ON ss.session_id = t.session_id
     ON CONFLICT (scope_id, tree_id)
     -- A superseded revision leaves the counts here: the row exists then (its revision was counted), and the
     -- inserted values alone are checked against the constraints.
     DO UPDATE SET documents = s.documents + excluded.documents - (SELECT count(terms) FROM superseded),
                   total_length = s.total_length + excluded.total_length - (SELECT coalesce(sum(terms), 0) FROM superseded)`,
    [
      treeId,
      node.level,
      node.index,
      node.text,
      node.inputHashes,
      node.summarizer,
      node.promptVersion,
      node.attempts,
      node.overshoot,
      eventNo,
      node.jobId,
      node.jobAttempt,
      toTsvectorLiteral(tokenize(node.text)),
    ],
  );
  if (node.chunks.length > 0) await insertChunks(db, treeId, node);
}

/** The node's chunks, against the revision just inserted. */
async function insertChunks(db: Queryable, treeId: number, node: NewNode): Promise<void> {
  await db.query(
    `INSERT INTO optchat.node_chunks (tree_id, level, idx, revision, chunk_level, chunk_index, char_start, char_end, text)
       SELECT $1::bigint, $2::int, $3::bigint,
              (SELECT max(revision) FROM optchat.nodes WHERE tree_id = $1::bigint AND level = $2::int AND idx = $3::bigint),
              c.chunk_level, c.chunk_index, c.char_start, c.char_end, c.text
         FROM unnest($4::int[], $5::int[], $6::int[], $7::int[], $8::text[]) AS c(chunk_level, chunk_index, char_start, char_end, text)`,
    [
      treeId,
      node.level,
      node.index,
      node.chunks.map((c) => c.chunkLevel),
      node.chunks.map((c) => c.chunkIndex),
      node.chunks.map((c) => c.charStart),
      node.chunks.map((c) => c.charEnd),
      node.chunks.map((c) => c.text),
    ],
  );
}
