import { createSummarizer } from "../compactor/registry.js";
import { type RunningRetention, startRetention } from "../compactor/retention.js";
import type { Summarizer } from "../compactor/summarizer.js";
import { type CompactorEvent, type RunningCompactor, startCompactor } from "../compactor/worker.js";
import { OptchatError } from "../core/errors.js";
import { seesEverything } from "../store/team.js";
import { budgetSettingsOf, type Config, foldParamsOf, summarizerSettingsOf } from "./config.js";
import { prepareDatabase } from "./database.js";
import type { Memory } from "./service.js";

export type { CompactorEvent, RunningCompactor };
export { WORKER_RUNS_IN } from "../compactor/heartbeat.js";

export interface RunningWorker extends RunningCompactor {
  readonly retention: RunningRetention;
  /** The summarizer's identity, e.g. "anthropic:claude-haiku-4-5". */
  readonly summarizer: string;
}

export interface WorkerOverrides {
  readonly concurrency?: number;
  /**
   * The summarizer to use instead of the one the settings name: the plugin resolves OPTCHAT_SUMMARIZER=auto from
   * OpenCode's configuration (plugin/opencode/compactor-model.ts). Awaited before the worker starts taking jobs.
   */
  readonly summarizer?: () => Promise<Summarizer>;
  /**
   * Where the worker runs, for its heartbeat row and `optchat status` (WORKER_RUNS_IN in src/compactor/heartbeat.ts:
   * "optchat worker", "OpenCode process", "local server"); default "in-process worker".
   */
  readonly runsIn?: string;
}

/**
 * Starts a compactor worker on the memory service's pool, configured from the resolved settings, with its retention
 * duties (src/compactor/retention.ts). The summarizer comes from the settings (src/compactor/registry.ts; `auto` takes
 * the provider whose standard key is set) unless the caller brings one.
 */
/**
 * A team member's role cannot read other people's private sessions, so its worker would meet jobs it cannot do:
 * on a database with a team, workers run as the operator (docs/team.md "The compactor worker").
 */
async function requireOperator(memory: Memory): Promise<void> {
  const { role, all } = await seesEverything(memory.pool);
  if (!all)
    throw new OptchatError(
      "CONFIG_INVALID",
      `The compactor worker cannot run as "${role}": it is a member of this database's team and cannot read every session. Run the worker (optchat worker) with a DATABASE_URL of the operator role, and OPTCHAT_EMBEDDED_WORKER=off in members' OpenCode (docs/team.md).`,
    );
}

export async function startWorker(
  memory: Memory,
  configured: Config,
  report: (event: CompactorEvent) => void,
  overrides: WorkerOverrides = {},
): Promise<RunningWorker> {
  // The same database the memory service was opened on (a legacy default database included: database.ts).
  const config = await prepareDatabase(configured);
  await requireOperator(memory);
  const summarizer = await (overrides.summarizer?.() ?? createSummarizer(summarizerSettingsOf(config)));
  const compactor = await startCompactor(
    memory.pool,
    {
      databaseUrl: config.databaseUrl,
      concurrency: overrides.concurrency ?? config.workerConcurrency,
      fold: foldParamsOf(config),
      failureRetrySeconds: config.failureRetrySeconds,
      toolResults: config.compactorToolResults,
      retentionSweepSeconds: config.retentionSweepSeconds,
      budget: budgetSettingsOf(config),
      ...(overrides.runsIn !== undefined ? { runsIn: overrides.runsIn } : {}),
    },
    summarizer,
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
    summarizer: summarizer.identity,
    async stop(timeoutMs, options) {
      await retention.stop();
      await compactor.stop(timeoutMs, options);
    },
    pause: () => compactor.pause(),
    resume: () => compactor.resume(),
  };
}
