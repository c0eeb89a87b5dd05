import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  DEMAND_HOLD_MS,
  RESTART_AFTER_MS,
  ServerWorkers,
  STARVATION_CHECK_MS,
  STOP_WITHIN_MS,
  WORK_AFTER_DISCONNECT_MS,
} from "../../plugin/transport/local-server/workers.js";
import type { Config, RunningCompactor, SummarizerSettings } from "../../src/memory/index.js";

/**
 * The local server's own compactor workers (plugin/transport/local-server/workers.ts), on fake timers: started only once they should
 * work, working while no process is connected, paused while processes run unless jobs starve or a request waits for
 * summaries, one per database, restarted after a failed start, and stopped within a bound however stuck.
 */

const CONFIG = { databaseUrl: "postgres://a/db" } as unknown as Config;
const OTHER = { databaseUrl: "postgres://a/other" } as unknown as Config;
const SETTINGS = { summarizer: "fake", model: "" } as unknown as SummarizerSettings;

function harness(options: { failStarts?: number; stuckStop?: boolean } = {}) {
  const calls: string[] = [];
  let waiting = false;
  let failures = options.failStarts ?? 0;
  const log: string[] = [];
  const workers = new ServerWorkers({
    start: async (config) => {
      calls.push(`start ${config.databaseUrl}`);
      if (failures > 0) {
        failures -= 1;
        throw new Error("database unavailable");
      }
      return {
        boss: undefined as never,
        stop: async () => {
          calls.push("stop");
          if (options.stuckStop) await new Promise(() => {});
        },
        pause: async () => void calls.push("pause"),
        resume: async () => void calls.push("resume"),
      } satisfies RunningCompactor;
    },
    jobsWaiting: async () => waiting,
    log: (line) => log.push(line),
    now: () => Date.now(),
  });
  return {
    workers,
    calls,
    log,
    setWaiting: (value: boolean) => {
      waiting = value;
    },
  };
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("the local server's compactor workers", () => {
  it("start only once they should work: not while the process that gave the model is connected", async () => {
    const { workers, calls } = harness();
    workers.connections(1);
    workers.provide(CONFIG, async () => SETTINGS, 2);
    await vi.advanceTimersByTimeAsync(STARVATION_CHECK_MS * 3);
    expect(calls).toEqual([]);
    expect(workers.state(CONFIG)).toBe("waiting");
    workers.connections(0);
    await vi.advanceTimersByTimeAsync(WORK_AFTER_DISCONNECT_MS - 1);
    expect(calls).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(calls).toEqual(["start postgres://a/db"]);
    expect(workers.state(CONFIG)).toBe("working");
  });

  it("pause while processes run and work again a moment after the last one left", async () => {
    const { workers, calls } = harness();
    workers.provide(CONFIG, async () => SETTINGS, 2);
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toEqual(["start postgres://a/db"]);
    workers.connections(1);
    await vi.advanceTimersByTimeAsync(0);
    expect(workers.state(CONFIG)).toBe("paused");
    workers.connections(2);
    workers.connections(0);
    // A process arriving within the moment keeps it paused.
    await vi.advanceTimersByTimeAsync(WORK_AFTER_DISCONNECT_MS / 2);
    workers.connections(1);
    await vi.advanceTimersByTimeAsync(WORK_AFTER_DISCONNECT_MS);
    expect(calls).toEqual(["start postgres://a/db", "pause"]);
    workers.connections(0);
    await vi.advanceTimersByTimeAsync(WORK_AFTER_DISCONNECT_MS);
    expect(calls).toEqual(["start postgres://a/db", "pause", "resume"]);
  });

  it("work while processes run when jobs starve, and pause again once none does", async () => {
    const { workers, calls, setWaiting } = harness();
    workers.provide(CONFIG, async () => SETTINGS, 2);
    await vi.advanceTimersByTimeAsync(0);
    workers.connections(1);
    await vi.advanceTimersByTimeAsync(0);
    setWaiting(true);
    await vi.advanceTimersByTimeAsync(STARVATION_CHECK_MS);
    expect(calls.slice(1)).toEqual(["pause", "resume"]);
    setWaiting(false);
    await vi.advanceTimersByTimeAsync(STARVATION_CHECK_MS);
    expect(calls.slice(1)).toEqual(["pause", "resume", "pause"]);
  });

  it("work at once for a request that waits for summaries, for a while", async () => {
    const { workers, calls } = harness();
    workers.connections(1);
    workers.provide(CONFIG, async () => SETTINGS, 2);
    workers.demand(CONFIG);
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toEqual(["start postgres://a/db"]);
    await vi.advanceTimersByTimeAsync(DEMAND_HOLD_MS + STARVATION_CHECK_MS);
    expect(calls).toEqual(["start postgres://a/db", "pause"]);
  });

  it("keep one worker per database, and start again no sooner than a while after a failed start", async () => {
    const { workers, calls, log } = harness({ failStarts: 1 });
    workers.provide(CONFIG, async () => SETTINGS, 2);
    workers.provide(CONFIG, async () => SETTINGS, 2);
    workers.provide(OTHER, async () => SETTINGS, 2);
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toEqual(["start postgres://a/db", "start postgres://a/other"]);
    expect(workers.state(CONFIG)).toBe("failed");
    expect(workers.error(CONFIG)).toBe("database unavailable");
    expect(log.join("\n")).toContain("could not start (tried again in 10 s): database unavailable");
    workers.provide(CONFIG, async () => SETTINGS, 2);
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toHaveLength(2);
    // Tried again by itself, with no process calling for it.
    await vi.advanceTimersByTimeAsync(RESTART_AFTER_MS);
    expect(calls).toEqual(["start postgres://a/db", "start postgres://a/other", "start postgres://a/db"]);
    expect(workers.state(CONFIG)).toBe("working");
  });

  it("stop within a bound even when a worker's stop is stuck", async () => {
    const { workers, calls, log } = harness({ stuckStop: true });
    workers.provide(CONFIG, async () => SETTINGS, 2);
    await vi.advanceTimersByTimeAsync(0);
    let done = false;
    void workers.stopAll().then(() => {
      done = true;
    });
    await vi.advanceTimersByTimeAsync(STOP_WITHIN_MS - 1);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(done).toBe(true);
    expect(calls).toEqual(["start postgres://a/db", "stop"]);
    expect(log.join("\n")).toContain("did not stop in time");
    // Stopped: nothing starts any more.
    workers.provide(OTHER, async () => SETTINGS, 2);
    await vi.advanceTimersByTimeAsync(WORK_AFTER_DISCONNECT_MS);
    expect(calls).toHaveLength(2);
  });
});
