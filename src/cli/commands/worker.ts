import { summarizerProblems } from "../../compactor/registry.js";
import { OptchatError } from "../../core/errors.js";
import { type Config, summarizerSettingsOf } from "../../memory/config.js";
import { openMemory } from "../../memory/service.js";
import { startWorker, WORKER_RUNS_IN } from "../../memory/worker.js";
import { type Command, integerFlag, type Output, parseCommand } from "../command.js";

const usage = "optchat worker [--concurrency N] [--summarizer NAME] [--model NAME] [--url URL] [--quiet] [--json]";

export const workerCommand: Command = {
  name: "worker",
  usage: [usage],
  summary: "run a compactor worker until SIGTERM/SIGINT (finishes running jobs)",
  details:
    "--summarizer, --model and --url override OPTCHAT_SUMMARIZER, OPTCHAT_SUMMARIZER_MODEL and OPTCHAT_SUMMARIZER_URL. " +
    "With the default (auto) the worker uses Anthropic when ANTHROPIC_API_KEY is set, else OpenAI when OPENAI_API_KEY " +
    "is set, each with its cheap default model; otherwise it refuses to start and says what to set. " +
    "Each finished job is one line on stderr (built=<ref> tree=<id>, with its model calls); --quiet prints only " +
    "the start, failures, the budget and the stop.",
  async run(args, ctx) {
    const { values } = parseCommand(
      args,
      {
        concurrency: { type: "string" },
        summarizer: { type: "string" },
        model: { type: "string" },
        url: { type: "string" },
        quiet: { type: "boolean" },
      },
      0,
      usage,
    );
    const { output } = ctx;
    const config = withSummarizerFlags(ctx.config, values, usage);
    const concurrency = integerFlag(values.concurrency, "concurrency", 1, 64) ?? config.workerConcurrency;
    // Not withMemory: the worker keeps memory open until a signal, then stops the jobs before closing it.
    const memory = await openMemory(config, { applicationName: "optchat-worker" });
    const print = workerEventPrinter(output);
    const worker = await startWorker(
      memory,
      config,
      (event) => {
        // One line per finished job is the sign of progress a person watches for (issue 40 item 10); the start of each
        // is noise in text. --quiet keeps only what needs attention.
        if (output.json) print({ ...event });
        else if (event.type === "summarizing") return;
        else if (event.type !== "built" || values.quiet !== true) print({ ...event });
      },
      { concurrency, runsIn: WORKER_RUNS_IN.cli },
    );
    print({ type: "ready", pid: process.pid, concurrency, summarizer: worker.summarizer });
    await new Promise<void>((resolve) => {
      process.once("SIGTERM", resolve);
      process.once("SIGINT", resolve);
    });
    print({ type: "stopping" });
    await worker.stop(30_000);
    await memory.close();
    print({ type: "stopped" });
    return 0;
  },
};

/** The settings with the command's summarizer flags applied, checked like the environment's (worker, rebuild). */
export function withSummarizerFlags(
  config: Config,
  flags: { summarizer?: string; model?: string; url?: string },
  usage: string,
): Config {
  if (flags.summarizer === undefined && flags.model === undefined && flags.url === undefined) return config;
  const next: Config = Object.freeze({
    ...config,
    ...(flags.summarizer !== undefined ? { summarizer: flags.summarizer } : {}),
    ...(flags.model !== undefined ? { summarizerModel: flags.model } : {}),
    ...(flags.url !== undefined ? { summarizerUrl: flags.url.replace(/\/+$/, "") } : {}),
  });
  const problems = summarizerProblems(summarizerSettingsOf(next));
  if (problems.length > 0)
    throw new OptchatError("INPUT_INVALID", `${usage.split(" [")[0]}: ${problems.join("; ")}\nUsage: ${usage}`);
  return next;
}

/** Worker events as JSON lines on stdout (--json) or `key=value` lines on stderr. */
function workerEventPrinter(output: Output): (event: Record<string, unknown>) => void {
  return (event) => {
    if (output.json) output.out(JSON.stringify({ at: new Date().toISOString(), ...event }));
    else
      output.err(
        `[optchat worker] ${Object.entries(event)
          .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
          .join(" ")}`,
      );
  };
}
