/**
 * `bench plugin`, case `run`: what the plugin adds to one `opencode run` invocation (issue 9 item 2: scripts and other
 * tools drive OpenCode this way, and each invocation starts and closes the plugin). RUNS rounds of `opencode run` with
 * one tool call each (a bash call, then the answer), with and without the plugin, against the same scripted model,
 * interleaved and in alternating order (A B, then B A) so the machine's drift hits both alike. Per run: wall time from
 * spawn to exit, CPU seconds of the process (GNU time, all threads), the time to its first model request, and the time
 * from the end of its last model request to exit; for the plugin's runs also the time OpenCode waited for the plugin's
 * hooks (chat.message, every request transform, chat.params and dispose, from OPTCHAT_TIMINGS_FILE: timed from
 * OpenCode's side by the bridge when the plugin runs in its own thread, by the hooks themselves in OpenCode's thread).
 *
 * The figure to quote is `addedS`, the median over rounds of (with - without) wall time, with its 95% confidence
 * interval (`addedSInterval95`, distribution-free); the target is <= 0.2 s with nothing lost, which the case checks
 * too (every run with the plugin must leave its turn completed with its four records: the prompt, the call, its result
 * and the answer). On a loaded machine the wall times spread by seconds: `addedCpuS` and `awaitedS` are steadier.
 * `addedCpuS` is OpenCode's process only; the plugin's work may run in another process (the optchat local server,
 * which `opencode run` uses by default) and in PostgreSQL, so `addedMachineCpuS` is the machine's CPU (every process,
 * from /proc/stat) over each run, with minus without: the whole cost wherever it runs. `firstRunS` is the warm-up run
 * with the plugin, the one that found no local server (it runs its own thread and starts the server). `servedRuns`
 * counts the rounds' runs the local server served (one that was not paid a thread's start), `pluginLoadMs` is the
 * median time OpenCode waited for the plugin's function and `pluginSideReadyMs` the time until its side (the server's
 * connection or its thread) was ready, which its hooks wait for (both from the timings file's `load` line).
 * `addedByPhaseS` splits the added time by phase (time to the first request, the tool step, the exit; each a paired
 * median with its interval), and `localServerCpuS` / `postgresCpuS` are the median CPU seconds the local server and
 * PostgreSQL spent during a run with the plugin: the work that runs beside OpenCode on the same cores.
 *
 * Each round also runs OpenCode with a plugin that returns no hooks (scripts/bench/empty-plugin.ts): OpenCode 1.18.33
 * charges a run for loading any plugin, so `emptyPluginAdded*` is that charge and `overEmptyPlugin*` (optchat minus the
 * empty plugin, paired by round, with its phases) is what optchat itself adds.
 *
 * With OPTCHAT_BENCH_PLUGIN_BASELINE (the plugin/index.ts of another checkout, e.g. an export of main), each round
 * also runs that plugin, on its own database, so before and after are measured in the same run: `baseline*` fields.
 * Environment:
 *   OPTCHAT_BENCH_PLUGIN_RUNS       rounds (default 15)
 *   OPTCHAT_BENCH_PLUGIN_BASELINE   path of another plugin entry module to compare (optional)
 */
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import type pg from "pg";
import type { ModelServer } from "../model-server.js";
import { type OpencodeEnv, runOpencode } from "../opencode-harness.js";
import { emit, envNumber, median, medianInterval, note, round } from "./common.js";

interface RunFigures {
  wallS: number;
  /** Phases of the run (one tool call: two model requests): spawn to the first request, the tool step between the
   * first request's end and the second's start, and the second request's end to exit. */
  phases: { toFirstRequestS: number; toolStepS: number; exitS: number } | null;
  /** CPU seconds over the run of the optchat local servers and of PostgreSQL (exited backends included). */
  serverCpuS: number | null;
  postgresCpuS: number | null;
  cpuS: number | null;
  /** Busy CPU seconds of the whole machine over the run (/proc/stat), null where there is none. */
  machineCpuS: number | null;
  toFirstRequestS: number | null;
  lastRequestToExitS: number | null;
  /** Seconds OpenCode waited for the plugin's hooks (null without a timings file). */
  awaitedS: number | null;
  /** The same by hook (chat.message, transform: every request's, dispose). */
  awaitedByOpS: Record<string, number> | null;
  /**
   * Where the plugin's work ran, how long OpenCode waited for the plugin's function, and how long its side took to be
   * ready (null without a timings file).
   */
  load: { side: string; waitedMs: number | null; readyMs: number } | null;
}

