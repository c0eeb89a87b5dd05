import type { RunningCompactor } from "../../src/memory/index.js";
import type { CompactorHandle } from "../turns/compactor-handle.js";

export type { CompactorHandle } from "../turns/compactor-handle.js";

export type EmbeddedWorkerState = "off" | "waiting" | "starting" | "running" | "failed";

/**
 * How long a session stays idle before a waiting worker starts: `opencode run` is disposed within ~0.1 s of its idle
 * (docs/opencode-notes.md "Closing") and must not pay for a start; an interactive process between turns has time.
 */
const IDLE_START_MS = 1_000;

/** How long after a request's `chat.params` the check for waiting jobs runs: the request is then on its way. */
const AFTER_REQUEST_MS = 100;

/**
 * The compactor worker inside an OpenCode process, started when it is worth its cost rather than at load.
 *
 * Why: pg-boss's start (schema check, queue registration, supervisor and monitor timers, LISTEN) and the start-up sweep
 * ran while OpenCode prepared the first request, and its graceful stop waited for running jobs at exit; measured with
 * 1.18.33's `opencode run` (one tool call) this was most of the ~1.3 s the plugin added per run (issue 9 item 2). An
 * `opencode run` that ends before anything calls for the worker now never starts it; its jobs are durable in the
 * queue and the next worker takes them (the local server's, any OpenCode process that lives longer, `optchat worker`).
 *
 * The worker starts at the first of: `startAfterMs` after load (a long-lived process always runs one); a session that
 * stays idle for IDLE_START_MS (an interactive process between turns); memory not ready for a request (its own
 * history waits for summaries: without a worker it would wait for nothing); jobs already waiting for a worker when the
 * process prompts (left by processes that ended: a run-only workflow still makes progress, once its first request is
 * out). The triggers are the `on…` methods below; the adapter calls them and never waits for them. A process the
 * optchat local server serves has none: the server's worker does its work (plugin/transport/local-server/workers.ts).
 */
export class EmbeddedWorker implements CompactorHandle {
  private current: EmbeddedWorkerState;
  private running: RunningCompactor | undefined;
  private starting: Promise<void> | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;
  private releasing: Promise<void> | undefined;
  private askedForWaitingJobs = false;
  error: string | undefined;
  startReason: string | undefined;

  constructor(
    enabled: boolean,
    private readonly start: (reason: string) => Promise<RunningCompactor>,
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

  /** A session went idle: the worker starts if it is still idle IDLE_START_MS later (`stillIdle`). */
  onSessionIdle(stillIdle: () => boolean): void {
    if (!this.waiting) return;
    const timer = setTimeout(() => {
      if (stillIdle()) this.startNow("a session stayed idle");
    }, IDLE_START_MS);
    timer.unref?.();
  }

  /**
   * A request of a turn whose own history has `boundary` records is being prepared: when they are not all summarized
   * yet (`builtLeaves`), the request will wait for the compactor (readiness), so the worker must start now or the wait
   * would be for nothing.
   */
  async onRequest(boundary: number, builtLeaves: () => Promise<number>): Promise<void> {
    if (!this.waiting || boundary === 0) return;
    if ((await builtLeaves()) < boundary) this.startNow("memory was not ready for a request");
  }

  /**
   * The first request of this process is on its way: compactor jobs that already waited for a worker (left by
   * processes that ended before theirs started) make the worker start, so a workflow of `opencode run`s still makes
   * progress. Asked once, after the request left, so the check never delays it.
   */
  onFirstRequestSent(jobsWaiting: () => Promise<boolean>): void {
    if (!this.waiting || this.askedForWaitingJobs) return;
    this.askedForWaitingJobs = true;
    const timer = setTimeout(() => {
      jobsWaiting()
        .then((waiting) => {
          if (waiting) this.startNow("jobs were waiting for a worker");
        })
        .catch(() => {});
    }, AFTER_REQUEST_MS);
    timer.unref?.();
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
        this.running = await this.start(reason);
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
   * in about a second by any worker) instead of being awaited, so closing OpenCode never waits for a summary. A start
   * still on its way is not waited for either (it took seconds under load, all of it added to `dispose`): the worker
   * is stopped when it has started, if the process still runs then; a process that exits first leaves no job behind
   * that pg-boss does not hand to another worker once its heartbeat lapses.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.current === "starting") {
      void this.released();
      return;
    }
    await this.stopRunning();
  }

  /**
   * Once stopped: resolves when a start still under way has ended and its worker is stopped too. The adapter closes
   * its pool only then: a pool ended under a starting worker failed its start-up sweep and its first jobs with "Cannot
   * use a pool after calling end on the pool", and those jobs could not even be failed back (issue 37).
   */
  released(): Promise<void> {
    this.releasing ??= (async () => {
      await this.starting;
      await this.stopRunning();
    })();
    return this.releasing;
  }

  private async stopRunning(): Promise<void> {
    const running = this.running;
    this.running = undefined;
    if (running) await running.stop(undefined, { graceful: false }).catch(() => {});
  }
}
