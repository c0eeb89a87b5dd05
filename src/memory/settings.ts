/**
 * Every setting of memory, the database and the compactor, declared once: its environment variable, its default, its
 * zod schema and its accepted values (the text every CONFIG_INVALID error and docs/configuration.md show; `npm run
 * docs:config` writes the reference from here). For the common forms (an integer range, 0 or a range, dollars, one
 * of a few words) the accepted text is derived from the same numbers and words the schema checks, so the two cannot
 * differ. src/memory/config.ts resolves them once.
 */
import { isAbsolute } from "node:path";
import { z } from "zod";
import { parsePriceOverrides } from "../compactor/prices.js";
import { AUTO, providerNamed, SUMMARIZER_NAMES } from "../compactor/registry.js";
import { nearest } from "../core/suggest.js";
import { integerText, wordsText, zeroOrIntegerText } from "./setting-text.js";

/** One setting as declared: the accepted text is what an error and the reference say of the values the schema takes. */
export interface SettingDeclaration<Schema extends z.ZodTypeAny = z.ZodTypeAny> {
  readonly env: string;
  readonly default: string | number;
  readonly schema: Schema;
  readonly accepted: string;
}

/** An integer setting within [min, max], from a number or a numeric string (environment values are strings). */
export const integerFrom = (min: number, max: number) =>
  z.coerce
    .number({ invalid_type_error: "not a number" })
    .int("not an integer")
    .min(min, `below ${min}`)
    .max(max, `above ${max}`);

/** 0, or an integer within [min, max]. */
export const zeroOrIntegerFrom = (min: number, max: number) =>
  integerFrom(0, max).refine((v) => v === 0 || v >= min, `below ${min}`);

/**
 * An integer in [min, max]; `rest` is what the accepted text says after the range (`: what it means`, ` (a note)`,
 * ` milliseconds: …`).
 */
function integer(env: string, fallback: number, range: readonly [number, number], rest: string) {
  return { env, default: fallback, schema: integerFrom(...range), accepted: integerText(range, rest) };
}

/**
 * 0 (which stands for `zero`) or an integer in [min, max] (said "up to `upTo`" where another setting bounds it, which
 * src/memory/config.ts checks after the schema).
 */
function zeroOrInteger(
  env: string,
  fallback: number,
  range: readonly [number, number],
  words: { readonly zero: string; readonly upTo?: string },
  rest: string,
) {
  const accepted = zeroOrIntegerText(range, words, rest);
  return { env, default: fallback, schema: zeroOrIntegerFrom(...range), accepted };
}

const MAX_DOLLARS = 1_000_000;

/** A number of US dollars from 0 to MAX_DOLLARS; `rest` as for `integer`. */
function dollars(env: string, fallback: number, rest: string) {
  const schema = z.coerce
    .number({ invalid_type_error: "not a number" })
    .min(0, "below 0")
    .max(MAX_DOLLARS, `above ${MAX_DOLLARS}`);
  return { env, default: fallback, schema, accepted: `a number of US dollars from 0 to ${MAX_DOLLARS}${rest}` };
}

/** One of a few words, each with what it means: `'a' (…) or 'b' (…)`. */
function oneOf<Word extends string>(env: string, fallback: NoInfer<Word>, meanings: Readonly<Record<Word, string>>) {
  const words = Object.keys(meanings) as [Word, ...Word[]];
  return { env, default: fallback as string, schema: z.enum(words), accepted: wordsText(meanings) };
}

/** " (did you mean anthropic?)" for a summarizer name one slip away from a known one, else "". */
function suggested(name: string): string {
  const near = nearest(name, SUMMARIZER_NAMES);
  return near === undefined ? "" : ` (did you mean ${near}?)`;
}

