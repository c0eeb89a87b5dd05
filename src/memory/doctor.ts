/**
 * `optchat doctor`'s checks of what the memory service can see (issue 37 item 4): the database, whether a worker will
 * run, and the compactor model (resolves, answers one tiny real call within a timeout, has a price). The OpenCode side
 * (which config loads the plugin) is plugin/opencode/config-files.ts; the command puts them together.
 */
import { priceOf } from "../compactor/prices.js";
import type { Summarizer } from "../compactor/summarizer.js";
import { isAlive, WORKER_ALIVE_SECONDS } from "../core/health.js";
import { buildSummaryPrompt } from "../core/summary.js";
import { connectClient } from "../store/db.js";
import { heartbeatsInstalled, listWorkers } from "../store/health.js";
import { budgetSettingsOf, type Config, redactUrl } from "./config.js";
import { readStatusReport } from "./status.js";

/** One line of the doctor's report: passed, or what is wrong and what to do. */
export interface Check {
  readonly name: string;
  readonly ok: boolean;
  /** Not judged because an earlier check failed (that line says what to fix); not ok, not counted as failed. */
  readonly skipped?: boolean;
  readonly text: string;
  /** What to do, when not ok. */
  readonly fix?: string;
}

/** The database is reachable and migrated. */
export async function checkDatabase(config: Config): Promise<Check> {
  const report = await readStatusReport(config.databaseUrl, budgetSettingsOf(config));
  if (!report.setUp) {
    const reason = report.verdict.reasons[0];
    return { name: "database", ok: false, text: reason?.text ?? report.verdict.summary, fix: reason?.fix ?? "" };
  }
  return {
    name: "database",
    ok: true,
    text: `${redactUrl(config.databaseUrl)}: PostgreSQL ${report.status.serverVersion}, schema version ${report.status.schemaVersion} of ${report.status.expectedSchemaVersion}`,
  };
}

/**
 * A worker will run: OpenCode's embedded worker is on (`embedded`: where that was decided), or an `optchat worker`
 * is alive on the database now. `databaseOk` false: the workers cannot be read (said by the database check);
 * `pluginBroken`: OpenCode's config does not load the plugin (said by the opencode check). Either makes a missing
 * worker a skipped line rather than a second failure of the same cause.
 */
export async function checkWorker(
  config: Config,
  embedded: { readonly on: boolean; readonly source: string } | undefined,
  databaseOk: boolean,
  pluginBroken = false,
): Promise<Check> {
  let cli = 0;
  if (databaseOk) {
    const client = await connectClient(config.databaseUrl, "optchat-doctor");
    try {
      if (await heartbeatsInstalled(client)) {
        cli = (await listWorkers(client)).filter(
          (w) =>
            w.runsIn === "optchat worker" &&
            isAlive({ ...w, stopped: w.stoppedAt !== null, beatAgeSeconds: w.beatAgeSeconds }),
        ).length;
      }
    } finally {
      await client.end().catch(() => {});
    }
  }
  const workers = `${cli} \`optchat worker\` alive (heartbeat within ${WORKER_ALIVE_SECONDS} s)`;
  if (embedded?.on) {
    return { name: "worker", ok: true, text: `OpenCode's embedded worker is on (${embedded.source}); ${workers}` };
  }
  if (cli > 0) {
    return {
      name: "worker",
      ok: true,
      text: `${workers}${embedded ? `; OpenCode's embedded worker is off (${embedded.source})` : ""}`,
    };
  }
  if (!databaseOk || pluginBroken) {
    return {
      name: "worker",
      ok: false,
      skipped: true,
      text: !databaseOk
        ? "cannot see whether an `optchat worker` is alive until the database check passes"
        : "OpenCode runs no embedded worker until the opencode check passes, and no `optchat worker` is alive",
    };
  }
  return {
    name: "worker",
    ok: false,
    text: embedded
      ? `OpenCode's embedded worker is off (${embedded.source}) and no \`optchat worker\` is alive`
      : "no OpenCode config loads the plugin (so no embedded worker) and no `optchat worker` is alive",
    fix: embedded
      ? "start `optchat worker` (and keep it running), or remove that setting so OpenCode runs its own"
      : "add the plugin to opencode.json, or start `optchat worker`",
  };
}

