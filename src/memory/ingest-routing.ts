/**
 * Which sessions' ingests try the unlocked way first (memory/ingest.ts). An unlocked attempt that ends up needing the
 * locks (a node to build inline, a conflict, a guard that found the tree changed by a concurrent writer) has cost one
 * statement for nothing, and the next ingest of the same session usually would too (a host's per-message ingestion
 * with a caught-up compactor builds each short leaf inline; eight writers of one session keep changing each other's
 * tree). Such a session goes the locked way for its next LOCKED_STREAK ingests, then tries again: the wasted lookup is
 * then at most one in LOCKED_STREAK + 1 ingests. Process-local and advisory: either way is correct.
 */
export const LOCKED_STREAK = 16;
/** Sessions remembered at most (a long-lived service sees many): past this, the memory starts over. */
const MAX_SESSIONS = 10_000;

export class IngestRouting {
  /** Per session, the ingests left before the unlocked way is tried again. */
  private readonly locked = new Map<string, number>();

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
    for (const id of sessionIds) this.locked.set(id, LOCKED_STREAK);
  }
}
