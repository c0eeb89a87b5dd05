import { openMemory } from "../../memory/service.js";
import { startWorker } from "../../memory/worker.js";
import { type Command, integerFlag, type Output, parseCommand } from "../command.js";

const usage = "optchat worker [--concurrency N] [--json]";

export const workerCommand: Command = {
  name: "worker",
  usage: [usage],
  summary: "run a compactor worker until SIGTERM/SIGINT (finishes running jobs)",
  async run(args, { config, output }) {
    const { values } = parseCommand(args, { concurrency: { type: "string" } }, 0, usage);
    const concurrency = integerFlag(values.concurrency, "concurrency", 1, 64) ?? config.workerConcurrency;
    // Not withMemory: the worker keeps memory open until a signal, then stops the jobs before closing it.
    const memory = await openMemory(config, { applicationName: "optchat-worker" });
    const print = workerEventPrinter(output);
    const worker = await startWorker(
      memory,
      config,
      (event) => {
        // Built and started nodes are routine: printed only in --json mode, where a program reads them.
        if ((event.type !== "built" && event.type !== "summarizing") || output.json) print({ ...event });
      },
      { concurrency },
    );
    print({ type: "ready", pid: process.pid, concurrency, summarizer: config.summarizer });
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
