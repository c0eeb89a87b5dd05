import { type NodeAddress, nodeKey } from "../core/tree.js";
import type { Queryable } from "./db.js";
import { NODE_JOB_KEY_SQL, NODE_QUEUE, openJobExists } from "./job-queue.js";

// ---------------------------------------------------------------------------------------------------------------
// Nodes

export interface NodeRecord {
  readonly level: number;
  readonly index: number;
  readonly revision: number;
  readonly text: string;
  readonly byteLength: number;
  readonly summarizer: string;
  readonly promptVersion: string | null;
  readonly attempts: number;
  readonly overshoot: boolean;
  readonly treeEvent: number;
  readonly builtAt: Date;
}

/** The columns of a node revision that copying or rebuilding it reads (store/inherit.ts, store/revisions.ts). */
export interface NodeRevisionRow {
  level: number;
  idx: string;
  revision: number;
  text: string;
  input_hashes: Buffer[];
  summarizer: string;
  prompt_version: string | null;
}

/**
 * SQL: the node row `alias` is the revision of its address that a snapshot at revision epoch `epoch` sees (migration
 * 014). A revision superseded outside a rebuild (superseded_epoch NULL) is seen by nobody.
 */
export function visibleAtEpoch(alias: string, epoch: string): string {
  return `${alias}.revision_epoch <= ${epoch} AND (NOT ${alias}.superseded OR ${alias}.superseded_epoch > ${epoch})`;
}

interface NodeRow {
  level: number;
  idx: number;
  revision: number;
  text: string;
  byte_length: number;
  summarizer: string;
  prompt_version: string | null;
  attempts: number;
  overshoot: boolean;
  tree_event: number;
  built_at: Date;
}

/**
 * Which revision of each address a read resolves to (docs/compactor.md "Revisions and rebuild"): the one a view
 * revision at tree event `atEvent` shows (the newest committed at or before it), or the one a snapshot pinned at
 * revision epoch `epoch` sees (migration 014: the revision with `revision_epoch <= epoch` not superseded by then).
 */
export type RevisionsAt = { readonly atEvent: number } | { readonly epoch: number };

/**
 * The nodes at `addresses` as `at` resolves them (the newest revisions when omitted). Absent addresses are not built
 * (yet, or at that point).
 */
export async function findNodes(
  db: Queryable,
  treeId: number,
  addresses: readonly NodeAddress[],
  at?: RevisionsAt,
): Promise<Map<number, NodeRecord>> {
  if (addresses.length === 0) return new Map();
  const atEvent = at && "atEvent" in at ? at.atEvent : null;
  const epoch = at && "epoch" in at ? at.epoch : null;
  const result = await db.query<NodeRow>(
    `SELECT DISTINCT ON (n.level, n.idx) n.level, n.idx, n.revision, n.text, n.byte_length, n.summarizer,
            n.prompt_version, n.attempts, n.overshoot, n.tree_event, n.built_at
       FROM unnest($2::int[], $3::bigint[]) AS a(level, idx)
       JOIN optchat.nodes n ON n.tree_id = $1::bigint AND n.level = a.level AND n.idx = a.idx
      WHERE ($4::bigint IS NULL OR n.tree_event <= $4::bigint)
        AND ($5::int IS NULL OR (${visibleAtEpoch("n", "$5::int")}))
      ORDER BY n.level, n.idx, n.revision DESC`,
    [treeId, addresses.map((a) => a.level), addresses.map((a) => a.index), atEvent, epoch],
  );
  return new Map(
    result.rows.map((row) => [
      nodeKey({ level: row.level, index: row.idx }),
      {
        level: row.level,
        index: row.idx,
        revision: row.revision,
        text: row.text,
        byteLength: row.byte_length,
        summarizer: row.summarizer,
        promptVersion: row.prompt_version,
        attempts: row.attempts,
        overshoot: row.overshoot,
        treeEvent: row.tree_event,
        builtAt: row.built_at,
      },
    ]),
  );
}

/** Byte lengths only, for folds: a commit holding the tree lock must not read 128 KB of texts to learn sizes. */
export async function findNodeSizes(
  db: Queryable,
  treeId: number,
  addresses: readonly NodeAddress[],
): Promise<Map<number, number>> {
  if (addresses.length === 0) return new Map();
  const result = await db.query<{ level: number; idx: number; byte_length: number }>(
    `SELECT DISTINCT ON (n.level, n.idx) n.level, n.idx, n.byte_length
       FROM unnest($2::int[], $3::bigint[]) AS a(level, idx)
       JOIN optchat.nodes n ON n.tree_id = $1::bigint AND n.level = a.level AND n.idx = a.idx
      ORDER BY n.level, n.idx, n.revision DESC`,
    [treeId, addresses.map((a) => a.level), addresses.map((a) => a.index)],
  );
  return new Map(result.rows.map((row) => [nodeKey({ level: row.level, index: Number(row.idx) }), row.byte_length]));
}

