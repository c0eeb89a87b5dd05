import type { EngineTree } from "../core/tree-engine.js";
import type { Queryable } from "./db.js";

export type TreeKind = "session" | "shared";

export interface TreeRow {
  tree_id: number;
  kind: TreeKind;
  session_id: string | null;
  generation: number | null;
  scope_id: string | null;
  leaf_count: number;
  built_leaves: number;
  event_count: number;
  view_revision: number;
  view_bytes: number;
  view_shrinking: boolean;
  view_unbuilt: number;
}

/** A tree: what it belongs to, and the counters and fold state the tree engine continues from (src/core/tree-engine.ts). */
export interface Tree extends EngineTree {
  readonly kind: TreeKind;
  readonly sessionId: string | null;
  readonly generation: number | null;
  readonly scopeId: string | null;
}

export function toTree(row: TreeRow): Tree {
  return {
    treeId: row.tree_id,
    kind: row.kind,
    sessionId: row.session_id,
    generation: row.generation,
    scopeId: row.scope_id,
    leafCount: row.leaf_count,
    builtLeaves: row.built_leaves,
    eventCount: row.event_count,
    viewRevision: row.view_revision,
    viewBytes: row.view_bytes,
    viewShrinking: row.view_shrinking,
    viewUnbuilt: row.view_unbuilt,
  };
}

export const TREE_COLUMNS =
  "tree_id, kind, session_id, generation, scope_id, leaf_count, built_leaves, event_count, view_revision, view_bytes, view_shrinking, view_unbuilt";

export async function findSessionTree(
  db: Queryable,
  sessionId: string,
  generation: number,
  lock = false,
): Promise<Tree | undefined> {
  const result = await db.query<TreeRow>(
    `SELECT ${TREE_COLUMNS} FROM optchat.trees WHERE kind = 'session' AND session_id = $1::text AND generation = $2::int
     ${lock ? "FOR UPDATE" : ""}`,
    [sessionId, generation],
  );
  return result.rows[0] ? toTree(result.rows[0]) : undefined;
}

/**
 * The session's tree of its current generation, locked (FOR UPDATE), in one statement: finishing a turn took a read of
 * the turn first only to learn the generation to lock (issue 9 item 2).
 */
export async function lockCurrentSessionTree(db: Queryable, sessionId: string): Promise<Tree | undefined> {
  const result = await db.query<TreeRow>({
    name: "optchat.trees.lock_current_session",
    text: `SELECT ${TREE_COLUMNS} FROM optchat.trees
      WHERE kind = 'session' AND session_id = $1::text
        AND generation = (SELECT current_generation FROM optchat.sessions WHERE session_id = $1::text)
        FOR UPDATE`,
    values: [sessionId],
  });
  return result.rows[0] ? toTree(result.rows[0]) : undefined;
}

export async function findTree(db: Queryable, treeId: number): Promise<Tree | undefined> {
  const result = await db.query<TreeRow>(`SELECT ${TREE_COLUMNS} FROM optchat.trees WHERE tree_id = $1::bigint`, [
    treeId,
  ]);
  return result.rows[0] ? toTree(result.rows[0]) : undefined;
}

export async function findSharedTreeOfScope(db: Queryable, scopeId: string): Promise<Tree | undefined> {
  const result = await db.query<TreeRow>(
    `SELECT ${TREE_COLUMNS} FROM optchat.trees WHERE kind = 'shared' AND scope_id = $1::text`,
    [scopeId],
  );
  return result.rows[0] ? toTree(result.rows[0]) : undefined;
}
