import { describe, expect, it } from "vitest";
import { IngestRouting, LOCKED_STREAK, MAX_LOCKED_STREAK } from "../../src/memory/ingest-routing.js";

/** How many ingests of `id` go the locked way before the next unlocked attempt. */
function lockedRun(routing: IngestRouting, id: string): number {
  let n = 0;
  while (!routing.tryUnlocked([id])) n += 1;
  return n;
}

describe("ingest routing", () => {
  it("tries the unlocked way first, and again after a streak of locked ingests that doubles while attempts fail", () => {
    const routing = new IngestRouting();
    expect(routing.tryUnlocked(["s"])).toBe(true);
    routing.neededLock(["s"]);
    expect(lockedRun(routing, "s")).toBe(LOCKED_STREAK);
    routing.neededLock(["s"]);
    expect(lockedRun(routing, "s")).toBe(2 * LOCKED_STREAK);
    for (let k = 0; k < 12; k++) routing.neededLock(["s"]);
    expect(lockedRun(routing, "s")).toBe(MAX_LOCKED_STREAK);
    routing.succeeded(["s"]);
    routing.neededLock(["s"]);
    expect(lockedRun(routing, "s")).toBe(LOCKED_STREAK);
    // Other sessions are not held back by one that needed the locks.
    expect(routing.tryUnlocked(["other"])).toBe(true);
  });
});