export interface NewNode {
  readonly level: number;
  readonly index: number;
  readonly text: string;
  readonly inputHashes: readonly Buffer[];
  readonly summarizer: string;
  readonly promptVersion: string | null;
  readonly attempts: number;
  readonly overshoot: boolean;
  readonly jobId: string | null;
  readonly jobAttempt: number | null;
  readonly chunks: readonly NodeChunk[];
}

export interface NodeChunk {
  readonly chunkLevel: number;
  readonly chunkIndex: number;
  readonly charStart: number;
  readonly charEnd: number;
  readonly text: string;
}

// ---------------------------------------------------------------------------------------------------------------
// Failures and audits

export async function recordNodeFailure(
  db: Queryable,
  treeId: number,
  node: NodeAddress,
  error: string,
): Promise<{ failures: number }> {
  const result = await db.query<{ failures: number }>(
    `INSERT INTO optchat.node_failures (tree_id, level, idx, failures, last_error) VALUES ($1::bigint, $2::int, $3::bigint, 1, $4::text)
     ON CONFLICT (tree_id, level, idx) DO UPDATE
       SET failures = optchat.node_failures.failures + 1, last_failed_at = now(), last_error = excluded.last_error
     RETURNING failures`,
    [treeId, node.level, node.index, error.slice(0, 2000)],
  );
  return { failures: result.rows[0]?.failures ?? 1 };
}

export async function clearNodeFailure(db: Queryable, treeId: number, node: NodeAddress): Promise<void> {
  await db.query(
    "DELETE FROM optchat.node_failures WHERE tree_id = $1::bigint AND level = $2::int AND idx = $3::bigint",
    [treeId, node.level, node.index],
  );
}

export interface NodeFailure {
  readonly level: number;
  readonly index: number;
  readonly failures: number;
  readonly firstFailedAt: Date;
  readonly lastFailedAt: Date;
  readonly lastError: string;
}

export async function listNodeFailures(db: Queryable, treeId: number): Promise<NodeFailure[]> {
  const result = await db.query<{
    level: number;
    idx: number;
    failures: number;
    first_failed_at: Date;
    last_failed_at: Date;
    last_error: string;
  }>(
    "SELECT level, idx, failures, first_failed_at, last_failed_at, last_error FROM optchat.node_failures WHERE tree_id = $1::bigint ORDER BY idx, level",
    [treeId],
  );
  return result.rows.map((r) => ({
    level: r.level,
    index: r.idx,
    failures: r.failures,
    firstFailedAt: r.first_failed_at,
    lastFailedAt: r.last_failed_at,
    lastError: r.last_error,
  }));
}

/**
 * Nodes that are ready but not built, over all trees: the next leaf of every session tree behind its records, and
 * every parent whose two children exist and whose end is within the built prefix. Scheduling is event-driven, so a
 * ready node is normally in the queue; this finds the ones whose job was lost (an operator deleted jobs, a job gave
 * up) so that a starting worker can schedule them again. Reads indexes only; run once per worker start.
 */
export async function findReadyUnbuiltNodes(
  db: Queryable,
  limit: number,
  parents = true,
): Promise<{ treeId: number; node: NodeAddress }[]> {
  // Open jobs are recognised by pg-boss's singleton_key column (our node jobs carry "<tree>:<level>:<index>",
  // src/compactor/queue.ts), in pg-boss's own table: the one place our SQL reads pg-boss's schema.
  const result = await db.query<{ tree_id: number; level: number; idx: number }>(
    `WITH ready AS (
       SELECT t.tree_id, 0 AS level, t.built_leaves AS idx
         FROM optchat.trees t
        WHERE t.kind = 'session' AND t.built_leaves < t.leaf_count
       UNION ALL
       SELECT c.tree_id, c.level + 1, c.idx / 2
         FROM optchat.nodes c
         JOIN optchat.trees t ON t.tree_id = c.tree_id
        WHERE $2::boolean AND c.idx % 2 = 0 AND c.revision = 0
          AND (c.idx + 2) * (1::bigint << c.level) <= t.built_leaves
          AND EXISTS (SELECT 1 FROM optchat.nodes d WHERE d.tree_id = c.tree_id AND d.level = c.level AND d.idx = c.idx + 1)
          AND NOT EXISTS (SELECT 1 FROM optchat.nodes p WHERE p.tree_id = c.tree_id AND p.level = c.level + 1 AND p.idx = c.idx / 2)
     )
     SELECT r.tree_id, r.level, r.idx FROM ready r
      WHERE NOT ${openJobExists(NODE_QUEUE, NODE_JOB_KEY_SQL("r.tree_id", "r.level", "r.idx"))}
      LIMIT $1::int`,
    [limit, parents],
  );
  return result.rows.map((row) => ({
    treeId: Number(row.tree_id),
    node: { level: row.level, index: Number(row.idx) },
  }));
}

/** The prompt versions summaries in memory were written with (an index-less scan of nodes: rebuild's input check). */
export async function promptVersionsInUse(db: Queryable): Promise<string[]> {
  const result = await db.query<{ prompt_version: string }>(
    "SELECT DISTINCT prompt_version FROM optchat.nodes WHERE prompt_version IS NOT NULL ORDER BY 1",
  );
  return result.rows.map((row) => row.prompt_version);
}
