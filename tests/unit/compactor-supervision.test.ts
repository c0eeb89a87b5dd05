import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { type Supervision, superviseEvery } from "../../src/compactor/supervision.js";

/**
 * The compactor's loop over pg-boss's supervision pass (src/compactor/supervision.ts): a pass every interval measured
 * from the previous pass's end, none while paused (the local server's worker beside running OpenCode processes), none after stop.
 */

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

/** A pass that takes `ms` of (fake) time, counting its starts and how many ran at once. */
function timedPass(ms: number) {
  const state = { starts: 0, running: 0, mostAtOnce: 0 };
  const pass = async () => {
    state.starts += 1;
    state.running += 1;
    state.mostAtOnce = Math.max(state.mostAtOnce, state.running);
    await new Promise((resolve) => setTimeout(resolve, ms));
    state.running -= 1;
  };
  return { pass, state };
}

/** Stops, letting (fake) time run for the pass under way. */
async function stopped(supervision: Supervision): Promise<void> {
  const stopping = supervision.stop();
  await vi.advanceTimersByTimeAsync(1_000);
  await stopping;
}

describe("superviseEvery", () => {
  it("runs a pass every interval after the previous one ended, never two at once", async () => {
    const { pass, state } = timedPass(400);
    const supervision = superviseEvery(pass, 1_000, () => {});
    await vi.advanceTimersByTimeAsync(999);
    expect(state.starts).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(state.starts).toBe(1);
    // The second pass starts 1 s after the first ended (at 1.4 s), not on a fixed grid.
    await vi.advanceTimersByTimeAsync(1_399);
    expect(state.starts).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(state.starts).toBe(2);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(state.starts).toBe(9);
    expect(state.mostAtOnce).toBe(1);
    await stopped(supervision);
  });

  it("runs no pass while paused, and runs them again once resumed", async () => {
    const { pass, state } = timedPass(10);
    const supervision = superviseEvery(pass, 1_000, () => {});
    await vi.advanceTimersByTimeAsync(1_000);
    expect(state.starts).toBe(1);
    supervision.pause();
    supervision.pause();
    await vi.advanceTimersByTimeAsync(30_000);
    expect(state.starts).toBe(1);
    supervision.resume();
    supervision.resume(); // idempotent: still one pass per interval
    await vi.advanceTimersByTimeAsync(1_000);
    expect(state.starts).toBe(2);
    await vi.advanceTimersByTimeAsync(1_010);
    expect(state.starts).toBe(3);
    await stopped(supervision);
  });

  it("lets a pass under way finish when paused, and starts none after it", async () => {
    const { pass, state } = timedPass(500);
    const supervision = superviseEvery(pass, 1_000, () => {});
    await vi.advanceTimersByTimeAsync(1_100);
    expect(state.running).toBe(1);
    supervision.pause();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(state).toMatchObject({ starts: 1, running: 0 });
    await supervision.stop();
  });

  it("reports a failed pass and runs the next one on time", async () => {
    const errors: unknown[] = [];
    let calls = 0;
    const supervision = superviseEvery(
      async () => {
        calls += 1;
        if (calls === 1) throw new Error("connection terminated");
      },
      1_000,
      (error) => errors.push(error),
    );
    await vi.advanceTimersByTimeAsync(2_000);
    expect(calls).toBe(2);
    expect(errors).toHaveLength(1);
    expect(String(errors[0])).toContain("connection terminated");
    await supervision.stop();
  });

  it("stop waits for the pass under way and starts no other, even when resumed", async () => {
    const { pass, state } = timedPass(700);
    const supervision = superviseEvery(pass, 1_000, () => {});
    await vi.advanceTimersByTimeAsync(1_000);
    let stopped = false;
    const stopping = supervision.stop().then(() => {
      stopped = true;
    });
    await vi.advanceTimersByTimeAsync(600);
    expect(stopped).toBe(false);
    await vi.advanceTimersByTimeAsync(100);
    await stopping;
    expect(state.running).toBe(0);
    supervision.resume();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(state.starts).toBe(1);
  });
});
