import { homedir } from "node:os";
import { isAbsolute } from "node:path";
import { z } from "zod";
import type { BudgetSettings } from "../compactor/budget.js";
import { type PriceTable, parsePriceOverrides, priceTable } from "../compactor/prices.js";
import {
  AUTO,
  providerNamed,
  SUMMARIZER_NAMES,
  type SummarizerSettings,
  summarizerProblems,
} from "../compactor/registry.js";
import { OptchatError } from "../core/errors.js";
import type { FoldParams } from "../core/fold.js";
import { nearest } from "../core/suggest.js";
import {
  type EmbeddedSettings,
  embeddedSettings,
  embeddedUrl,
  MAX_SOCKET_PATH_BYTES,
  type PlatformFacts,
  socketPathOf,
} from "../embedded/paths.js";

/**
 * Every setting, with its environment variable. Resolved once by `resolveConfig` into a frozen object that is passed
 * explicitly; nothing else reads the environment. docs/configuration.md is generated from it (npm run docs:config).
 */
export const SETTINGS = {
  databaseUrl: {
    env: "DATABASE_URL",
    default: "",
    accepted:
      "empty (the embedded server: optchat starts its own PostgreSQL in OPTCHAT_DATA_DIR; docs/database.md) or a postgres:// or postgresql:// URL naming a database (created by `optchat migrate` if missing)",
  },
  dataDir: {
    env: "OPTCHAT_DATA_DIR",
    default: "",
    accepted:
      "empty ($XDG_DATA_HOME/optchat or ~/.local/share/optchat on Linux, ~/Library/Application Support/optchat on macOS, /var/lib/optchat as root) or an absolute directory: where the embedded server keeps its cluster (unused when DATABASE_URL is set)",
  },
  socketDir: {
    env: "OPTCHAT_SOCKET_DIR",
    default: "",
    accepted:
      "empty ($XDG_RUNTIME_DIR/optchat-<tag>, else /tmp/optchat-<uid>-<tag>; <tag> a hash of OPTCHAT_DATA_DIR) or an absolute directory short enough for a Unix socket path (103 bytes with /.s.PGSQL.5432): the embedded server's only way in, made mode 0700",
  },
  legacyDatabaseUrl: {
    env: "OPTCHAT_LEGACY_DATABASE_URL",
    default: "postgres://postgres@127.0.0.1:5432/optchat",
    accepted:
      "a postgres:// URL or empty: with DATABASE_URL empty and no embedded cluster yet, a database there that holds optchat's memory (the default of versions before the embedded server) is kept in use, said once; empty: never look",
  },
  embeddedIdleSeconds: {
    env: "OPTCHAT_EMBEDDED_IDLE_SECONDS",
    default: 300,
    accepted:
      "an integer from 2 to 604800: the embedded server stops (fast shutdown) after this long with no client connected; the next optchat process starts it again",
  },
  poolSize: {
    env: "OPTCHAT_POOL_SIZE",
    default: 10,
    accepted: "an integer from 1 to 100 (connections per process)",
  },
  statementTimeoutMs: {
    env: "OPTCHAT_STATEMENT_TIMEOUT_MS",
    default: 30_000,
    accepted: "an integer from 0 to 3600000 milliseconds (0 disables the timeout)",
  },
  databaseRetryMs: {
    env: "OPTCHAT_DATABASE_RETRY_MS",
    default: 10_000,
    accepted:
      "an integer from 0 to 600000 milliseconds: how long a service call that is safe to repeat keeps retrying while PostgreSQL is unreachable (restarting, connection dropped) before failing with DATABASE_UNAVAILABLE (0: fail at once)",
  },
  viewBytes: {
    env: "OPTCHAT_VIEW_BYTES",
    default: 128_000,
    accepted: "an integer from 1024 to 10000000: the size a session's persisted view is kept under (seed 002: 128,000)",
  },
  viewLowerBytes: {
    env: "OPTCHAT_VIEW_LOWER_BYTES",
    default: 0,
    accepted:
      "0 (the same as OPTCHAT_VIEW_BYTES) or an integer from 1024 up to OPTCHAT_VIEW_BYTES: once over the upper size, the view shrinks down to this",
  },
  sharedViewBytes: {
    env: "OPTCHAT_SHARED_VIEW_BYTES",
    default: 32_000,
    accepted:
      "an integer from 1024 to 10000000: the size the shared view (other sessions' published turns, sent with every request of every session of the scope) is kept under; older turns beyond it are read as merged summaries",
  },
  sharedViewLowerBytes: {
    env: "OPTCHAT_SHARED_VIEW_LOWER_BYTES",
    default: 0,
    accepted:
      "0 (three quarters of OPTCHAT_SHARED_VIEW_BYTES) or an integer from 1024 up to OPTCHAT_SHARED_VIEW_BYTES: once over the upper size, the shared view shrinks down to this (the gap is how many publications append before the cached memory is rewritten again)",
  },
  workerConcurrency: {
    env: "OPTCHAT_WORKER_CONCURRENCY",
    default: 8,
    accepted: "an integer from 1 to 64: compactor jobs one worker process runs at once",
  },
  failureRetrySeconds: {
    env: "OPTCHAT_FAILURE_RETRY_SECONDS",
    default: 10,
    accepted: "an integer from 1 to 3600: fixed wait before a failed summary is tried again (no backoff)",
  },
  summarizer: {
    env: "OPTCHAT_SUMMARIZER",
    default: "auto",
    accepted:
      "'auto' (the model the user already has: in OpenCode its small_model, else a cheap model of the main model's provider; elsewhere the provider whose ANTHROPIC_API_KEY / OPENAI_API_KEY is set), 'anthropic', 'openai', 'openai-compatible' (a server at OPTCHAT_SUMMARIZER_URL), or 'fake' (the deterministic extractive summarizer, tests and demos) optionally with options: fake:overshoot=N, fake:fail, fake:fail-first=N, fake:delay=MS (comma-separated)",
  },
  summarizerUrl: {
    env: "OPTCHAT_SUMMARIZER_URL",
    default: "",
    accepted:
      "an http:// or https:// base URL ending in /v1 (e.g. http://127.0.0.1:11434/v1): required with openai-compatible; with anthropic or openai it replaces the provider's own",
  },
  summarizerModel: {
    env: "OPTCHAT_SUMMARIZER_MODEL",
    default: "",
    accepted:
      "the model name as the provider knows it; empty: anthropic claude-haiku-4-5, openai gpt-4.1-mini (openai-compatible needs one)",
  },
  summarizerApiKey: {
    env: "OPTCHAT_SUMMARIZER_API_KEY",
    default: "",
    accepted:
      "the compactor provider's API key; empty: ANTHROPIC_API_KEY or OPENAI_API_KEY for those providers, no key for openai-compatible",
  },
  compactorMerges: {
    env: "OPTCHAT_COMPACTOR_MERGES",
    default: "needed",
    accepted:
      "'needed' (a merge that needs the model is made only when a view is about to fold those two lines, several in one call) or 'all' (every merge as soon as its two lines exist: complete trees, about three times the compactor's calls)",
  },
  compactorToolResults: {
    env: "OPTCHAT_COMPACTOR_TOOL_RESULTS",
    default: "excerpt",
    accepted:
      "'excerpt' (a tool result too long for a line gets its excerpt as its line, made without a model call: its size, tool, failure lines, last and first lines) or 'model' (the model summarizes it, one call per tool result or run of messages)",
  },
  summarizerTimeoutMs: {
    env: "OPTCHAT_SUMMARIZER_TIMEOUT_MS",
    default: 120_000,
    accepted: "an integer from 1000 to 3600000: one compactor call, answer included; past it the node is tried again",
  },
  summarizerWindowTokens: {
    env: "OPTCHAT_SUMMARIZER_WINDOW_TOKENS",
    default: 0,
    accepted:
      "0 (the provider's default: anthropic 200000, openai 128000, openai-compatible 32768) or an integer from 4096 to 10000000: the compactor model's context window",
  },
  anthropicApiKey: {
    env: "ANTHROPIC_API_KEY",
    default: "",
    accepted:
      "Anthropic's standard key variable, used by the anthropic summarizer when OPTCHAT_SUMMARIZER_API_KEY is empty",
  },
  openaiApiKey: {
    env: "OPENAI_API_KEY",
    default: "",
    accepted: "OpenAI's standard key variable, used by the openai summarizer when OPTCHAT_SUMMARIZER_API_KEY is empty",
  },
  budgetDailyUsd: {
    env: "OPTCHAT_BUDGET_DAILY_USD",
    default: 5,
    accepted:
      "a number of US dollars from 0 to 1000000 (0: no cap): what the compactor may spend per UTC day over every scope of the database, priced with the price table; past it nodes are labelled fallbacks",
  },
  budgetDailyTokens: {
    env: "OPTCHAT_BUDGET_DAILY_TOKENS",
    default: 0,
    accepted:
      "an integer from 0 to 10000000000 (0: no cap): compactor tokens (input, cached or not, and output) per UTC day over every scope",
  },
  budgetScopeDailyUsd: {
    env: "OPTCHAT_BUDGET_SCOPE_DAILY_USD",
    default: 0,
    accepted: "a number of US dollars from 0 to 1000000 (0: no cap): the same cap for each scope on its own",
  },
  budgetScopeDailyTokens: {
    env: "OPTCHAT_BUDGET_SCOPE_DAILY_TOKENS",
    default: 0,
    accepted: "an integer from 0 to 10000000000 (0: no cap): the token cap for each scope on its own",
  },
  prices: {
    env: "OPTCHAT_PRICES",
    default: "",
    accepted:
      'empty (the built-in table) or a JSON object of "provider:model" to {"input", "output", "cacheRead"?, "cacheWrite"?} in US dollars per million tokens, overriding or extending the built-in table',
  },
  settleTimeoutMs: {
    env: "OPTCHAT_SETTLE_TIMEOUT_MS",
    default: 30_000,
    accepted: "an integer from 0 to 600000: how long to wait for the compactor before reporting MEMORY_NOT_READY",
  },
  jobRetentionSeconds: {
    env: "OPTCHAT_JOB_RETENTION_SECONDS",
    default: 3600,
    accepted:
      "an integer from 1 to 2592000: how long finished compactor jobs (pgboss.job rows) are kept before a worker deletes them",
  },
  revisionRetentionSeconds: {
    env: "OPTCHAT_REVISION_RETENTION_SECONDS",
    default: 86_400,
    accepted:
      "an integer from 60 to 31536000: how long a view revision that no turn pins and that is no longer a tree's latest is kept after it was superseded",
  },
  retentionSweepSeconds: {
    env: "OPTCHAT_RETENTION_SWEEP_SECONDS",
    default: 300,
    accepted: "an integer from 1 to 86400: how often a worker deletes what the two retention settings let go",
  },
} as const;

