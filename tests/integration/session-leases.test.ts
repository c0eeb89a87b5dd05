import { describe, expect, it } from "vitest";
import { useTestMemory } from "../helpers.js";

/** The session lease store (migration 004) as the adapter uses it: claim, renew, release, take-over, fences. */

const t = useTestMemory();

async function newSession(hostSessionId: string): Promise<string> {
  const session = await t.memory.openSession({ host: "test", hostSessionId, projectId: "leases" });
  return session.sessionId;
}

describe("session leases", () => {
  it("grants one holder at a time, keeps the fence on its own renewals, and gives the next holder a higher fence", async () => {
    const sessionId = await newSession("lease-basic");
    const a = await t.memory.host.claimLease({ sessionId, holder: "A", ttlMs: 60_000 });
    expect(a).toEqual({ acquired: true, fence: 1 });
    const refused = await t.memory.host.claimLease({ sessionId, holder: "B", ttlMs: 60_000 });
    expect(refused).toMatchObject({ acquired: false, holder: "A" });
    expect(await t.memory.host.claimLease({ sessionId, holder: "A", ttlMs: 60_000 })).toEqual({
      acquired: true,
      fence: 1,
    });
    expect(await t.memory.host.renewLease({ sessionId, holder: "A", fence: 1, ttlMs: 60_000 })).toBe(true);
    expect(await t.memory.host.releaseLease({ sessionId, holder: "A", fence: 1 })).toBe(true);
    expect(await t.memory.host.claimLease({ sessionId, holder: "B", ttlMs: 60_000 })).toEqual({
      acquired: true,
      fence: 2,
    });
    // A's stale fence can neither renew nor release B's lease.
    expect(await t.memory.host.renewLease({ sessionId, holder: "A", fence: 1, ttlMs: 60_000 })).toBe(false);
    expect(await t.memory.host.releaseLease({ sessionId, holder: "A", fence: 1 })).toBe(false);
    expect(await t.memory.host.claimLease({ sessionId, holder: "C", ttlMs: 60_000 })).toMatchObject({
      acquired: false,
    });
    // A holder proven dead is taken over at once.
    expect(await t.memory.host.claimLease({ sessionId, holder: "C", ttlMs: 60_000, takeOverFrom: "B" })).toEqual({
      acquired: true,
      fence: 3,
    });
  });

  it("never revives a released lease with a renewal that arrives after the release", async () => {
    const sessionId = await newSession("lease-late-renewal");
    const claim = await t.memory.host.claimLease({ sessionId, holder: "A", ttlMs: 60_000 });
    expect(claim.acquired).toBe(true);
    const fence = (claim as { fence: number }).fence;
    expect(await t.memory.host.releaseLease({ sessionId, holder: "A", fence })).toBe(true);
    // The renewal timer's request was already on its way on another pool connection.
    expect(await t.memory.host.renewLease({ sessionId, holder: "A", fence, ttlMs: 60_000 })).toBe(false);
    expect(await t.memory.host.claimLease({ sessionId, holder: "B", ttlMs: 60_000 })).toEqual({
      acquired: true,
      fence: fence + 1,
    });
  });

  it("lets one of several connections claiming a free lease at once win", async () => {
    const sessionId = await newSession("lease-race");
    const claims = await Promise.all(
      Array.from({ length: 8 }, (_, k) => t.memory.host.claimLease({ sessionId, holder: `H${k}`, ttlMs: 60_000 })),
    );
    expect(claims.filter((c) => c.acquired)).toHaveLength(1);
  });
});
