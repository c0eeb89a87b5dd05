/**
 * What is flushed and closed when whoever runs it stops, and the two waits every close uses. Here, below everything
 * that closes (the adapter, plugin/host/) and everything that decides when (plugin/transport/shutdown.ts).
 */

export interface Closable {
  /** Flushes pending work (at most `budgetMs`) and releases everything; the same promise for every caller. */
  close(budgetMs: number): Promise<void>;
  /** Waits (at most `budgetMs`) for pending work, keeping everything open. */
  flush(budgetMs: number): Promise<unknown>;
}

/** How an adapter is registered to be flushed and closed when whoever runs it stops (closeOnSignals by default). */
export type RegisterClosable = (target: Closable, budgetMs: number) => () => void;

/**
 * Waits until the promises `current()` lists have all settled and it lists no new one, or `budgetMs` passed: work
 * queued while waiting (a final message arriving during a close) is waited for too. True when everything settled.
 */
export async function settle(current: () => readonly Promise<unknown>[], budgetMs: number): Promise<boolean> {
  const deadline = Date.now() + budgetMs;
  for (;;) {
    const pending = current();
    const left = deadline - Date.now();
    if (left <= 0) return false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = await Promise.race([
      Promise.allSettled(pending).then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), left);
      }),
    ]).finally(() => clearTimeout(timer));
    if (timedOut) return false;
    const now = current();
    if (now.length === pending.length && now.every((promise, i) => promise === pending[i])) return true;
  }
}

/** Resolves when `work` settles or after `ms`, whichever is first; never rejects. */
export async function bounded(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      work.then(
        () => undefined,
        () => undefined,
      ),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
