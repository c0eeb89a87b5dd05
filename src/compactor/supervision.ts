/**
 * pg-boss's supervision, run by the compactor worker instead of pg-boss's own timer: each pass expires the claims of
 * workers that died (heartbeat lost: their jobs run again), deletes finished jobs past their retention, and refreshes
 * the queues' statistics (pg-boss `supervise()`, the same pass its timer runs).
 *
 * Why ours (issue 9 item 2): pg-boss arms its timer at start and has no way to disarm it short of stopping, and a
 * worker that is paused (the local server's worker while OpenCode processes run, plugin/transport/local-server/workers.ts) must
 * not take the cores those processes are using. Measured (15 s windows, a worker paused on the database a dozen
 * served runs had left): 16-22 ms of the worker's CPU and 14-28 ms of PostgreSQL's per second with pg-boss's timer,
 * 6-8 and 4-9 ms with this loop (about what they use with no worker); a pass was ~9 ms of statement time in
 * PostgreSQL (pg_stat_statements), more on a larger job table (its queue statistics read the whole table, pg-boss's
 * own comments say; docs/opencode-notes.md "Eighth pass"). Paused, this loop runs no pass; claims of a worker that
 * died meanwhile expire at the next pass after the resume, or at another worker's.
 */

export interface Supervision {
  /** No pass starts until `resume` (one under way finishes). */
  pause(): void;
  resume(): void;
  /** No pass starts again; resolves when the one under way, if any, has finished. */
  stop(): Promise<void>;
}

/**
 * Runs `pass` every `intervalMs` (measured from the end of the previous pass, so passes never overlap) until stopped.
 * A pass that fails is reported and the next one runs on time. The timer never keeps the process alive by itself.
 */
export function superviseEvery(
  pass: () => Promise<void>,
  intervalMs: number,
  report: (error: unknown) => void,
): Supervision {
  let paused = false;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running: Promise<void> | undefined;

  const schedule = (): void => {
    if (paused || stopped || timer || running) return;
    timer = setTimeout(() => {
      timer = undefined;
      if (paused || stopped) return;
      running = pass()
        .catch(report)
        .finally(() => {
          running = undefined;
          schedule();
        });
    }, intervalMs);
    timer.unref?.();
  };

  schedule();
  return {
    pause() {
      paused = true;
      clearTimeout(timer);
      timer = undefined;
    },
    resume() {
      paused = false;
      schedule();
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      timer = undefined;
      await running;
    },
  };
}