const postgresUrl = z
  .string()
  .url("not a URL")
  .refine((value) => /^postgres(ql)?:\/\//.test(value), "not a postgres:// URL");

/**
 * Every setting, with its environment variable. Resolved once by `resolveConfig` (src/memory/config.ts) into a frozen
 * object that is passed explicitly; nothing else reads the environment.
 */
export const SETTINGS = {
  databaseUrl: {
    env: "DATABASE_URL",
    default: "",
    schema: z.union([
      z.literal(""),
      postgresUrl.refine((value) => databaseNameOf(value).length > 0, "names no database"),
    ]),
    accepted:
      "empty (the embedded server: optchat starts its own PostgreSQL in OPTCHAT_DATA_DIR; docs/database.md) or a postgres:// or postgresql:// URL naming a database (created by `optchat migrate` if missing)",
  },
  dataDir: {
    env: "OPTCHAT_DATA_DIR",
    default: "",
    schema: z.string().refine((value) => value === "" || isAbsolute(value), "not an absolute path"),
    accepted:
      "empty ($XDG_DATA_HOME/optchat or ~/.local/share/optchat on Linux, ~/Library/Application Support/optchat on macOS, /var/lib/optchat as root) or an absolute directory: where the embedded server keeps its cluster (unused when DATABASE_URL is set)",
  },
  socketDir: {
    env: "OPTCHAT_SOCKET_DIR",
    default: "",
    schema: z.string().refine((value) => value === "" || isAbsolute(value), "not an absolute path"),
    accepted:
      "empty ($XDG_RUNTIME_DIR/optchat-<tag>, else /tmp/optchat-<uid>-<tag>; <tag> a hash of OPTCHAT_DATA_DIR) or an absolute directory short enough for a Unix socket path (103 bytes with /.s.PGSQL.5432): the embedded server's only way in, made mode 0700",
  },
  legacyDatabaseUrl: {
    env: "OPTCHAT_LEGACY_DATABASE_URL",
    default: "postgres://postgres@127.0.0.1:5432/optchat",
    schema: z.union([z.literal(""), postgresUrl]),
    accepted:
      "a postgres:// URL or empty: with DATABASE_URL empty and no embedded cluster yet, a database there that holds optchat's memory (the default of versions before the embedded server) is kept in use, said once; empty: never look",
  },
  embeddedIdleSeconds: integer(
    "OPTCHAT_EMBEDDED_IDLE_SECONDS",
    300,
    [2, 604_800],
    ": the embedded server stops (fast shutdown) after this long with no client connected; the next optchat process starts it again",
  ),
  poolSize: integer("OPTCHAT_POOL_SIZE", 10, [1, 100], " (connections per process)"),
  statementTimeoutMs: integer(
    "OPTCHAT_STATEMENT_TIMEOUT_MS",
    30_000,
    [0, 3_600_000],
    " milliseconds (0 disables the timeout)",
  ),
  databaseRetryMs: integer(
    "OPTCHAT_DATABASE_RETRY_MS",
    10_000,
    [0, 600_000],
    " milliseconds: how long a service call that is safe to repeat keeps retrying while PostgreSQL is unreachable (restarting, connection dropped) before failing with DATABASE_UNAVAILABLE (0: fail at once)",
  ),
  sessionVisibility: oneOf("OPTCHAT_SESSION_VISIBILITY", "shared", {
    shared: "a new session is shared with its project's team; with no team configured, every session is readable",
    private: "only its owner and the operator read a new session, and its turns never publish; docs/team.md",
  }),
  viewBytes: integer(
    "OPTCHAT_VIEW_BYTES",
    128_000,
    [1024, 10_000_000],
    ": the size a session's persisted view is kept under (seed 002: 128,000)",
  ),
  viewLowerBytes: zeroOrInteger(
    "OPTCHAT_VIEW_LOWER_BYTES",
    0,
    [1024, 10_000_000],
    { zero: "the same as OPTCHAT_VIEW_BYTES", upTo: "OPTCHAT_VIEW_BYTES" },
    ": once over the upper size, the view shrinks down to this",
  ),
  sharedViewBytes: integer(
    "OPTCHAT_SHARED_VIEW_BYTES",
    32_000,
    [1024, 10_000_000],
    ": the size the shared view (other sessions' published turns, sent with every request of every session of the scope) is kept under; older turns beyond it are read as merged summaries",
  ),
  sharedViewLowerBytes: zeroOrInteger(
    "OPTCHAT_SHARED_VIEW_LOWER_BYTES",
    0,
    [1024, 10_000_000],
    { zero: "three quarters of OPTCHAT_SHARED_VIEW_BYTES", upTo: "OPTCHAT_SHARED_VIEW_BYTES" },
    ": once over the upper size, the shared view shrinks down to this (the gap is how many publications append before the cached memory is rewritten again)",
  ),
  workerConcurrency: integer(
    "OPTCHAT_WORKER_CONCURRENCY",
    8,
    [1, 64],
    ": compactor jobs one worker process runs at once",
  ),
  failureRetrySeconds: integer(
    "OPTCHAT_FAILURE_RETRY_SECONDS",
    10,
    [1, 3600],
    ": fixed wait before a failed summary is tried again (no backoff)",
  ),
  summarizer: {
    env: "OPTCHAT_SUMMARIZER",
    default: "auto",
    schema: z.string().superRefine((value, ctx) => {
      if (providerNamed(value) !== undefined || value === AUTO) return;
      ctx.addIssue({
        code: z.ZodIssueCode.custom,
        message: `not a known summarizer${suggested(value.split(":")[0] as string)}`,
      });
    }),
    accepted:
      "'auto' (the model the user already has: in OpenCode its small_model, else a cheap model of the main model's provider; elsewhere the provider whose ANTHROPIC_API_KEY / OPENAI_API_KEY is set), 'anthropic', 'openai', 'openai-compatible' (a server at OPTCHAT_SUMMARIZER_URL), or 'fake' (the deterministic extractive summarizer, tests and demos) optionally with options: fake:overshoot=N, fake:fail, fake:fail-first=N, fake:delay=MS (comma-separated)",
  },
  summarizerUrl: {
    env: "OPTCHAT_SUMMARIZER_URL",
    default: "",
    schema: z
      .string()
      .refine((value) => value === "" || isBaseUrl(value), "not an http(s) URL ending in /v1")
      .transform((value) => value.replace(/\/+$/, "")),
    accepted:
      "an http:// or https:// base URL ending in /v1 (e.g. http://127.0.0.1:11434/v1): required with openai-compatible; with anthropic or openai it replaces the provider's own",
  },
  summarizerModel: {
    env: "OPTCHAT_SUMMARIZER_MODEL",
    default: "",
    schema: z.string().max(200, "longer than 200 characters"),
    accepted:
      "the model name as the provider knows it; empty: anthropic claude-haiku-4-5, openai gpt-4.1-mini (openai-compatible needs one)",
  },
  summarizerApiKey: {
    env: "OPTCHAT_SUMMARIZER_API_KEY",
    default: "",
    schema: z.string(),
    accepted:
      "the compactor provider's API key; empty: ANTHROPIC_API_KEY or OPENAI_API_KEY for those providers, no key for openai-compatible",
  },
  compactorMerges: oneOf("OPTCHAT_COMPACTOR_MERGES", "needed", {
    needed:
      "a merge that needs the model is made only when a view is about to fold those two lines, several in one call",
    all: "every merge as soon as its two lines exist: complete trees, about three times the compactor's calls",
  }),
  compactorToolResults: oneOf("OPTCHAT_COMPACTOR_TOOL_RESULTS", "excerpt", {
    excerpt:
      "a tool result too long for a line gets its excerpt as its line, made without a model call: its size, tool, failure lines, last and first lines",
    model: "the model summarizes it, one call per tool result or run of messages",
  }),
  summarizerTimeoutMs: integer(
    "OPTCHAT_SUMMARIZER_TIMEOUT_MS",
    120_000,
    [1000, 3_600_000],
    ": one compactor call, answer included; past it the node is tried again",
  ),
  summarizerWindowTokens: zeroOrInteger(
    "OPTCHAT_SUMMARIZER_WINDOW_TOKENS",
    0,
    [4096, 10_000_000],
    { zero: "the provider's default: anthropic 200000, openai 128000, openai-compatible 32768" },
    ": the compactor model's context window",
  ),
  anthropicApiKey: {
    env: "ANTHROPIC_API_KEY",
    default: "",
    schema: z.string(),
    accepted:
      "Anthropic's standard key variable, used by the anthropic summarizer when OPTCHAT_SUMMARIZER_API_KEY is empty",
  },
  openaiApiKey: {
    env: "OPENAI_API_KEY",
    default: "",
    schema: z.string(),
    accepted: "OpenAI's standard key variable, used by the openai summarizer when OPTCHAT_SUMMARIZER_API_KEY is empty",
  },
  budgetDailyUsd: dollars(
    "OPTCHAT_BUDGET_DAILY_USD",
    5,
    " (0: no cap): what the compactor may spend per UTC day over every scope of the database, priced with the price table; past it nodes are labelled fallbacks",
  ),
  budgetDailyTokens: integer(
    "OPTCHAT_BUDGET_DAILY_TOKENS",
    0,
    [0, 10_000_000_000],
    " (0: no cap): compactor tokens (input, cached or not, and output) per UTC day over every scope",
  ),
  budgetScopeDailyUsd: dollars(
    "OPTCHAT_BUDGET_SCOPE_DAILY_USD",
    0,
    " (0: no cap): the same cap for each scope on its own",
  ),
  budgetScopeDailyTokens: integer(
    "OPTCHAT_BUDGET_SCOPE_DAILY_TOKENS",
    0,
    [0, 10_000_000_000],
    " (0: no cap): the token cap for each scope on its own",
  ),
  prices: {
    env: "OPTCHAT_PRICES",
    default: "",
    schema: z.string().superRefine((value, ctx) => {
      try {
        parsePriceOverrides(value);
      } catch (error) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: (error as Error).message });
      }
    }),
    accepted:
      'empty (the built-in table) or a JSON object of "provider:model" to {"input", "output", "cacheRead"?, "cacheWrite"?} in US dollars per million tokens, overriding or extending the built-in table',
  },
  settleTimeoutMs: integer(
    "OPTCHAT_SETTLE_TIMEOUT_MS",
    30_000,
    [0, 600_000],
    ": how long to wait for the compactor before reporting MEMORY_NOT_READY",
  ),
  admissionWaitMs: integer(
    "OPTCHAT_ADMISSION_WAIT_MS",
    10_000,
    [0, 600_000],
    " (0: never waits): how long after another session of the scope finished a turn a new turn waits for that turn's publication before it is admitted without it",
  ),
  jobRetentionSeconds: integer(
    "OPTCHAT_JOB_RETENTION_SECONDS",
    3600,
    [1, 2_592_000],
    ": how long finished compactor jobs (pgboss.job rows) are kept before a worker deletes them",
  ),
  revisionRetentionSeconds: integer(
    "OPTCHAT_REVISION_RETENTION_SECONDS",
    86_400,
    [60, 31_536_000],
    ": how long a view revision that no turn pins and that is no longer a tree's latest is kept after it was superseded",
  ),
  retentionSweepSeconds: integer(
    "OPTCHAT_RETENTION_SWEEP_SECONDS",
    300,
    [1, 86_400],
    ": how often a worker deletes what the two retention settings let go",
  ),
} as const satisfies Record<string, SettingDeclaration>;

export type SettingName = keyof typeof SETTINGS;

/** The settings' schemas as one object schema (what `resolveConfig` validates). */
export const settingsSchema = z.object(
  Object.fromEntries(Object.entries(SETTINGS).map(([name, setting]) => [name, setting.schema])) as {
    [Name in SettingName]: (typeof SETTINGS)[Name]["schema"];
  },
);

export function isBaseUrl(value: string): boolean {
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
