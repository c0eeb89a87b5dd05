/**
 * The SQL of rebuilding nodes as new revisions (issue 15 item 1; src/memory/rebuild.ts): which trees a rebuild
 * covers, the current revision of every node of a tree, the live publications a shared tree's leaves stand for, and
 * the locks the commit takes. The revisions themselves are written through the fold (tree-changes.ts, change type
 * `rebuilt`), which supersedes the previous revision of each address (migration 013).
 */
import type { Queryable } from "./db.js";
import type { NodeRevisionRow } from "./nodes.js";
import { TREE_COLUMNS, type Tree, type TreeKind, type TreeRow, toTree } from "./trees.js";

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

/**
 * The texts a publication's shared leaf revision was made from: for each node of the source cover, the revision of
 * that session node whose text has the leaf's recorded input hash (a leaf records the SHA-256 of each cover text,
 * compactor/publish.ts), so a snapshot pinned before a rebuild opens a publication into the cover it summarized.
 * A text no revision has any more is missing from the map (the caller reads the newest then).
 */
export async function findCoverTextsByHash(
  db: Queryable,
  sessionTreeId: number,
  cover: readonly { readonly level: number; readonly index: number }[],
  hashes: readonly Buffer[],
): Promise<Map<number, string>> {
  if (cover.length === 0 || hashes.length !== cover.length) return new Map();
  const result = await db.query<{ ord: string; text: string }>(
    `SELECT c.ord, (SELECT n.text FROM optchat.nodes n
                     WHERE n.tree_id = $1::bigint AND n.level = c.level AND n.idx = c.idx
                       AND sha256(convert_to(n.text, 'UTF8')) = c.hash
                     ORDER BY n.revision DESC LIMIT 1) AS text
       FROM unnest($2::int[], $3::bigint[], $4::bytea[]) WITH ORDINALITY AS c(level, idx, hash, ord)`,
    [sessionTreeId, cover.map((c) => c.level), cover.map((c) => c.index), hashes],
  );
  return new Map(result.rows.filter((r) => r.text !== null).map((r) => [Number(r.ord) - 1, r.text]));
}

/** The input hashes of the revision of a node that a view at `atEvent` resolves to. */
export async function findInputHashesAt(
  db: Queryable,
  treeId: number,
  node: { readonly level: number; readonly index: number },
  atEvent: number,
): Promise<Buffer[] | undefined> {
  const result = await db.query<{ input_hashes: Buffer[] }>(
    `SELECT input_hashes FROM optchat.nodes
      WHERE tree_id = $1::bigint AND level = $2::int AND idx = $3::bigint AND tree_event <= $4::bigint
      ORDER BY revision DESC LIMIT 1`,
    [treeId, node.level, node.index, atEvent],
  );
  return result.rows[0]?.input_hashes;
}
