import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { EmbeddedWorker } from "../../plugin/embedded-worker.js";
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

  it("starts only for a request whose memory is not ready while another worker is kept for the database", async () => {
    let kept = true;
    const run = controlledStart();
    const worker = new EmbeddedWorker(
      true,
      run.start,
      async () => {},
      10_000,
      () => kept,
    );
    worker.onSessionIdle(() => true);
    let asked = 0;
    worker.onFirstRequestSent(async () => {
      asked += 1;
      return true;
    });
    await vi.advanceTimersByTimeAsync(10_000);
    expect({ state: worker.state, asked }).toEqual({ state: "waiting", asked: 0 });
    await worker.onRequest(3, async () => 2);
    expect(run.reasons).toEqual(["memory was not ready for a request"]);

    // Once nothing is kept any more, the usual triggers start it again.
    kept = false;
    const later = controlledStart();
    const other = new EmbeddedWorker(
      true,
      later.start,
      async () => {},
      10_000,
      () => kept,
    );
    await vi.advanceTimersByTimeAsync(10_000);
    expect(later.reasons).toEqual(["10000 ms after load"]);
    expect(other.state).toBe("starting");
  });
});

describe("handing the worker over at close (the local server keeps it)", () => {
  it("gives a running or starting worker away unstopped, and stops it when the keeper says so", async () => {
    const run = controlledStart();
    const worker = new EmbeddedWorker(true, run.start, async () => {}, 0);
    const handed = worker.handOver();
    expect(handed).toBeDefined();
    run.finish();
    await vi.advanceTimersByTimeAsync(0);
    expect(run.stops).toEqual([]);
    // Never started or stopped here again.
    await worker.stop();
    worker.startNow("again");
    expect({ stops: run.stops, starts: run.reasons.length }).toEqual({ stops: [], starts: 1 });
    await handed?.stop();
    expect(run.stops).toEqual([false]);
  });

  it("gives nothing for a worker that is not running, and stops it as at any close", async () => {
    const run = controlledStart();
    const waiting = new EmbeddedWorker(true, run.start, async () => {}, 10_000);
    expect(waiting.handOver()).toBeUndefined();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(run.reasons).toEqual([]);
    const off = new EmbeddedWorker(false, run.start, async () => {}, 0);
    expect(off.handOver()).toBeUndefined();
  });
});
