import type { SessionState } from "../store/ingest-commit.js";

/**
 * What one service remembers about the sessions it ingests into (memory/ingest.ts), to spend fewer statements:
 *
 * - The state its last write of a session left (the current generation, its next seq, its tree's counters and fold
 *   state): the next plain append of that session is planned from it and written by the guarded statement alone, one
 *   statement per ingest. A stale state (the compactor committed a node, another process sealed a record) costs one
 *   guarded statement that writes nothing, then the ingest looks the state up. The database decides: a state here is
 *   one the database was in, and the guard writes only over exactly that state.
 * - Which sessions needed the locks: an unlocked attempt that ends up needing them (a node to build inline, a conflict,
 *   a guard that found the tree changed even after a fresh lookup) has cost statements for nothing, and the next
 *   ingest of the same session usually would too (a host's per-message ingestion with a caught-up compactor builds
 *   each short leaf inline; eight writers of one session keep changing each other's tree). Such a session goes the
 *   locked way for its next LOCKED_STREAK ingests, then tries again: at most one wasted lookup in LOCKED_STREAK + 1.
 *
 * Process-local and advisory: every way is correct, these only choose the cheapest.
 */
export const LOCKED_STREAK = 16;
/** Sessions remembered at most (a long-lived service sees many): past this, the memory starts over. */
const MAX_SESSIONS = 10_000;

export class IngestRouting {
  /** Per session, the ingests left before the unlocked way is tried again. */
  private readonly locked = new Map<string, number>();
  private readonly states = new Map<string, SessionState>();

  /** Whether a batch writing to these sessions tries the unlocked way; counts the ingest against the streaks. */
  tryUnlocked(sessionIds: readonly string[]): boolean {
    let unlocked = true;
    for (const id of new Set(sessionIds)) {
      const left = this.locked.get(id);
      if (left === undefined) continue;
      unlocked = false;
      if (left <= 1) this.locked.delete(id);
      else this.locked.set(id, left - 1);
    }
    return unlocked;
  }

  /** An unlocked attempt on these sessions needed the locks after all. */
  neededLock(sessionIds: readonly string[]): void {
    if (this.locked.size >= MAX_SESSIONS) this.locked.clear();
    for (const id of sessionIds) {
      this.locked.set(id, LOCKED_STREAK);
      this.states.delete(id);
    }
  }

  /** The remembered states of all these sessions, or undefined when one is not known. */
  known(sessionIds: readonly string[]): ReadonlyMap<string, SessionState> | undefined {
    const found = new Map<string, SessionState>();
    for (const id of sessionIds) {
      const state = this.states.get(id);
      if (!state) return undefined;
      found.set(id, state);
    }
    return found;
  }

  /** States a committed write left. */
  remember(states: readonly SessionState[]): void {
    if (this.states.size >= MAX_SESSIONS) this.states.clear();
    for (const state of states) this.states.set(state.sessionId, state);
  }

  forget(sessionIds: readonly string[]): void {
    for (const id of sessionIds) this.states.delete(id);
  }
}
