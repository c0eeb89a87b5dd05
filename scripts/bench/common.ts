/**
 * Shared plumbing for `scripts/bench.ts` and its benchmark modules: JSON-lines output, settings from the environment,
 * scratch databases, machine facts and latency statistics.
 *
 * Output contract: every result is one JSON object on one line of stdout, with `bench` (the module) and `case`;
 * progress and notes go to stderr, so `npm run bench -- ingest > results.jsonl` keeps only results.
 */
import { cpus, loadavg, totalmem } from "node:os";
import pg from "pg";
import { type Config, redactUrl } from "../../src/memory/config.js";
import { migrateAll } from "../../src/memory/migrate.js";
import type { IngestEvent } from "../../src/memory/schemas.js";
import { type Memory, openMemory } from "../../src/memory/service.js";
import type { CompactorEvent } from "../../src/memory/worker.js";

/** Everything a benchmark module gets from the dispatcher. */
export interface BenchContext {
  /** A URL of the server's `postgres` maintenance database; scratch databases are made next to it. */
  readonly serverUrl: string;
  /** Aborted on SIGINT/SIGTERM: stop measuring and clean up. */
  readonly signal: AbortSignal;
  readonly machine: MachineFacts;
}

export type BenchFunction = (context: BenchContext) => Promise<void>;

export interface BenchModule {
  readonly description: string;
  readonly run: BenchFunction;
}

export function emit(bench: string, caseName: string, fields: Record<string, unknown> = {}): void {
  process.stdout.write(`${JSON.stringify({ bench, case: caseName, ...fields })}\n`);
}

export function note(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

/** A number from the environment, or `fallback` when unset or empty; exits with a clear message when invalid. */
export function envNumber(name: string, fallback: number, { min = 0, integer = false } = {}): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === "") return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < min || (integer && !Number.isInteger(value))) {
    throw new Error(
      `${name}=${JSON.stringify(raw)} is invalid: expected ${integer ? "an integer" : "a number"} >= ${min}`,
    );
  }
  return value;
}

/** `url` with its database replaced (the tests and the benchmarks make their scratch databases with it). */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${encodeURIComponent(database)}`;
  return parsed.toString();
}

/** DATABASE_URL with its database replaced by `postgres`, else the local default server. */
export function serverUrlFromEnv(): string {
  const fromEnv = process.env.DATABASE_URL;
  return withDatabase(fromEnv && fromEnv !== "" ? fromEnv : "postgres://postgres@127.0.0.1:5432/postgres", "postgres");
}

export function scratchDatabaseName(suffix?: string): string {
  return `optchat_bench_${process.pid}${suffix ? `_${suffix}` : ""}`;
}

/** Runs one statement on the maintenance database over a short-lived connection. */
export async function adminQuery(serverUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl, application_name: "optchat-bench" });
  client.on("error", () => {});
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end().catch(() => {});
  }
}

export async function createDatabase(serverUrl: string, name: string): Promise<void> {
  await adminQuery(serverUrl, `CREATE DATABASE ${pg.escapeIdentifier(name)}`);
}

export async function dropDatabase(serverUrl: string, name: string): Promise<void> {
  await adminQuery(serverUrl, `DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
}

/** A scratch database of this run on the bench server. */
export interface ScratchDatabase {
  readonly name: string;
  readonly url: string;
}

/**
 * Runs `body` on a new, empty scratch database (`optchat_bench_<pid>_<suffix>`; a leftover of that name is dropped
 * first) and drops it afterwards whatever happens. A failed drop is noted, not thrown, so that it cannot hide the
 * body's own error.
 */
export async function withScratchDatabase<T>(
  serverUrl: string,
  suffix: string | undefined,
  body: (database: ScratchDatabase) => Promise<T>,
): Promise<T> {
  const name = scratchDatabaseName(suffix);
  await dropDatabase(serverUrl, name);
  await createDatabase(serverUrl, name);
  try {
    return await body({ name, url: withDatabase(serverUrl, name) });
  } finally {
    await dropDatabase(serverUrl, name).catch((error) => note(`could not drop ${name}: ${errorMessage(error)}`));
  }
}