export interface BenchVariant {
  readonly env: OpencodeEnv;
  /** The plugin's OPTCHAT_TIMINGS_FILE, when it writes one. */
  readonly timings?: string;
}

const PROMPT = 'RUN-BENCH TOOLS=[{"name":"bash","args":{"command":"echo bench","description":"echo"}}] END';
/** The hooks OpenCode waits for, by the names the figures use. */
const AWAITED_OPS = new Set(["chat.message", "transform", "chat.params", "dispose"]);
/** The plugin in its own thread times them from OpenCode's side (plugin/transport/remote-hooks.ts, op "awaited"). */
const HOOK_OPS: Readonly<Record<string, string>> = {
  "chat.message": "chat.message",
  "experimental.chat.messages.transform": "transform",
  "chat.params": "chat.params",
  dispose: "dispose",
};

/**
 * Seconds OpenCode waited for each awaited hook in one run (summed over its calls), from the timings file: the
 * bridge's "awaited" lines when the plugin ran in its own thread (OpenCode's side, with the trips between the threads),
 * else the in-process plugin's own timings (plugin/host/hooks.ts, plugin/host/adapter.ts `recordTiming`; no chat.params).
 */
function awaitedByOp(timings: string | undefined): Record<string, number> | null {
  if (!timings || !existsSync(timings)) return null;
  const entries = readFileSync(timings, "utf8")
    .split("\n")
    .filter((line) => line.trim())
    .map((line) => JSON.parse(line) as { op: string; hook?: string; ms: number });
  const fromBridge = entries.some((entry) => entry.op === "awaited");
  const byOp: Record<string, number> = {};
  for (const entry of entries) {
    const op = fromBridge ? (entry.op === "awaited" ? HOOK_OPS[entry.hook ?? ""] : undefined) : entry.op;
    if (!op || !AWAITED_OPS.has(op)) continue;
    byOp[op] = (byOp[op] ?? 0) + entry.ms / 1000;
  }
  return Object.keys(byOp).length > 0 ? byOp : null;
}

/** The plugin's `load` line in the timings file (plugin/transport/remote-hooks.ts `recordLoad`), or null. */
function loadOf(timings: string | undefined): RunFigures["load"] {
  if (!timings || !existsSync(timings)) return null;
  for (const line of readFileSync(timings, "utf8").split("\n")) {
    if (!line.includes('"op":"load"')) continue;
    const entry = JSON.parse(line) as { side: string; waitedMs: number | null; readyMs: number };
    return { side: entry.side, waitedMs: entry.waitedMs, readyMs: entry.readyMs };
  }
  return null;
}

