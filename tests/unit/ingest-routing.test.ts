import { describe, expect, it } from "vitest";
import { IngestRouting, LOCKED_STREAK, MAX_LOCKED_STREAK } from "../../src/memory/ingest-routing.js";
import type { SessionState } from "../../src/store/ingest-commit.js";

/** How many ingests of `id` go the locked way before the next unlocked attempt. */
function lockedRun(routing: IngestRouting, id: string): number {
  let n = 0;
  while (!routing.tryUnlocked([id])) n += 1;
  return n;
}

function state(sessionId: string, nextSeq: number): SessionState {
  return {
    sessionId,
    generation: 0,
    nextSeq,
    tree: {
      treeId: 1,
      kind: "session",
      sessionId,
      generation: 0,
      scopeId: null,
      leafCount: nextSeq,
      builtLeaves: 0,
      eventCount: nextSeq,
      viewRevision: nextSeq,
      viewBytes: 0,
      viewShrinking: false,
      viewUnbuilt: nextSeq,
    },
  };
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

  it("knows a batch's states only when it knows every session's, and forgets a session that needed the locks", () => {
    const routing = new IngestRouting();
    routing.remember([state("a", 3), state("b", 5)]);
    expect(routing.known(["a", "b", "a"])?.get("b")?.nextSeq).toBe(5);
    expect(routing.known(["a", "c"])).toBeUndefined();
    routing.remember([state("a", 4)]);
    expect(routing.known(["a"])?.get("a")?.nextSeq).toBe(4);
    routing.neededLock(["a"]);
    expect(routing.known(["a"])).toBeUndefined();
    routing.forget(["b"]);
    expect(routing.known(["b"])).toBeUndefined();
  });
});