/**
 * Runs `body` on the memory service over a migrated scratch database (see `withScratchDatabase`), opened with the
 * config `configFor` gives for the database's URL; the memory is closed and the database dropped afterwards.
 * `label` is the database's suffix and the prefix of the progress notes.
 */
export async function withScratchMemory<T>(
  serverUrl: string,
  label: string,
  configFor: (databaseUrl: string) => Config,
  body: (memory: Memory, config: Config, database: ScratchDatabase) => Promise<T>,
): Promise<T> {
  return await withScratchDatabase(serverUrl, label, async (database) => {
    const migrated = await migrateAll(database.url);
    note(`${label}: scratch database ${database.name} at schema version ${migrated.schemaVersion}`);
    const config = configFor(database.url);
    const memory = await openMemory(config, { applicationName: "optchat-bench" });
    try {
      return await body(memory, config, database);
    } finally {
      await memory.close().catch((error) => note(`${label}: could not close memory: ${errorMessage(error)}`));
    }
  });
}

/** Best effort: flush dirty buffers so one case's writes are not paid for by the next one (needs superuser). */
export async function checkpoint(serverUrl: string): Promise<boolean> {
  try {
    await adminQuery(serverUrl, "CHECKPOINT");
    return true;
  } catch {
    return false;
  }
}

export interface MachineFacts {
  readonly cpus: number;
  readonly cpuModel: string;
  readonly memoryGiB: number;
  readonly loadAverage1m: number;
  readonly node: string;
  readonly platform: string;
  readonly server: string;
  readonly postgres: string;
  readonly postgresSettings: Readonly<Record<string, string>>;
}