async function timedRun(variant: BenchVariant, model: ModelServer, marker: string): Promise<RunFigures> {
  if (variant.timings) rmSync(variant.timings, { force: true });
  const before = model.requests().length;
  const busyBefore = machineBusyS();
  const serverBefore = processCpuS(isLocalServer);
  const postgresBefore = processCpuS(isPostgres);
  const started = Date.now();
  const result = await runOpencode(variant.env, `${marker} ${PROMPT}`, {
    title: "bench",
    timeoutMs: 180_000,
    cpuTime: existsSync("/usr/bin/time"),
  });
  const ended = Date.now();
  const busyAfter = machineBusyS();
  const serverAfter = processCpuS(isLocalServer);
  const postgresAfter = processCpuS(isPostgres);
  if (result.code !== 0) throw new Error(`opencode run exited ${result.code}: ${result.stderr.slice(-2000)}`);
  const mine = model
    .requests()
    .slice(before)
    .filter((r) => r.kind === "main");
  const first = mine[0];
  const last = mine.at(-1);
  const endOf = (request: { at: string; replyMs: number }) => Date.parse(request.at) + request.replyMs;
  return {
    wallS: (ended - started) / 1000,
    phases:
      first && last && mine.length === 2
        ? {
            toFirstRequestS: (Date.parse(first.at) - started) / 1000,
            toolStepS: (Date.parse(last.at) - endOf(first)) / 1000,
            exitS: (ended - endOf(last)) / 1000,
          }
        : null,
    serverCpuS: serverBefore === null || serverAfter === null ? null : serverAfter - serverBefore,
    postgresCpuS: postgresBefore === null || postgresAfter === null ? null : postgresAfter - postgresBefore,
    cpuS: result.cpuS ?? null,
    machineCpuS: busyBefore === null || busyAfter === null ? null : busyAfter - busyBefore,
    toFirstRequestS: first ? (Date.parse(first.at) - started) / 1000 : null,
    lastRequestToExitS: last ? (ended - (Date.parse(last.at) + last.replyMs)) / 1000 : null,
    ...(() => {
      const byOp = awaitedByOp(variant.timings);
      return {
        awaitedS: byOp ? Object.values(byOp).reduce((sum, s) => sum + s, 0) : null,
        awaitedByOpS: byOp,
      };
    })(),
    load: loadOf(variant.timings),
  };
}

/** The server's process on either runtime: `local-server-entry.ts` under Bun, `local-server-node.mjs` under Node.js. */
const isLocalServer = (command: string) => /plugin\/local-server-(entry\.ts|node\.mjs)/.test(command);
const isPostgres = (command: string) => command.startsWith("postgres") || command.includes("/bin/postgres");

/**
 * CPU seconds (user + system) of the processes whose command line matches, from /proc; with their reaped children's,
 * so that PostgreSQL backends that ended during the run (a pool's connections closed) still count, through the
 * postmaster. A server that started during the run counts from its start. Null where there is no /proc.
 */
function processCpuS(matches: (command: string) => boolean): number | null {
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((name) => /^\d+$/.test(name));
  } catch {
    return null;
  }
  let ticks = 0;
  for (const pid of pids) {
    try {
      if (!matches(readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " "))) continue;
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      // After the command's closing parenthesis: utime, stime, cutime, cstime (proc(5) fields 14-17) at 11-14.
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      ticks += [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i] ?? 0), 0);
    } catch {
      // The process ended meanwhile.
    }
  }
  return ticks / 100;
}

/** The machine's busy CPU seconds since boot (/proc/stat: all but idle and iowait, in USER_HZ = 100 ticks). */
function machineBusyS(): number | null {
  try {
    const fields = (readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "").trim().split(/\s+/).slice(1).map(Number);
    const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = fields;
    return (user + nice + system + irq + softirq + steal) / 100;
  } catch {
    return null;
  }
}

function medianOf(
  runs: readonly RunFigures[],
  key: Exclude<keyof RunFigures, "awaitedByOpS" | "phases" | "load">,
): number | null {
  const m = median(runs.flatMap((run) => (run[key] === null ? [] : [run[key] as number])));
  return m === null ? null : round(m);
}

/** Each round's (a - b) of the figure `read` gives, pairing the round's runs; a round missing it is left out. */
function pairedDifferences(
  a: readonly RunFigures[],
  b: readonly RunFigures[],
  read: (run: RunFigures) => number | null | undefined,
): number[] {
  return a.flatMap((run, i) => {
    const x = read(run);
    const other = b[i];
    const y = other ? read(other) : undefined;
    return x === null || x === undefined || y === null || y === undefined ? [] : [x - y];
  });
}

/** Median over rounds of (a - b) for `key`, pairing each round's runs. */
function medianAdded(
  a: readonly RunFigures[],
  b: readonly RunFigures[],
  key: "wallS" | "cpuS" | "machineCpuS",
): number | null {
  const m = median(pairedDifferences(a, b, (run) => run[key]));
  return m === null ? null : round(m);
}

