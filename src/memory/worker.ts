import { type RunningRetention, startRetention } from "../compactor/retention.js";
import {
  type CompactorEvent,
  type RunningCompactor,
  startCompactor,
  summarizerFromSetting,
} from "../compactor/worker.js";
import type { Config } from "./config.js";
import type { Memory } from "./service.js";

export type { CompactorEvent, RunningCompactor };

export interface RunningWorker extends RunningCompactor {
  readonly retention: RunningRetention;
}

/**
 * Starts a compactor worker on the memory service's pool, configured from the resolved settings, with its retention
 * duties (src/compactor/retention.ts).
 */
export async function startWorker(
  memory: Memory,
  config: Config,
  report: (event: CompactorEvent) => void,
  overrides: { concurrency?: number } = {},
): Promise<RunningWorker> {
  const compactor = await startCompactor(
    memory.pool,
    {
      databaseUrl: config.databaseUrl,
      concurrency: overrides.concurrency ?? config.workerConcurrency,
      fold: { upperBytes: config.viewBytes, lowerBytes: config.viewLowerBytes },
      failureRetrySeconds: config.failureRetrySeconds,
      retentionSweepSeconds: config.retentionSweepSeconds,
    },
    summarizerFromSetting(config.summarizer, {
      url: config.summarizerUrl,
      model: config.summarizerModel,
      apiKey: config.summarizerApiKey,
    }),
    report,
  );
  let retention: RunningRetention;
  try {
    retention = await startRetention(memory.pool, compactor.boss, config, (error) => report({ type: "error", error }));
  } catch (error) {
    await compactor.stop(0).catch(() => {});
    throw error;
  }
  return {
    boss: compactor.boss,
    retention,
    async stop(timeoutMs) {
      await retention.stop();
      await compactor.stop(timeoutMs);
    },
  };
}
