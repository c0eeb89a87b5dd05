/**
 * `bench plugin`, case `run`: what the plugin adds to one `opencode run` invocation (issue 9 item 2: scripts and other
 * tools drive OpenCode this way, and each invocation starts and closes the plugin). RUNS pairs of `opencode run` with
 * one tool call each (a bash call, then the answer), with and without the plugin, interleaved A B A B so the machine's
 * drift hits both alike; the same scripted model answers both. Per run: wall time from spawn to exit, the time to its
 * first model request, and the time from the end of its last model request to exit. The figure to quote is `addedS`,
 * the median over pairs of (with - without); the target is <= 0.2 s with nothing lost, which the case checks too (every
 * run with the plugin must leave its turn completed with its four records).
 * With OPTCHAT_BENCH_PLUGIN_BASELINE (the plugin/index.ts of another checkout, e.g. `git worktree add /tmp/before
 * <commit>`), a third run in each round loads that plugin instead, on its own database, so a before/after comparison
 * is made in one run: `baselineAddedS` next to `addedS`.
 * Environment:
 *   OPTCHAT_BENCH_PLUGIN_RUNS       rounds (default 5)
 *   OPTCHAT_BENCH_PLUGIN_BASELINE   path of another plugin entry module to compare (optional)
 */
import type pg from "pg";
import type { ModelServer } from "../model-server.js";
import { type OpencodeEnv, runOpencode } from "../opencode-harness.js";
import { emit, envNumber, note, ratio, round } from "./common.js";

interface RunFigures {
  wallS: number;
  toFirstRequestS: number | null;
  lastRequestToExitS: number | null;
}

const PROMPT = 'RUN-BENCH TOOLS=[{"name":"bash","args":{"command":"echo bench","description":"echo"}}] END';

async function timedRun(env: OpencodeEnv, model: ModelServer, marker: string): Promise<RunFigures> {
  const before = model.requests().length;
  const started = Date.now();
  const result = await runOpencode(env, `${marker} ${PROMPT}`, { title: "bench", timeoutMs: 180_000 });
  const ended = Date.now();
  if (result.code !== 0) throw new Error(`opencode run exited ${result.code}: ${result.stderr.slice(-2000)}`);
  const mine = model
    .requests()
    .slice(before)
    .filter((r) => r.kind === "main");
  const first = mine[0];
  const last = mine.at(-1);
  return {
    wallS: (ended - started) / 1000,
    toFirstRequestS: first ? (Date.parse(first.at) - started) / 1000 : null,
    lastRequestToExitS: last ? (ended - (Date.parse(last.at) + last.replyMs)) / 1000 : null,
  };
}

function median(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

function medianOf(runs: readonly RunFigures[], key: keyof RunFigures): number | null {
  const values = runs.flatMap((run) => (run[key] === null ? [] : [run[key] as number]));
  const m = median(values);
  return m === null ? null : round(m);
}

export async function runPluginRunBench(
  withPlugin: OpencodeEnv,
  without: OpencodeEnv,
  model: ModelServer,
  db: pg.Pool,
  signal: AbortSignal,
  baseline?: OpencodeEnv,
): Promise<void> {
  const pairs = envNumber("OPTCHAT_BENCH_PLUGIN_RUNS", 5, { min: 1, integer: true });
  // One warm-up each: the first run of a fresh environment creates OpenCode's SQLite database.
  await timedRun(withPlugin, model, "WARM-A");
  await timedRun(without, model, "WARM-B");
  if (baseline) await timedRun(baseline, model, "WARM-C");
  const a: RunFigures[] = [];
  const b: RunFigures[] = [];
  const c: RunFigures[] = [];
  for (let i = 0; i < pairs && !signal.aborted; i++) {
    a.push(await timedRun(withPlugin, model, `RUN-A${i}`));
    b.push(await timedRun(without, model, `RUN-B${i}`));
    if (baseline) c.push(await timedRun(baseline, model, `RUN-C${i}`));
    note(
      `plugin run: round ${i + 1}/${pairs}: ${round(a[i]?.wallS ?? 0)} s with, ${round(b[i]?.wallS ?? 0)} s without${baseline ? `, ${round(c[i]?.wallS ?? 0)} s with the baseline plugin` : ""}`,
    );
  }
  // Nothing lost for speed: every run's turn (warm-up included) completed, with its user, call, result and answer.
  const turns = await db.query<{ marker: string | null; state: string; n: number }>(
    `SELECT t.state, substring(convert_from(b.content, 'UTF8') FROM '^(S+) RUN-BENCH') AS marker,
            (SELECT count(*)::int FROM optchat.records x WHERE x.session_id = t.session_id AND x.turn_id = t.turn_id) AS n
       FROM optchat.turns t
       LEFT JOIN optchat.records r ON r.session_id = t.session_id AND r.turn_id = t.turn_id AND r.kind = 'user'
       LEFT JOIN optchat.blobs b ON b.hash = r.payload_hash`,
  );
  const complete = new Set(turns.rows.filter((t) => t.state === "completed" && t.n === 4).map((t) => t.marker));
  const incomplete = ["WARM-A", ...a.map((_, i) => `RUN-A${i}`)].filter((marker) => !complete.has(marker));
  const added = a.map((run, i) => run.wallS - (b[i]?.wallS ?? run.wallS));
  const baselineAdded = c.map((run, i) => run.wallS - (b[i]?.wallS ?? run.wallS));
  emit("plugin", "run", {
    pairs: a.length,
    withPluginS: a.map((run) => round(run.wallS)),
    withoutPluginS: b.map((run) => round(run.wallS)),
    withPluginMedianS: medianOf(a, "wallS"),
    withoutPluginMedianS: medianOf(b, "wallS"),
    addedS: round(median(added) ?? 0),
    ratio: ratio(medianOf(a, "wallS"), medianOf(b, "wallS")),
    toFirstRequestS: { with: medianOf(a, "toFirstRequestS"), without: medianOf(b, "toFirstRequestS") },
    lastRequestToExitS: { with: medianOf(a, "lastRequestToExitS"), without: medianOf(b, "lastRequestToExitS") },
    ...(baseline
      ? {
          baselinePluginS: c.map((run) => round(run.wallS)),
          baselineAddedS: round(median(baselineAdded) ?? 0),
          baselineRatio: ratio(medianOf(c, "wallS"), medianOf(b, "wallS")),
          baselineToFirstRequestS: medianOf(c, "toFirstRequestS"),
          baselineLastRequestToExitS: medianOf(c, "lastRequestToExitS"),
        }
      : {}),
    runsWithTurnCompleteAndFourRecords: `${a.length + 1 - incomplete.length}/${a.length + 1}`,
    ...(incomplete.length > 0
      ? { incomplete: turns.rows.map((t) => `${t.marker}:${t.state}:${t.n}`), missing: incomplete }
      : {}),
    targetAddedS: 0.2,
  });
}
