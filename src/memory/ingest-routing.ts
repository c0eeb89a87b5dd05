/**
 * Which sessions' ingests try the unlocked way first (memory/ingest.ts). An unlocked attempt that ends up needing the
 * locks (a node to build inline, a conflict, a guard that found the tree changed) has cost statements for nothing, and
 * the next ingest of the same session usually would too (a host's per-message ingestion with a caught-up compactor
 * builds each short leaf inline; eight writers of one session keep changing each other's tree, and an attempt there
 * waits for the session's lock twice). Such a session goes the locked way for its next LOCKED_STREAK ingests, then
 * tries again; each further attempt in a row that needs the locks doubles the streak, up to MAX_LOCKED_STREAK, and an
 * attempt that succeeds ends it (measured on 8 writers of one session, with a remembered state tried first: retrying
 * every 17th ingest cost 4.49 statements per ingest and a third of the throughput).
 *
 * Process-local and advisory: either way is correct, this only chooses the cheaper.
 */
export const LOCKED_STREAK = 16;
export const MAX_LOCKED_STREAK = 1024;
/** Sessions remembered at most (a long-lived service sees many): past this, the memory starts over. */
const MAX_SESSIONS = 10_000;

export class IngestRouting {
  /** Per session that needed the locks: the ingests left before the unlocked way is tried again, and the streak. */
  private readonly locked = new Map<string, { left: number; streak: number }>();

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
    }
  }

  /** An unlocked attempt on these sessions succeeded: their streaks end. */
  succeeded(sessionIds: readonly string[]): void {
    for (const id of sessionIds) this.locked.delete(id);
  }
}
