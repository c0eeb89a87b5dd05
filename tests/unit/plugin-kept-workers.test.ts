import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { KeptWorker } from "../../plugin/embedded-worker.js";
import { KeptWorkers, RESUME_AFTER_MS, STARVATION_CHECK_MS } from "../../plugin/kept-workers.js";
import type { Memory } from "../../src/memory/index.js";

/**
 * The compactor workers the local server keeps (plugin/kept-workers.ts): paused while served processes run, working
 * a moment after the last one left, or when jobs waited too long; one per database; stopped with the server.
 */

function recordingWorker() {
  const calls: string[] = [];
  const worker: KeptWorker = {
    stop: async () => {
      calls.push("stop");
    },
    pause: async () => {
      calls.push("pause");
    },
    resume: async () => {
      calls.push("resume");
    },
  };
  return { worker, calls };
}

function memoryWithJobsWaiting(waiting: () => boolean): Promise<Memory> {
  return Promise.resolve({ host: { jobsWaitingForWorker: async () => waiting() } } as unknown as Memory);
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("KeptWorkers", () => {
  it("pauses while processes are connected and resumes a moment after the last one left", async () => {
    const lines: string[] = [];
    const kept = new KeptWorkers((line) => lines.push(line));
    const { worker, calls } = recordingWorker();
    // Kept at a served process's dispose: that process is still connected.
    kept.connections(1);
    expect(
      kept.keep(
        "db",
        worker,
        memoryWithJobsWaiting(() => false),
      ),
    ).toBe(true);
    expect(kept.has("db")).toBe(true);
    expect(calls).toEqual(["pause"]);
    expect(lines).toEqual(["optchat local server: keeping a served process's compactor worker until the server stops"]);
    kept.connections(0);
    await vi.advanceTimersByTimeAsync(RESUME_AFTER_MS - 1);
    expect(calls).toEqual(["pause"]);
    await vi.advanceTimersByTimeAsync(1);
    expect(calls).toEqual(["pause", "resume"]);
    // The next process arrives: paused again; one that arrives within the moment cancels the resume.
    kept.connections(1);
    kept.connections(0);
    kept.connections(1);
    await vi.advanceTimersByTimeAsync(RESUME_AFTER_MS);
    expect(calls).toEqual(["pause", "resume", "pause", "pause"]);
  });

  it("works while processes run once jobs have waited too long", async () => {
    const kept = new KeptWorkers(() => {});
    const { worker, calls } = recordingWorker();
    let waiting = false;
    kept.keep(
      "db",
      worker,
      memoryWithJobsWaiting(() => waiting),
    );
    kept.connections(2);
    await vi.advanceTimersByTimeAsync(STARVATION_CHECK_MS);
    expect(calls).toEqual(["pause"]);
    waiting = true;
    await vi.advanceTimersByTimeAsync(STARVATION_CHECK_MS);
    expect(calls).toEqual(["pause", "resume"]);
  });

  it("keeps one worker per database (a second is refused) and stops them all with the server", async () => {
    const kept = new KeptWorkers(() => {});
    const first = recordingWorker();
    const second = recordingWorker();
    const other = recordingWorker();
    expect(
      kept.keep(
        "db",
        first.worker,
        memoryWithJobsWaiting(() => false),
      ),
    ).toBe(true);
    expect(
      kept.keep(
        "db",
        second.worker,
        memoryWithJobsWaiting(() => false),
      ),
    ).toBe(false);
    expect(
      kept.keep(
        "other-db",
        other.worker,
        memoryWithJobsWaiting(() => false),
      ),
    ).toBe(true);
    await kept.stopAll();
    expect([first.calls, second.calls, other.calls]).toEqual([["stop"], [], ["stop"]]);
    expect(kept.has("db")).toBe(false);
  });
});
