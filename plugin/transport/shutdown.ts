/**
 * Flush at close: what the plugin does when OpenCode 1.18.33 is told to stop.
 *
 * Observed with the harness (docs/opencode-notes.md "Closing"): `POST /instance/dispose` answers before it calls the
 * plugins' `dispose` (0.1-2 s later under load), and SIGTERM ends the process at once without calling it: OpenCode
 * installs no SIGTERM listener (0 at plugin load), so Bun's default action applies. A client that disposes and then
 * sends SIGTERM, as the issue 9 item 1 measurement did within ~250 ms of the answer, killed the plugin before the
 * reply's ingestion job ran. So the plugin listens for SIGTERM and SIGHUP itself: it flushes (bounded) and then raises
 * the signal again with its own listener removed, so the process still ends by that signal. SIGINT does not stop
 * 1.18.33 (`opencode run` and `serve` both survived it): the plugin flushes on it and leaves the process running.
 */

import { runsInPluginThread } from "./thread-state.js";

export interface Closable {
  /** Flushes pending work (at most `budgetMs`) and releases everything; the same promise for every caller. */
  close(budgetMs: number): Promise<void>;
  /** Waits (at most `budgetMs`) for pending work, keeping everything open. */
  flush(budgetMs: number): Promise<unknown>;
}

/**
 * Closables to flush or close together: the process's own (closed on its stop signals), or one OpenCode process's
 * adapters inside the local server (plugin/transport/local-server/server.ts), closed when that process disconnects.
 */
export class ClosableRegistry {
  private readonly open = new Map<Closable, number>();

  /** Adds a target with its flush budget; returns its removal. */
  register(target: Closable, budgetMs: number): () => void {
    this.open.set(target, budgetMs);
    return () => {
      this.open.delete(target);
    };
  }

  /** Flushes and closes every registered target, each within its budget (plus 500 ms); never rejects. */
  async closeAll(): Promise<void> {
    const targets = [...this.open];
    this.open.clear();
    await Promise.allSettled(targets.map(([target, budget]) => bounded(target.close(budget), budget + 500)));
  }

  /** Flushes every registered target (SIGINT), keeping them open; never rejects. */
  async flushAll(): Promise<void> {
    await Promise.allSettled([...this.open].map(([target, budget]) => bounded(target.flush(budget), budget)));
  }
}

/** How an adapter is registered to be flushed and closed when whoever runs it stops (closeOnSignals by default). */
export type RegisterClosable = (target: Closable, budgetMs: number) => () => void;

const processTargets = new ClosableRegistry();
let installed = false;
let terminating = false;

/**
 * Registers an adapter (or, in OpenCode's thread, the bridge to a plugin thread) to be flushed and closed when the
 * process is told to stop; returns the unregistration. OpenCode may load the plugin several times in one process (one
 * per instance, again after a dispose), so the listeners are installed once per process and close every registered
 * target: one owner of the signals, whichever way each instance runs.
 */
export function closeOnSignals(target: Closable, budgetMs: number): () => void {
  const unregister = processTargets.register(target, budgetMs);
  // Signals reach only OpenCode's thread: there the bridge (plugin/transport/remote-hooks.ts) registers itself here, and the
  // plugin's thread answers its forwarded close or flush with `closeRegistered` / `flushRegistered`.
  if (!installed && !runsInPluginThread()) {
    installed = true;
    process.on("SIGTERM", onTerminate);
    process.on("SIGHUP", onTerminate);
    process.on("SIGINT", onInterrupt);
  }
  return unregister;
}

/** Flushes and closes every target registered by closeOnSignals, each within its budget (plus 500 ms); never rejects. */
export function closeRegistered(): Promise<void> {
  return processTargets.closeAll();
}

/** Flushes every target registered by closeOnSignals (SIGINT), keeping them open; never rejects. */
export function flushRegistered(): Promise<void> {
  return processTargets.flushAll();
}

function onTerminate(signal: NodeJS.Signals): void {
  if (terminating) return;
  terminating = true;
  void closeRegistered().finally(() => {
    process.off("SIGTERM", onTerminate);
    process.off("SIGHUP", onTerminate);
    // Someone else listens (a later OpenCode version, a test): they decide. Otherwise end as the signal would have.
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  });
}

function onInterrupt(): void {
  void flushRegistered();
}

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
