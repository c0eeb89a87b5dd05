/**
 * Cooperative scheduling for long work on the worker's (and the host's) only thread: pg-boss's heartbeat and lease
 * renewals, NOTIFY handling and the host's own work all run on this event loop. A 64 MiB record once kept it busy
 * for minutes, so the job's heartbeat stopped and another worker took the job and froze the same way (issue 9 item 3).
 */

/**
 * Resolves on the next turn of the event loop, after pending I/O and due timers have run. A resolved promise would
 * not do: awaiting it continues in the same microtask queue, and timers never get their turn.
 */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Runs a step generator, yielding to the event loop after every `every` steps; returns its steps in order. */
export async function collectYielding<T>(steps: Iterable<T>, every: number): Promise<T[]> {
  const out: T[] = [];
  for (const step of steps) {
    out.push(step);
    if (out.length % every === 0) await yieldToEventLoop();
  }
  return out;
}