/** The 95% confidence interval of the differences' median (common.ts medianInterval), rounded; null under 6 rounds. */
function roundedInterval(differences: readonly number[]): [number, number] | null {
  const interval = medianInterval(differences);
  return interval ? [round(interval[0]), round(interval[1])] : null;
}

/**
 * Each phase's median added time over rounds (paired), with its 95% interval: the time to the first request carries
 * most of the spread (OpenCode's own start varies by ±0.5 s from run to run), the tool step and the exit little, so
 * these say where the plugin's time goes more precisely than the whole run's difference does.
 */
function addedByPhase(a: readonly RunFigures[], b: readonly RunFigures[]) {
  const phases = ["toFirstRequestS", "toolStepS", "exitS"] as const;
  return Object.fromEntries(
    phases.map((phase) => {
      const differences = pairedDifferences(a, b, (run) => run.phases?.[phase]);
      const m = median(differences);
      return [phase, { median: m === null ? null : round(m), interval95: roundedInterval(differences) }];
    }),
  );
}

/**
 * The 95% confidence interval of the added wall time's median: the target is met reliably when its upper end is within
 * it, and two variants differ when their intervals do not overlap.
 */
function addedInterval(a: readonly RunFigures[], b: readonly RunFigures[]): [number, number] | null {
  return roundedInterval(pairedDifferences(a, b, (run) => run.wallS));
}

/** Markers of the plugin's runs whose turn is not completed with its four records (nothing may be lost for speed). */
async function incompleteRuns(db: pg.Pool, markers: readonly string[]): Promise<string[]> {
  const turns = await db.query<{ marker: string | null; state: string; n: number }>(
    `SELECT t.state, substring(convert_from(b.content, 'UTF8') FROM '^(\\S+) RUN-BENCH') AS marker,
            (SELECT count(*)::int FROM optchat.records x WHERE x.session_id = t.session_id AND x.turn_id = t.turn_id) AS n
       FROM optchat.turns t
       JOIN optchat.records r ON r.session_id = t.session_id AND r.turn_id = t.turn_id AND r.kind = 'user'
       JOIN optchat.blobs b ON b.hash = r.payload_hash`,
  );
  const complete = new Set(turns.rows.filter((t) => t.state === "completed" && t.n === 4).map((t) => t.marker));
  return markers.filter((marker) => !complete.has(marker));
}