const REPORTED_SETTINGS = ["fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "max_connections"];

export async function readMachineFacts(serverUrl: string): Promise<MachineFacts> {
  const client = new pg.Client({ connectionString: serverUrl, application_name: "optchat-bench" });
  client.on("error", () => {});
  await client.connect();
  try {
    const version = await client.query<{ server_version: string }>("SHOW server_version");
    const settings = await client.query<{ name: string; setting: string; unit: string | null }>(
      "SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1::text[]) ORDER BY name",
      [REPORTED_SETTINGS],
    );
    const list = cpus();
    return {
      cpus: list.length,
      cpuModel: list[0]?.model.trim() ?? "unknown",
      memoryGiB: round(totalmem() / 2 ** 30, 1),
      loadAverage1m: round(loadavg()[0] ?? 0, 2),
      node: process.version,
      platform: `${process.platform}-${process.arch}`,
      server: redactUrl(serverUrl),
      postgres: version.rows[0]?.server_version ?? "unknown",
      postgresSettings: Object.fromEntries(
        settings.rows.map((row) => [row.name, row.unit ? `${row.setting} (${row.unit})` : row.setting]),
      ),
    };
  } finally {
    await client.end().catch(() => {});
  }
}

/** The median (the mean of the middle two for an even count), or null for no values. */
export function median(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

export interface MicroSummary {
  readonly p50Us: number | null;
  readonly p99Us: number | null;
  readonly meanUs: number | null;
  readonly maxUs: number | null;
}

/** Nearest-rank percentiles of durations in milliseconds, reported in microseconds. */
export function summarizeMicros(durationsMs: Float64Array): MicroSummary {
  if (durationsMs.length === 0) return { p50Us: null, p99Us: null, meanUs: null, maxUs: null };
  const sorted = Float64Array.from(durationsMs).sort();
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? 0;
  let sum = 0;
  for (const value of sorted) sum += value;
  return {
    p50Us: round(at(0.5) * 1000, 2),
    p99Us: round(at(0.99) * 1000, 2),
    meanUs: round((sum / sorted.length) * 1000, 2),
    maxUs: round((sorted[sorted.length - 1] ?? 0) * 1000, 2),
  };
}

/** The nearest-rank `p` percentile of `values` (0 for none). */
export function nearestRank(values: Float64Array, p: number): number {
  if (values.length === 0) return 0;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? 0;
}

/** The mean of `values[from..to)` (0 for an empty range). */
export function mean(values: Float64Array, from = 0, to = values.length): number {
  if (to <= from) return 0;
  let sum = 0;
  for (let k = from; k < to; k++) sum += values[k] as number;
  return sum / (to - from);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * A distribution-free confidence interval for the median of `values` (paired differences, say): the order statistics
 * x(k) and x(n+1-k), with the largest k whose binomial(n, 1/2) tail keeps the coverage at least `confidence`. Exact for
 * any continuous distribution, no resampling; null when n is too small for that coverage (n < 6 at 95%).
 */
export function medianInterval(values: readonly number[], confidence = 0.95): [number, number] | null {
  const n = values.length;
  const sorted = [...values].sort((a, b) => a - b);
  // P(B <= j) for B ~ binomial(n, 1/2), accumulated term by term.
  let term = 0.5 ** n;
  let tail = term;
  let k = 0;
  for (let j = 0; j < n; j++) {
    // The interval [x(j+1), x(n-j)] misses the median with probability 2 * P(B <= j).
    if (2 * tail > 1 - confidence) break;
    k = j + 1;
    term = (term * (n - j)) / (j + 1);
    tail += term;
  }
  if (k === 0) return null;
  return [sorted[k - 1] as number, sorted[n - k] as number];
}

export function round(value: number, digits = 3): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}

export interface LatencySummary {
  readonly p50Ms: number | null;
  readonly p99Ms: number | null;
  readonly meanMs: number | null;
  readonly maxMs: number | null;
}

/** Nearest-rank percentiles of latencies in milliseconds. */
export function summarizeLatencies(latencies: readonly number[]): LatencySummary {
  if (latencies.length === 0) return { p50Ms: null, p99Ms: null, meanMs: null, maxMs: null };
  const sorted = Float64Array.from(latencies).sort();
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? 0;
  const sum = sorted.reduce((total, value) => total + value, 0);
  return {
    p50Ms: round(at(0.5)),
    p99Ms: round(at(0.99)),
    meanMs: round(sum / sorted.length),
    maxMs: round(sorted[sorted.length - 1] ?? 0),
  };
}

/** Divides, or null when either side is missing (e.g. pgbench skipped). */
export function ratio(numerator: number | null | undefined, denominator: number | null | undefined): number | null {
  if (numerator == null || denominator == null || denominator === 0) return null;
  return round(numerator / denominator);
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Counts compactor events; keeps the first error or failure for the report. */
export function compactorRecorder(): {
  report: (event: CompactorEvent) => void;
  events: Record<string, number>;
  first: () => string | undefined;
} {
  const events: Record<string, number> = { built: 0, lease_lost: 0, failure: 0, error: 0 };
  let first: string | undefined;
  return {
    events,
    first: () => first,
    report(event) {
      events[event.type] = (events[event.type] ?? 0) + 1;
      if (event.type === "error" || event.type === "failure") first ??= `${event.type}: ${event.error}`;
    },
  };
}

/** A message of a bench's synthetic conversation, before it is an ingest event. */
export interface SyntheticRecord {
  readonly kind: "user" | "assistant" | "tool_call" | "tool_result";
  readonly content: string;
  readonly toolCallId?: string;
  readonly toolName?: string;
}

/** The ingest event of `session`'s n-th synthetic message: message `m<n>`, n seconds after 2026-01-01T00:00:00Z. */
export function syntheticEvent(
  session: { readonly sessionId: string; readonly hostSessionId: string },
  turnId: string,
  n: number,
  record: SyntheticRecord,
): IngestEvent {
  return {
    sessionId: session.sessionId,
    turnId,
    kind: record.kind,
    finalization: { hostSessionId: session.hostSessionId, messageId: `m${n}` },
    occurredAt: new Date(Date.UTC(2026, 0, 1) + n * 1000).toISOString(),
    content: record.content,
    ...(record.toolCallId ? { toolCallId: record.toolCallId, toolName: record.toolName } : {}),
  };
}

/** A deterministic pseudo-random generator (mulberry32), so shuffles and samples are reproducible from a seed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
