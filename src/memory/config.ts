import { homedir } from "node:os";
import type { z } from "zod";
import type { BudgetSettings } from "../compactor/budget.js";
import { type PriceTable, parsePriceOverrides, priceTable } from "../compactor/prices.js";
import { type SummarizerSettings, summarizerProblems } from "../compactor/registry.js";
import { OptchatError } from "../core/errors.js";
import type { FoldParams } from "../core/fold.js";
import {
  type EmbeddedSettings,
  embeddedSettings,
  embeddedUrl,
  MAX_SOCKET_PATH_BYTES,
  type PlatformFacts,
  socketPathOf,
} from "../embedded/paths.js";
import { SETTINGS, type SettingName, settingsSchema } from "./settings.js";

export { databaseNameOf, integerFrom, SETTINGS, type SettingName, zeroOrIntegerFrom } from "./settings.js";

export type Config = Readonly<
  z.infer<typeof settingsSchema> & {
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
    schema: settingsSchema,
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
