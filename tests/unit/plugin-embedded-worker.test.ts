import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { EmbeddedWorker } from "../../plugin/host/embedded-worker.js";
import type { RunningCompactor } from "../../src/memory/index.js";

/** A worker start the test finishes by hand, and the stops it received. */
function controlledStart() {
  const stops: boolean[] = [];
  const switches: string[] = [];
  let finish!: () => void;
  const reasons: string[] = [];
  const start = (reason: string) => {
    reasons.push(reason);
    return new Promise<RunningCompactor>((resolve) => {
      finish = () =>
        resolve({
          boss: undefined as never,
          stop: async (_timeout?: number, options?: { graceful?: boolean }) => {
            stops.push(options?.graceful ?? true);
          },
          pause: async () => {
            switches.push("pause");
          },
          resume: async () => {
            switches.push("resume");
          },
        });
    });
  };
  return { start, stops, switches, reasons, finish: () => finish() };
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("the embedded worker starts when needed", () => {
  it("starts after the configured delay, or when a session stays idle for a second, and not before", async () => {
    const late = controlledStart();
    const worker = new EmbeddedWorker(true, late.start, async () => {}, 10_000);
    expect(worker.state).toBe("waiting");
    let idle = true;
    worker.onSessionIdle(() => idle);
    idle = false;
    await vi.advanceTimersByTimeAsync(1_500);
    // Busy again within the second: no start.
    expect(worker.state).toBe("waiting");
    worker.onSessionIdle(() => true);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(worker.state).toBe("starting");
    expect(late.reasons).toEqual(["a session stayed idle"]);

    const timed = controlledStart();
    const other = new EmbeddedWorker(true, timed.start, async () => {}, 10_000);
    await vi.advanceTimersByTimeAsync(9_999);
    expect(other.state).toBe("waiting");
    await vi.advanceTimersByTimeAsync(1);
    expect(timed.reasons).toEqual(["10000 ms after load"]);
  });

  it("starts for a request whose history is not summarized, or after the first request when jobs were waiting", async () => {
    const behind = controlledStart();
    const a = new EmbeddedWorker(true, behind.start, async () => {}, 600_000);
    await a.onRequest(0, async () => 0); // no history: no question asked
    await a.onRequest(3, async () => 3);
    expect(a.state).toBe("waiting");
    await a.onRequest(3, async () => 2);
    expect(behind.reasons).toEqual(["memory was not ready for a request"]);

    const waiting = controlledStart();
    const b = new EmbeddedWorker(true, waiting.start, async () => {}, 600_000);
    let asked = 0;
    b.onFirstRequestSent(async () => {
      asked += 1;
      return true;
    });
    b.onFirstRequestSent(async () => {
      asked += 1;
      return true;
    });
    expect(asked).toBe(0); // after the request has left
    await vi.advanceTimersByTimeAsync(100);
    expect(asked).toBe(1);
    expect(waiting.reasons).toEqual(["jobs were waiting for a worker"]);
  });

  it("stops without waiting for a start on its way, and stops that worker once it has started", async () => {
    const run = controlledStart();
    const worker = new EmbeddedWorker(true, run.start, async () => {}, 0);
    expect(worker.state).toBe("starting");
    let stopped = false;
    void worker.stop().then(() => {
      stopped = true;
    });
    await vi.advanceTimersByTimeAsync(0);
    expect(stopped).toBe(true);
    expect(run.stops).toEqual([]);
    run.finish();
    await vi.advanceTimersByTimeAsync(0);
    expect(run.stops).toEqual([false]);
    // A stopped worker never starts again.
    worker.startNow("again");
    expect(run.reasons).toHaveLength(1);
  });

  it("stops a running worker at once (its jobs back to the queue), and an off worker never starts", async () => {
    const run = controlledStart();
    const worker = new EmbeddedWorker(true, run.start, async () => {}, 0);
    run.finish();
    await vi.advanceTimersByTimeAsync(0);
    expect(worker.state).toBe("running");
    await worker.stop();
    expect(run.stops).toEqual([false]);
    const off = controlledStart();
    const none = new EmbeddedWorker(false, off.start, async () => {}, 0);
    none.startNow("asked");
    none.onSessionIdle(() => true);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(none.state).toBe("off");
    expect(off.reasons).toEqual([]);
  });
});

describe("stopping at close (issue 37: a pool ended under a starting worker)", () => {
  it("does not wait for a start under way, and is released only once the started worker is stopped", async () => {
    const run = controlledStart();
    const worker = new EmbeddedWorker(true, run.start, async () => {}, 0);
    expect(worker.state).toBe("starting");
    await worker.stop();
    let released = false;
    void worker.released().then(() => {
      released = true;
    });
    await vi.advanceTimersByTimeAsync(0);
    // The close went on without the start; the pool must stay open: the start still uses it.
    expect({ released, stops: run.stops }).toEqual({ released: false, stops: [] });
    run.finish();
    await vi.advanceTimersByTimeAsync(0);
    expect({ released, stops: run.stops }).toEqual({ released: true, stops: [false] });
    // Never started again after its stop.
    worker.startNow("again");
    expect(run.reasons).toHaveLength(1);
  });

  it("is released at once when it never started", async () => {
    const run = controlledStart();
    const worker = new EmbeddedWorker(true, run.start, async () => {}, 10_000);
    await worker.stop();
    await expect(worker.released()).resolves.toBeUndefined();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(run.reasons).toEqual([]);
  });
});
