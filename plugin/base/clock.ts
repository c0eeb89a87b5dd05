/**
 * Time as the adapter's parts see it: the wall clock and the timers they schedule. Injected (the real one in
 * production, a manual one in tests) so that the idle grace, lease renewals and job retries can be driven without
 * waiting for them (issue 11: the adapter's tests used to sleep through the real 5-second grace).
 */
export interface Clock {
  /** Milliseconds since the epoch, as `Date.now()`. */
  now(): number;
  /** Runs `run` once after `ms`; the timer never keeps the process alive. */
  setTimeout(run: () => void, ms: number): Timer;
  /** Runs `run` every `ms`; the timer never keeps the process alive. */
  setInterval(run: () => void, ms: number): Timer;
  /** Cancels a timer of either kind; undefined and already-fired timers are ignored. */
  clear(timer: Timer | undefined): void;
  /**
   * Resolves after `ms`, or at once when `signal` aborts (never rejects). Unlike the timers above it keeps the process
   * alive: a job waiting to retry must not be dropped by the process exiting under it (close cuts it short instead).
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** An opaque timer handle of a `Clock`. */
export interface Timer {
  readonly id: unknown;
  /** Which clear function the runtime needs (Bun before 1.1 cancelled a timer only through its own kind's). */
  readonly kind?: "timeout" | "interval";
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout(run, ms) {
    const id = setTimeout(run, ms);
    id.unref?.();
    return { id, kind: "timeout" };
  },
  setInterval(run, ms) {
    const id = setInterval(run, ms);
    id.unref?.();
    return { id, kind: "interval" };
  },
  clear(timer) {
    if (!timer) return;
    if (timer.kind === "interval") clearInterval(timer.id as ReturnType<typeof setInterval>);
    else clearTimeout(timer.id as ReturnType<typeof setTimeout>);
  },
  sleep(ms, signal) {
    return new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const id = setTimeout(done, ms);
      signal?.addEventListener("abort", done, { once: true });
      function done() {
        clearTimeout(id);
        signal?.removeEventListener("abort", done);
        resolve();
      }
    });
  },
};
