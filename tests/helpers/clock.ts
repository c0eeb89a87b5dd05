import type { Clock, Timer } from "../../plugin/base/clock.js";

/** Counts turns of the event loop (setImmediate callbacks) until stopped: a task that never yields sees none. */
export function loopTurns(): { stop(): number } {
  let turns = 0;
  let running = true;
  const tick = () => {
    if (!running) return;
    turns++;
    setImmediate(tick);
  };
  setImmediate(tick);
  return {
    stop() {
      running = false;
      return turns;
    },
  };
}

/**
 * A clock that moves only when the test says so (plugin/base/clock.ts): the adapter's idle grace, lease renewals and job
 * retry waits then run when `advance` reaches them, so a test proves "nothing before the grace, the outcome after it"
 * without sleeping through it.
 */
export class ManualClock implements Clock {
  private current: number;
  private readonly timers = new Map<number, { due: number; run: () => void; every: number | undefined }>();
  private nextId = 1;

  constructor(start = Date.UTC(2026, 10, 30, 9, 0, 0)) {
    this.current = start;
  }

  now(): number {
    return this.current;
  }

  setTimeout(run: () => void, ms: number): Timer {
    return this.add(run, ms, undefined);
  }

  setInterval(run: () => void, ms: number): Timer {
    return this.add(run, ms, ms);
  }

  clear(timer: Timer | undefined): void {
    if (timer) this.timers.delete(timer.id as number);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const timer = this.add(resolve, ms, undefined);
      signal?.addEventListener(
        "abort",
        () => {
          this.clear(timer);
          resolve();
        },
        { once: true },
      );
    });
  }

  /** Timers waiting to fire. */
  get pending(): number {
    return this.timers.size;
  }

  /** Moves time forward by `ms`, firing every timer that falls due on the way, in order of due time. */
  advance(ms: number): void {
    const until = this.current + ms;
    for (;;) {
      const next = [...this.timers.entries()].sort((a, b) => a[1].due - b[1].due)[0];
      if (!next || next[1].due > until) break;
      const [id, timer] = next;
      this.current = Math.max(this.current, timer.due);
      if (timer.every === undefined) this.timers.delete(id);
      else timer.due += Math.max(1, timer.every);
      timer.run();
    }
    this.current = until;
  }

  private add(run: () => void, ms: number, every: number | undefined): Timer {
    const id = this.nextId++;
    this.timers.set(id, { due: this.current + Math.max(0, ms), run, every });
    return { id };
  }
}