/** How long the doctor's test call may take. */
export const DOCTOR_CALL_TIMEOUT_MS = 30_000;

/**
 * The compactor model: `resolve` builds it (from the settings, or from OpenCode's config with auto); then one tiny
 * real call, bounded by `timeoutMs`; then its price in the price table. Three checks; a model that does not resolve
 * fails the other two with it.
 */
export async function checkModel(
  config: Config,
  resolve: () => Promise<{ summarizer: Summarizer; from: string; fix?: string }>,
  timeoutMs = DOCTOR_CALL_TIMEOUT_MS,
): Promise<Check[]> {
  let resolved: { summarizer: Summarizer; from: string; fix?: string };
  try {
    resolved = await resolve();
  } catch (error) {
    return [
      {
        name: "model",
        ok: false,
        text: `the compactor model does not resolve: ${(error as Error).message}`,
        fix: "set a compactor model (OPTCHAT_SUMMARIZER and OPTCHAT_SUMMARIZER_MODEL, or small_model in opencode.json)",
      },
      { name: "answers", ok: false, skipped: true, text: "no model to call until the model check passes" },
      { name: "price", ok: false, skipped: true, text: "no model to price until the model check passes" },
    ];
  }
  const { summarizer, from } = resolved;
  const checks: Check[] = [
    {
      name: "model",
      ok: true,
      text: `${summarizer.identity} (${from})${summarizer.provider === "fake" ? "; the fake summarizer only trims text (tests and demos)" : ""}`,
    },
  ];
  checks.push(await answerCheck(resolved, timeoutMs), priceCheck(config, summarizer));
  return checks;
}

/** One tiny real call to the model, bounded by `timeoutMs`. */
async function answerCheck(
  { summarizer, fix }: { summarizer: Summarizer; fix?: string },
  timeoutMs: number,
): Promise<Check> {
  const started = Date.now();
  try {
    const prompt = buildSummaryPrompt([], {
      type: "compress",
      kind: "user",
      text: "optchat doctor checks that the compactor model answers: summarize this line.",
    });
    const answer = await summarizer.complete(prompt, { signal: AbortSignal.timeout(timeoutMs) });
    if (!answer.text.trim()) throw new Error(`an empty answer (finish reason ${answer.finishReason})`);
    return {
      name: "answers",
      ok: true,
      text: `answered in ${Date.now() - started} ms (${answer.usage.inputTokens} + ${answer.usage.outputTokens} tokens): ${JSON.stringify(answer.text.slice(0, 80))}`,
    };
  } catch (error) {
    const elapsed = Date.now() - started;
    return {
      name: "answers",
      ok: false,
      text: `${summarizer.identity} did not answer a test call${elapsed >= timeoutMs ? ` within ${timeoutMs} ms` : ""}: ${(error as Error).message}`,
      fix:
        fix ??
        "check the model's URL, name and key (OPTCHAT_SUMMARIZER_URL, OPTCHAT_SUMMARIZER_MODEL, OPTCHAT_SUMMARIZER_API_KEY or the provider's key) and that the server runs",
    };
  }
}

/** The model's price in the price table: without one, its spend cannot be held to the daily cap. */
function priceCheck(config: Config, summarizer: Summarizer): Check {
  const price = priceOf(budgetSettingsOf(config).prices, summarizer.provider, summarizer.model);
  return price
    ? {
        name: "price",
        ok: true,
        text: `${summarizer.provider}:${summarizer.model} costs $${price.input} input / $${price.output} output per million tokens; today's cap ${config.budgetDailyUsd > 0 ? `$${config.budgetDailyUsd}` : "none"} (OPTCHAT_BUDGET_DAILY_USD)`,
      }
    : {
        name: "price",
        ok: false,
        text: `no price for ${summarizer.provider}:${summarizer.model}: its spend cannot be held to OPTCHAT_BUDGET_DAILY_USD`,
        fix: `add it to OPTCHAT_PRICES, e.g. OPTCHAT_PRICES='{"${summarizer.provider}:${summarizer.model}":{"input":0.8,"output":4}}' (US dollars per million tokens; 0 for a local model)`,
      };
}
