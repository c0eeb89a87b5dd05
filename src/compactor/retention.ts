import type { PgBoss } from "pg-boss";
import type { Pool } from "../store/db.js";
import { deleteSupersededRevisions } from "../store/retention.js";
import { applyJobRetention } from "./queue.js";

export interface RetentionSettings {
  /** OPTCHAT_JOB_RETENTION_SECONDS: finished jobs are kept this long (pg-boss deletes them in its maintenance). */
  readonly jobRetentionSeconds: number;
  /** OPTCHAT_REVISION_RETENTION_SECONDS: see deleteSupersededRevisions. */
  readonly revisionRetentionSeconds: number;
  /** OPTCHAT_RETENTION_SWEEP_SECONDS: how often the sweep runs. */
  readonly retentionSweepSeconds: number;
}

export interface RunningRetention {
  /** Runs one sweep now (tests, benchmarks); resolves to the number of view revisions deleted. */
  sweep(): Promise<number>;
  stop(): Promise<void>;
}

/** Revisions deleted per statement: a sweep after a long outage proceeds in bounded transactions. */
const REVISION_BATCH = 5000;

/**
 * A worker's retention duties (issue 9 item 8): sets the job queues' retention once (pg-boss's supervisor, which the
 * worker runs, deletes finished jobs past it every OPTCHAT_RETENTION_SWEEP_SECONDS), and deletes superseded,
 * unpinned view revisions on the same period. Runs in the background: a failure is reported and tried again at the
 * next period, never thrown into the host.
 */
export async function startRetention(
  pool: Pool,
  boss: PgBoss,
  settings: RetentionSettings,
  reportError: (error: string) => void,
): Promise<RunningRetention> {
  await applyJobRetention(boss, settings.jobRetentionSeconds);
  let running: Promise<number> | undefined;
  const sweep = async (): Promise<number> => {
    let deleted = 0;
    for (;;) {
      const n = await deleteSupersededRevisions(pool, {
        olderThanSeconds: settings.revisionRetentionSeconds,
        batch: REVISION_BATCH,
      });
      deleted += n;
      if (n < REVISION_BATCH) return deleted;
    }
  };
  const once = () => {
    running ??= sweep().finally(() => {
      running = undefined;
    });
    return running;
  };
  const timer = setInterval(() => {
    once().catch((error) => reportError(`retention sweep: ${(error as Error).message}`));
  }, settings.retentionSweepSeconds * 1000);
  timer.unref();
  return {
    sweep: once,
    async stop() {
      clearInterval(timer);
      await running?.catch(() => {});
    },
  };
}
