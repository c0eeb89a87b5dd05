import type { RunningCompactor } from "../src/memory/index.js";

export type EmbeddedWorkerState = "off" | "waiting" | "starting" | "running" | "failed";

/**
 * The compactor worker inside an OpenCode process, started when it is worth its cost rather than at load.
 *
 * Why: pg-boss's start (schema check, queue registration, supervisor and monitor timers, LISTEN) and the start-up sweep
 * ran while OpenCode prepared the first request, and its graceful stop waited for running jobs at exit; measured with
 * 1.18.33's `opencode run` (one tool call) this was most of the ~1.3 s the plugin added per run (issue 9 item 2). An
 * `opencode run` that ends before anything calls for the worker now never starts it; its jobs are durable in the
 * queue and the next worker takes them (any OpenCode process that lives longer, or `optchat worker`).
 *
 * The worker starts at the first of: `startAfterMs` after load (a long-lived process always runs one); a session that
 * stays idle for IDLE_START_MS (an interactive process between turns); memory not ready for a request (its own
 * history waits for summaries: without a worker it would wait for nothing); jobs already waiting for a worker when the
 * process prompts (left by processes that ended: a run-only workflow still makes progress, once its first request is
 * out).
 */
export class EmbeddedWorker {
  private current: EmbeddedWorkerState;
  private running: RunningCompactor | undefined;
  private starting: Promise<void> | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;
  error: string | undefined;
  startReason: string | undefined;

  constructor(
    enabled: boolean,
    private readonly start: () => Promise<RunningCompactor>,
    private readonly onFailure: (error: unknown) => Promise<void>,
    startAfterMs: number,
  ) {
    this.current = enabled ? "waiting" : "off";
    if (!enabled) return;
    if (startAfterMs === 0) {
      this.startNow("configured to start at once");
      return;
    }
    this.timer = setTimeout(() => this.startNow(`${startAfterMs} ms after load`), startAfterMs);
    // Never keeps OpenCode alive by itself.
    this.timer.unref?.();
  }

  get state(): EmbeddedWorkerState {
    return this.current;
  }

  /** True while the worker is not running and could still be started. */
  get waiting(): boolean {
    return this.current === "waiting";
  }

  /** Starts the worker unless it started already, is off or the process is closing. Never throws. */
  startNow(reason: string): void {
    if (this.current !== "waiting" || this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.current = "starting";
    this.startReason = reason;
    this.starting = (async () => {
      try {
        this.running = await this.start();
        this.current = "running";
      } catch (error) {
        this.current = "failed";
        this.error = error instanceof Error ? error.message : String(error);
        await this.onFailure(error).catch(() => {});
      }
    })();
  }

  /**
   * Stops at once: running jobs are failed back to the queue (pg-boss `failWip`; every job is idempotent and retried
   * in about a second by any worker) instead of being awaited, so closing OpenCode never waits for a summary.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.starting;
    const running = this.running;
    this.running = undefined;
    if (running) await running.stop(undefined, { graceful: false }).catch(() => {});
  }
}