export type SettingName = keyof typeof SETTINGS;

/** An integer setting within [min, max], from a number or a numeric string (environment values are strings). */
export const integerFrom = (min: number, max: number) =>
  z.coerce
    .number({ invalid_type_error: "not a number" })
    .int("not an integer")
    .min(min, `below ${min}`)
    .max(max, `above ${max}`);

/** " (did you mean anthropic?)" for a summarizer name one slip away from a known one, else "". */
function suggested(name: string): string {
  const near = nearest(name, SUMMARIZER_NAMES);
  return near === undefined ? "" : ` (did you mean ${near}?)`;
}

const dollars = z.coerce
  .number({ invalid_type_error: "not a number" })
  .min(0, "below 0")
  .max(1_000_000, "above 1000000");

const configSchema = z.object({
  databaseUrl: z.union([
    z.literal(""),
    z
      .string()
      .url("not a URL")
      .refine((value) => /^postgres(ql)?:\/\//.test(value), "not a postgres:// URL")
      .refine((value) => databaseNameOf(value).length > 0, "names no database"),
  ]),
  dataDir: z.string().refine((value) => value === "" || isAbsolute(value), "not an absolute path"),
  socketDir: z.string().refine((value) => value === "" || isAbsolute(value), "not an absolute path"),
  embeddedIdleSeconds: integerFrom(2, 604_800),
  legacyDatabaseUrl: z.union([
    z.literal(""),
    z
      .string()
      .url("not a URL")
      .refine((value) => /^postgres(ql)?:\/\//.test(value), "not a postgres:// URL"),
  ]),
  poolSize: integerFrom(1, 100),
  statementTimeoutMs: integerFrom(0, 3_600_000),
  databaseRetryMs: integerFrom(0, 600_000),
  viewBytes: integerFrom(1024, 10_000_000),
  viewLowerBytes: integerFrom(0, 10_000_000).refine((v) => v === 0 || v >= 1024, "below 1024"),
  sharedViewBytes: integerFrom(1024, 10_000_000),
  sharedViewLowerBytes: integerFrom(0, 10_000_000).refine((v) => v === 0 || v >= 1024, "below 1024"),
  workerConcurrency: integerFrom(1, 64),
  failureRetrySeconds: integerFrom(1, 3600),
  summarizer: z.string().superRefine((value, ctx) => {
    if (providerNamed(value) !== undefined || value === AUTO) return;
    ctx.addIssue({
      code: z.ZodIssueCode.custom,
      message: `not a known summarizer${suggested(value.split(":")[0] as string)}`,
    });
  }),
  summarizerUrl: z
    .string()
    .refine((value) => value === "" || isBaseUrl(value), "not an http(s) URL ending in /v1")
    .transform((value) => value.replace(/\/+$/, "")),
  summarizerModel: z.string().max(200, "longer than 200 characters"),
  summarizerApiKey: z.string(),
  summarizerTimeoutMs: integerFrom(1000, 3_600_000),
  compactorMerges: z.enum(["needed", "all"]),
  compactorToolResults: z.enum(["excerpt", "model"]),
  summarizerWindowTokens: integerFrom(0, 10_000_000).refine((v) => v === 0 || v >= 4096, "below 4096"),
  anthropicApiKey: z.string(),
  openaiApiKey: z.string(),
  budgetDailyUsd: dollars,
  budgetDailyTokens: integerFrom(0, 10_000_000_000),
  budgetScopeDailyUsd: dollars,
  budgetScopeDailyTokens: integerFrom(0, 10_000_000_000),
  prices: z.string().superRefine((value, ctx) => {
    try {
      parsePriceOverrides(value);
    } catch (error) {
      ctx.addIssue({ code: z.ZodIssueCode.custom, message: (error as Error).message });
    }
  }),
  settleTimeoutMs: integerFrom(0, 600_000),
  jobRetentionSeconds: integerFrom(1, 2_592_000),
  revisionRetentionSeconds: integerFrom(60, 31_536_000),
  retentionSweepSeconds: integerFrom(1, 86_400),
});

export type Config = Readonly<
  z.infer<typeof configSchema> & {
    /**
     * The embedded server when DATABASE_URL is empty (databaseUrl is then its socket URL), else null. Started by
     * `prepareDatabase` (src/memory/database.ts) before the first connection.
     */
    embedded: EmbeddedSettings | null;
  }
>;

export interface ResolveConfigOptions {
  /** The environment to read (default: none; the CLI passes process.env). */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** The machine facts the embedded server's default directories come from (default: this process's). */
  readonly platform?: Omit<PlatformFacts, "env">;
  /** Explicit values; they win over the environment. */
  readonly overrides?: Partial<Record<SettingName, string | number | undefined>>;
}

/** One row of a settings table: its environment variable, default and the accepted values (for error messages). */
export interface SettingSpec {
  readonly env: string;
  readonly default: string | number;
  readonly accepted: string;
}

/**
 * Resolves a settings table: for each setting, the explicit value, else its environment variable, else its default;
 * then validates with `schema`. One CONFIG_INVALID error names every bad setting once, with its source (`describe`
 * names it, e.g. "OPTCHAT_MODE / option mode") and the accepted values. Shared by the service and the plugin.
 */
export function resolveSettings<Name extends string, Schema extends z.ZodTypeAny>(input: {
  readonly table: Readonly<Record<Name, SettingSpec>>;
  readonly schema: Schema;
  readonly explicit: Readonly<Partial<Record<Name, unknown>>>;
  readonly explicitLabel: (name: Name) => string;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly describe: (name: Name) => string;
  readonly title: string;
}): z.output<Schema> {
  const raw: Record<string, unknown> = {};
  const sources: Record<string, string> = {};
  for (const [name, setting] of Object.entries(input.table) as [Name, SettingSpec][]) {
    const explicit = input.explicit[name];
    const fromEnv = input.env[setting.env];
    if (explicit !== undefined) {
      raw[name] = explicit;
      sources[name] = input.explicitLabel(name);
    } else if (fromEnv !== undefined && fromEnv !== "") {
      raw[name] = fromEnv;
      sources[name] = `environment variable ${setting.env}`;
    } else {
      raw[name] = setting.default;
      sources[name] = "default";
    }
  }
  const parsed = input.schema.safeParse(raw);
  if (parsed.success) return parsed.data;
  // One message per setting, even when a value breaks several rules.
  const bySetting = new Map<Name, string[]>();
  for (const issue of parsed.error.issues) {
    const name = String(issue.path[0]) as Name;
    bySetting.set(name, [...(bySetting.get(name) ?? []), issue.message]);
  }
  const problems = [...bySetting].map(
    ([name, messages]) =>
      `${input.describe(name)} (${sources[name]}): ${messages.join(", ")}; accepted: ${input.table[name].accepted}`,
  );
  throw new OptchatError("CONFIG_INVALID", `${input.title}: ${problems.join("; ")}`, {
    settings: [...bySetting.keys()].map((name) => input.table[name].env),
  });
}

export function resolveConfig(options: ResolveConfigOptions = {}): Config {
  const data = resolveSettings({
    table: SETTINGS,
    schema: configSchema,
    explicit: options.overrides ?? {},
    explicitLabel: (name) => `option ${name}`,
    env: options.env ?? {},
    describe: (name) => SETTINGS[name].env,
    title: "Invalid configuration",
  });
  const sourceOf = (name: SettingName) =>
    options.overrides?.[name] !== undefined
      ? `option ${name}`
      : options.env?.[SETTINGS[name].env]
        ? `environment variable ${SETTINGS[name].env}`
        : "default";
  if (data.viewLowerBytes > data.viewBytes) {
    throw new OptchatError(
      "CONFIG_INVALID",
      `Invalid configuration: OPTCHAT_VIEW_LOWER_BYTES (${sourceOf("viewLowerBytes")}) is ${data.viewLowerBytes}, above OPTCHAT_VIEW_BYTES ${data.viewBytes}; accepted: ${SETTINGS.viewLowerBytes.accepted}`,
      { settings: ["OPTCHAT_VIEW_LOWER_BYTES"] },
    );
  }
  if (data.sharedViewLowerBytes > data.sharedViewBytes) {
    throw new OptchatError(
      "CONFIG_INVALID",
      `Invalid configuration: OPTCHAT_SHARED_VIEW_LOWER_BYTES (${sourceOf("sharedViewLowerBytes")}) is ${data.sharedViewLowerBytes}, above OPTCHAT_SHARED_VIEW_BYTES ${data.sharedViewBytes}; accepted: ${SETTINGS.sharedViewLowerBytes.accepted}`,
      { settings: ["OPTCHAT_SHARED_VIEW_LOWER_BYTES"] },
    );
  }
  const problems = summarizerProblems(summarizerSettingsOf(data));
  if (problems.length > 0) {
    throw new OptchatError(
      "CONFIG_INVALID",
      `Invalid configuration: OPTCHAT_SUMMARIZER is ${data.summarizer} (${sourceOf("summarizer")}): ${problems.join("; ")}`,
      { settings: [...new Set(problems.join(" ").match(/\b(?:OPTCHAT_[A-Z_]+|[A-Z]+_API_KEY)\b/g) ?? [])] },
    );
  }
  const embedded = data.databaseUrl === "" ? embeddedSettingsOf(data, options) : null;
  return Object.freeze({
    ...data,
    databaseUrl: embedded ? embeddedUrl(embedded.socketDir) : data.databaseUrl,
    embedded,
    viewLowerBytes: data.viewLowerBytes === 0 ? data.viewBytes : data.viewLowerBytes,
    sharedViewLowerBytes:
      data.sharedViewLowerBytes === 0
        ? Math.max(1024, Math.floor((data.sharedViewBytes * 3) / 4))
        : data.sharedViewLowerBytes,
  });
}

function embeddedSettingsOf(
  data: { dataDir: string; socketDir: string; embeddedIdleSeconds: number },
  options: ResolveConfigOptions,
): EmbeddedSettings {
  const facts: PlatformFacts = {
    env: options.env ?? {},
    platform: options.platform?.platform ?? process.platform,
    uid: options.platform?.uid ?? process.getuid?.() ?? 0,
    home: options.platform?.home ?? options.env?.HOME ?? homedir(),
  };
  const settings = embeddedSettings(facts, {
    dataDir: data.dataDir,
    socketDir: data.socketDir,
    idleSeconds: data.embeddedIdleSeconds,
  });
  const socket = socketPathOf(settings.socketDir);
  if (Buffer.byteLength(socket) > MAX_SOCKET_PATH_BYTES) {
    throw new OptchatError(
      "CONFIG_INVALID",
      `Invalid configuration: the embedded server's socket ${socket} is ${Buffer.byteLength(socket)} bytes, over the ${MAX_SOCKET_PATH_BYTES} a Unix socket path allows; set OPTCHAT_SOCKET_DIR to a shorter directory (e.g. /tmp/optchat-${facts.uid})${data.socketDir === "" ? " or a shorter XDG_RUNTIME_DIR" : ""}`,
      { settings: ["OPTCHAT_SOCKET_DIR"], directory: settings.socketDir, fault: "socket-path-too-long" },
    );
  }
  return settings;
}

/**
 * The fold thresholds of every tree (src/core/fold.ts): session views under OPTCHAT_VIEW_*, the shared view under
 * OPTCHAT_SHARED_VIEW_*. Every process that folds (ingest, workers, rebuild, forget) uses the same settings.
 */
export function foldParamsOf(config: Config): FoldParams {
  return {
    upperBytes: config.viewBytes,
    lowerBytes: config.viewLowerBytes,
    shared: { upperBytes: config.sharedViewBytes, lowerBytes: config.sharedViewLowerBytes },
    ...(config.compactorMerges === "all" ? { merges: "all" as const } : {}),
  };
}

/** The compactor's daily caps and the price table they are measured with (src/compactor/budget.ts). */
export function budgetSettingsOf(config: Config): BudgetSettings {
  return {
    dailyUsd: config.budgetDailyUsd,
    dailyTokens: config.budgetDailyTokens,
    scopeDailyUsd: config.budgetScopeDailyUsd,
    scopeDailyTokens: config.budgetScopeDailyTokens,
    prices: pricesOf(config),
  };
}

/** The price table: built in, with OPTCHAT_PRICES on top (validated when the config was resolved). */
export function pricesOf(config: Pick<Config, "prices">): PriceTable {
  return priceTable(parsePriceOverrides(config.prices));
}

/** The compactor's settings as the summarizer registry takes them (src/compactor/registry.ts). */
export function summarizerSettingsOf(
  config: Pick<
    Config,
    | "summarizer"
    | "summarizerModel"
    | "summarizerUrl"
    | "summarizerApiKey"
    | "summarizerTimeoutMs"
    | "summarizerWindowTokens"
    | "anthropicApiKey"
    | "openaiApiKey"
  >,
): SummarizerSettings {
  return {
    summarizer: config.summarizer,
    model: config.summarizerModel,
    url: config.summarizerUrl,
    apiKey: config.summarizerApiKey,
    standardKeys: { ANTHROPIC_API_KEY: config.anthropicApiKey, OPENAI_API_KEY: config.openaiApiKey },
    timeoutMs: config.summarizerTimeoutMs,
    windowTokens: config.summarizerWindowTokens,
  };
}

function isBaseUrl(value: string): boolean {
  try {
    const url = new URL(value);
    return (url.protocol === "http:" || url.protocol === "https:") && /\/v1\/?$/.test(url.pathname) && !url.search;
  } catch {
    return false;
  }
}

/** The database name in a postgres URL ('' if none). */
export function databaseNameOf(url: string): string {
  try {
    return decodeURIComponent(new URL(url).pathname.replace(/^\//, ""));
  } catch {
    return "";
  }
}

/** The URL with its password hidden, for messages and `optchat status`. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return "(unparseable URL)";
  }
}
