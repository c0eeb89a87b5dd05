import {
  type CompactorEvent,
  type RunningCompactor,
  startCompactor,
  summarizerFromSetting,
} from "../compactor/worker.js";
import type { Config } from "./config.js";
import type { Memory } from "./service.js";

export type { CompactorEvent, RunningCompactor };

/** Starts a compactor worker on the memory service's pool, configured from the resolved settings. */
export async function startWorker(
  memory: Memory,
  config: Config,
  report: (event: CompactorEvent) => void,
  overrides: { concurrency?: number } = {},
): Promise<RunningCompactor> {
  return await startCompactor(
    memory.pool,
    {
      databaseUrl: config.databaseUrl,
      concurrency: overrides.concurrency ?? config.workerConcurrency,
      fold: { upperBytes: config.viewBytes, lowerBytes: config.viewLowerBytes },
      failureRetrySeconds: config.failureRetrySeconds,
    },
    summarizerFromSetting(config.summarizer, {
      url: config.summarizerUrl,
      model: config.summarizerModel,
      apiKey: config.summarizerApiKey,
    }),
    report,
  );
}