export async function runPluginRunBench(
  withPlugin: BenchVariant,
  without: BenchVariant,
  model: ModelServer,
  db: pg.Pool,
  signal: AbortSignal,
  { baseline, emptyPlugin }: { baseline?: BenchVariant; emptyPlugin?: BenchVariant } = {},
): Promise<void> {
  const rounds = envNumber("OPTCHAT_BENCH_PLUGIN_RUNS", 15, { min: 1, integer: true });
  // One warm-up each: the first run of a fresh environment creates OpenCode's SQLite database.
  const firstRun = await timedRun(withPlugin, model, "WARM-A");
  await timedRun(without, model, "WARM-B");
  if (baseline) await timedRun(baseline, model, "WARM-C");
  if (emptyPlugin) await timedRun(emptyPlugin, model, "WARM-E");
  const a: RunFigures[] = [];
  const b: RunFigures[] = [];
  const c: RunFigures[] = [];
  const e: RunFigures[] = [];
  for (let i = 0; i < rounds && !signal.aborted; i++) {
    const order: [BenchVariant, RunFigures[], string][] = [
      [withPlugin, a, `RUN-A${i}`],
      [without, b, `RUN-B${i}`],
      ...(baseline ? [[baseline, c, `RUN-C${i}`] as [BenchVariant, RunFigures[], string]] : []),
      ...(emptyPlugin ? [[emptyPlugin, e, `RUN-E${i}`] as [BenchVariant, RunFigures[], string]] : []),
    ];
    if (i % 2 === 1) order.reverse();
    for (const [variant, into, marker] of order) into.push(await timedRun(variant, model, marker));
    note(
      `plugin run: round ${i + 1}/${rounds}: ${round(a[i]?.wallS ?? 0)} s with, ${round(b[i]?.wallS ?? 0)} s without${baseline ? `, ${round(c[i]?.wallS ?? 0)} s with the baseline plugin` : ""}${emptyPlugin ? `, ${round(e[i]?.wallS ?? 0)} s with the empty plugin` : ""}`,
    );
  }
  const missing = await incompleteRuns(db, ["WARM-A", ...a.map((_, i) => `RUN-A${i}`)]);
  emit("plugin", "run", {
    rounds: a.length,
    withPluginS: a.map((run) => round(run.wallS)),
    withoutPluginS: b.map((run) => round(run.wallS)),
    addedS: medianAdded(a, b, "wallS"),
    addedSInterval95: addedInterval(a, b),
    addedCpuS: medianAdded(a, b, "cpuS"),
    addedMachineCpuS: medianAdded(a, b, "machineCpuS"),
    addedByPhaseS: addedByPhase(a, b),
    localServerCpuS: medianOf(a, "serverCpuS"),
    postgresCpuS: medianOf(a, "postgresCpuS"),
    firstRunS: round(firstRun.wallS),
    awaitedS: medianOf(a, "awaitedS"),
    awaitedMedianByOpS: Object.fromEntries(
      [...AWAITED_OPS].map((op) => [
        op,
        round(median(a.flatMap((run) => (run.awaitedByOpS?.[op] === undefined ? [] : [run.awaitedByOpS[op]]))) ?? 0),
      ]),
    ),
    // Runs the local server served (the rest paid a thread's start), how long OpenCode waited for the plugin's
    // function, and how long its side took to be ready (the hooks wait for it, plugin/transport/deferred-hooks.ts).
    servedRuns: `${a.filter((run) => run.load?.side === "local server").length}/${a.length}`,
    pluginLoadMs: round(median(a.flatMap((run) => (run.load?.waitedMs != null ? [run.load.waitedMs] : []))) ?? 0),
    pluginSideReadyMs: round(median(a.flatMap((run) => (run.load ? [run.load.readyMs] : []))) ?? 0),
    withPluginMedianS: medianOf(a, "wallS"),
    withoutPluginMedianS: medianOf(b, "wallS"),
    toFirstRequestS: { with: medianOf(a, "toFirstRequestS"), without: medianOf(b, "toFirstRequestS") },
    lastRequestToExitS: { with: medianOf(a, "lastRequestToExitS"), without: medianOf(b, "lastRequestToExitS") },
    ...(baseline
      ? {
          baselinePluginS: c.map((run) => round(run.wallS)),
          baselineAddedS: medianAdded(c, b, "wallS"),
          baselineAddedSInterval95: addedInterval(c, b),
          baselineAddedCpuS: medianAdded(c, b, "cpuS"),
          baselineAddedMachineCpuS: medianAdded(c, b, "machineCpuS"),
          baselineToFirstRequestS: medianOf(c, "toFirstRequestS"),
          baselineLastRequestToExitS: medianOf(c, "lastRequestToExitS"),
        }
      : {}),
    ...(emptyPlugin
      ? {
          // OpenCode's own charge for loading any plugin, and what optchat adds beyond it (paired by round).
          emptyPluginAddedS: medianAdded(e, b, "wallS"),
          emptyPluginAddedSInterval95: addedInterval(e, b),
          emptyPluginAddedByPhaseS: addedByPhase(e, b),
          overEmptyPluginS: medianAdded(a, e, "wallS"),
          overEmptyPluginSInterval95: addedInterval(a, e),
          overEmptyPluginByPhaseS: addedByPhase(a, e),
          overEmptyPluginCpuS: medianAdded(a, e, "cpuS"),
        }
      : {}),
    runsWithTurnCompleteAndFourRecords: `${a.length + 1 - missing.length}/${a.length + 1}`,
    ...(missing.length > 0 ? { missing } : {}),
    targetAddedS: 0.2,
  });
}
