/**
 * `npm run bench:embedded`: `bench embedded` (scripts/bench/embedded.ts) on its own, where no PostgreSQL server answers
 * (the `npm run bench` dispatcher needs one for its scratch databases). JSON lines on stdout, progress on stderr.
 */
import { cpus, loadavg } from "node:os";
import { runEmbeddedBench } from "./bench/embedded.js";

const controller = new AbortController();
process.on("SIGINT", () => controller.abort());
await runEmbeddedBench({
  serverUrl: "",
  signal: controller.signal,
  machine: { cpus: cpus().length, loadAverage1m: loadavg()[0] ?? 0 } as never,
});
