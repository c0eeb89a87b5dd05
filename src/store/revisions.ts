/**
 * The SQL of rebuilding nodes as new revisions (issue 15 item 1; src/memory/rebuild.ts): which trees a rebuild
 * covers, the current revision of every node of a tree, the live publications a shared tree's leaves stand for, and
 * the locks the commit takes. The revisions themselves are written through the fold (tree-changes.ts, change type
 * `rebuilt`), which supersedes the previous revision of each address (migration 013).
 */
import type { Queryable } from "./db.js";
import type { NodeRevisionRow } from "./nodes.js";
import { TREE_COLUMNS, type Tree, type TreeKind, type TreeRow, toTree } from "./trees.js";

/**
 * The revision clock (migration 014): the epoch a snapshot taken now pins. Every revision a rebuild wrote is at or
 * below it once the rebuild has committed.
 */
export async function readRevisionClock(db: Queryable): Promise<number> {
  const result = await db.query<{ epoch: number }>({
    name: "optchat.revisions.clock",
    text: "SELECT epoch FROM optchat.revision_clock",
  });
  return result.rows[0]?.epoch ?? 0;
}

/**
 * Advances the revision clock for a rebuild's commit, in its transaction (after its tree locks): the revisions it
 * writes carry the new epoch (tree-changes.ts insertNode reads it), so a snapshot pinned before the commit never
 * resolves to them. Returns the new epoch.
 */
export async function advanceRevisionClock(db: Queryable): Promise<number> {
  const result = await db.query<{ epoch: number }>(
    "UPDATE optchat.revision_clock SET epoch = epoch + 1 RETURNING epoch",
  );
  const epoch = result.rows[0]?.epoch;
  if (epoch === undefined) throw new Error("optchat.revision_clock has no row: run optchat migrate (migration 014)");
  return epoch;
}

/** Which memory a rebuild covers: a scope, one session, or (neither) every scope. */
export interface RebuildSelection {
  readonly scopeId?: string;
  readonly sessionId?: string;
}

/**
 * The trees a rebuild covers, session trees first (shared leaves derive from them): the current generation's tree of
 * every live session selected, then the shared trees of their scopes (none for an isolated scope). With a session
 * only its own tree is selected; its scope's shared tree follows for the leaves derived from it.
 */
export async function findRebuildTrees(db: Queryable, selection: RebuildSelection): Promise<Tree[]> {
  const result = await db.query<TreeRow>(
    `WITH sessions AS (
       SELECT s.session_id, s.current_generation, s.scope_id FROM optchat.sessions s
        WHERE s.deleted_at IS NULL AND ($1::text IS NULL OR s.scope_id = $1::text)
          AND ($2::text IS NULL OR s.session_id = $2::text)
     )
     SELECT ${TREE_COLUMNS}, 0 AS k FROM optchat.trees t
      WHERE t.kind = 'session' AND (t.session_id, t.generation) IN (SELECT session_id, current_generation FROM sessions)
     UNION ALL
     SELECT ${TREE_COLUMNS}, 1 AS k FROM optchat.trees t
      WHERE t.kind = 'shared' AND t.scope_id IN (SELECT scope_id FROM sessions)
     ORDER BY k, tree_id`,
    [selection.scopeId ?? null, selection.sessionId ?? null],
  );
  return result.rows.map(toTree);
}

/** The newest revision of a node, as a rebuild reads it. */
export interface CurrentNode {
  readonly level: number;
  readonly index: number;
  readonly revision: number;
  readonly text: string;
  readonly inputHashes: readonly Buffer[];
  readonly summarizer: string;
  readonly promptVersion: string | null;
}

/** Every node's newest revision in a tree, children before parents (by level, then index). */
export async function listCurrentNodes(db: Queryable, treeId: number): Promise<CurrentNode[]> {
  const result = await db.query<NodeRevisionRow>(
    `SELECT level, idx, revision, text, input_hashes, summarizer, prompt_version FROM optchat.nodes
      WHERE tree_id = $1::bigint AND NOT superseded ORDER BY level, idx`,
    [treeId],
  );
  return result.rows.map((row) => ({
    level: row.level,
    index: Number(row.idx),
    revision: row.revision,
    text: row.text,
    inputHashes: row.input_hashes,
    summarizer: row.summarizer,
    promptVersion: row.prompt_version,
  }));
}

/** A live publication as its shared leaf is built from it (compactor/publish.ts). */
export interface PublicationSource {
  readonly seq: number;
  readonly sessionId: string;
  readonly generation: number;
  readonly outcome: string;
  readonly records: number;
  readonly cover: readonly { readonly level: number; readonly index: number }[];
}

/** The scope's live (not retired) publications by number. */
export async function listLivePublications(db: Queryable, scopeId: string): Promise<Map<number, PublicationSource>> {
  const result = await db.query<{
    publication_seq: string;
    session_id: string;
    generation: number;
    outcome: string;
    start_seq: string;
    end_seq_exclusive: string;
    cover_levels: number[];
    cover_idxs: string[];
  }>(
    `SELECT publication_seq, session_id, generation, outcome, start_seq, end_seq_exclusive, cover_levels, cover_idxs
       FROM optchat.publications WHERE scope_id = $1::text AND retired_at IS NULL`,
    [scopeId],
  );
  return new Map(
    result.rows.map((row) => [
      Number(row.publication_seq),
      {
        seq: Number(row.publication_seq),
        sessionId: row.session_id,
        generation: row.generation,
        outcome: row.outcome,
        records: Number(row.end_seq_exclusive) - Number(row.start_seq),
        cover: row.cover_levels.map((level, k) => ({ level, index: Number(row.cover_idxs[k]) })),
      },
    ]),
  );
}

/**
 * Locks the trees a rebuild commits to, session trees before shared ones and each kind by id (the order a deletion
 * takes them in, src/store/deletion.ts), and returns them as they are now. A tree that disappeared meanwhile (its
 * session was forgotten) is simply not returned.
 */
export async function lockRebuildTrees(db: Queryable, treeIds: readonly number[]): Promise<Map<number, Tree>> {
  const result = await db.query<TreeRow & { kind: TreeKind }>(
    `SELECT ${TREE_COLUMNS} FROM optchat.trees WHERE tree_id = ANY($1::bigint[])
      ORDER BY kind = 'shared', tree_id FOR UPDATE`,
    [treeIds],
  );
  return new Map(result.rows.map((row) => [Number(row.tree_id), toTree(row)]));
}

/** How many current node revisions the trees hold (a rebuild's progress total). */
export async function countCurrentNodes(db: Queryable, treeIds: readonly number[]): Promise<number> {
  const result = await db.query<{ n: string }>(
    "SELECT count(*) AS n FROM optchat.nodes WHERE tree_id = ANY($1::bigint[]) AND NOT superseded",
    [treeIds],
  );
  return Number(result.rows[0]?.n ?? 0);
}
