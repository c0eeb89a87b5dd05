/**
 * What the ingest's three modules share (ingest-commit.ts plans, ingest-write.ts and ingest-write-one.ts write): the
 * group key, the record insert's columns, the inline payload bound, and the lookup's locked targets and fresh records.
 * Its own module so that the writes do not import the planner nor each other (issue 35: the one runtime import cycle).
 */
import type { ExistingRow } from "./ingest-redeliveries.js";
import type { RecordToSeal } from "./records.js";
import type { Tree } from "./trees.js";

/** A (session, generation)'s key in the maps of a batch's lookup. */
export function groupKey(sessionId: string, generation: number): string {
  return `${sessionId}\u0000${generation}`;
}

/**
 * The columns a sealed record is inserted with, in the order both ingest statements (this one and ingest-write-one.ts)
 * give them: scope_id last, the session's (migrations/011; a session never changes scope), for the search index.
 */
export const RECORD_INSERT_COLUMNS = `(session_id, generation, seq, event_key, stage_key, turn_id, kind, occurred_at,
  payload_hash, payload_bytes, tool_call_id, tool_name, host_truncated, host_original_bytes, project_id, worktree_id,
  commit_id, attributes, search, scope_id)`;

/** Payloads up to this size are written in the batch's one statement; larger ones in their own (see writeSealed). */
export const INLINE_BLOB_BYTES = 256 * 1024;

export interface LockedTargets {
  /** Next free seq per (session, generation) group key; advanced as seqs are allocated. */
  readonly nextSeq: Map<string, number>;
  /** next_seq as the lookup read it, per group key (the guard's expected value). */
  readonly readSeq: ReadonlyMap<string, number>;
  readonly currentGeneration: ReadonlyMap<string, number>;
  /** The session tree of each locked (session, generation), by group key. */
  readonly trees: ReadonlyMap<string, Tree>;
  /** The batch's keys that were already sealed (before the statement waited for its locks). */
  readonly sealed: ReadonlyMap<string, ExistingRow>;
}

export interface FreshRecord {
  readonly index: number;
  readonly item: RecordToSeal;
  readonly generation: number;
  readonly seq: number;
}
