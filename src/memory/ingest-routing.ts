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
 *   each short leaf inline; eight writers of one session keep changing each other's tree, and an attempt there waits
 *   for the session's lock up to three times). Such a session goes the locked way for its next LOCKED_STREAK ingests,
 *   then tries again; each further attempt in a row that needs the locks doubles the streak, up to MAX_LOCKED_STREAK
 *   (measured on 8 writers of one session: retrying every 17th ingest cost 4.49 statements per ingest and a third of
 *   the throughput), and an attempt that succeeds ends it.
 *
 * Process-local and advisory: every way is correct, these only choose the cheapest.
 */
export const LOCKED_STREAK = 16;
export const MAX_LOCKED_STREAK = 1024;
/** Sessions remembered at most (a long-lived service sees many): past this, the memory starts over. */
const MAX_SESSIONS = 10_000;

export class IngestRouting {
  /** Per session that needed the locks: the ingests left before the unlocked way is tried again, and the streak. */
  private readonly locked = new Map<string, { left: number; streak: number }>();
  private readonly states = new Map<string, SessionState>();

  /** Whether a batch writing to these sessions tries the unlocked way; counts the ingest against the streaks. */
  tryUnlocked(sessionIds: readonly string[]): boolean {
    let unlocked = true;
    for (const id of new Set(sessionIds)) {
      const entry = this.locked.get(id);
      if (!entry || entry.left === 0) continue;
      unlocked = false;
      entry.left -= 1;
    }
    return unlocked;
  }

  /** An unlocked attempt on these sessions needed the locks after all. */
  neededLock(sessionIds: readonly string[]): void {
    if (this.locked.size >= MAX_SESSIONS) this.locked.clear();
    for (const id of sessionIds) {
      const previous = this.locked.get(id)?.streak;
      const streak = previous === undefined ? LOCKED_STREAK : Math.min(previous * 2, MAX_LOCKED_STREAK);
      this.locked.set(id, { left: streak, streak });
      this.states.delete(id);
    }
  }

  /** An unlocked attempt on these sessions succeeded: their streaks end. */
  succeeded(sessionIds: readonly string[]): void {
    for (const id of sessionIds) this.locked.delete(id);
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
