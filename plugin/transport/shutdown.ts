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

import { bounded, type Closable } from "../base/closing.js";

export type { Closable } from "../base/closing.js";

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

const processTargets = new ClosableRegistry();
let installed = false;
let terminating = false;

/**
 * Registers a target to be flushed and closed when the process is told to stop; returns the unregistration. Called only
 * in OpenCode's thread, where the signals arrive: by the forwarding hooks (plugin/transport/remote-hooks.ts), which
 * have the plugin's side close or flush whatever its runner registered. OpenCode may load the plugin several times in
 * one process (one per instance, again after a dispose), so the listeners are installed once per process and close
 * every registered target: one owner of the signals, whichever way each instance runs.
 */
export function closeOnSignals(target: Closable, budgetMs: number): () => void {
  const unregister = processTargets.register(target, budgetMs);
  if (!installed) {
    installed = true;
    process.on("SIGTERM", onTerminate);
    process.on("SIGHUP", onTerminate);
    process.on("SIGINT", onInterrupt);
  }
  return unregister;
}

function onTerminate(signal: NodeJS.Signals): void {
  if (terminating) return;
  terminating = true;
  void processTargets.closeAll().finally(() => {
    process.off("SIGTERM", onTerminate);
    process.off("SIGHUP", onTerminate);
    // Someone else listens (a later OpenCode version, a test): they decide. Otherwise end as the signal would have.
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  });
}

function onInterrupt(): void {
  void processTargets.flushAll();
}
