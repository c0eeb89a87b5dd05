import { z } from "zod";
import {
  type Config,
  integerFrom,
  nearest,
  OptchatError,
  resolveConfig,
  resolveSettings,
  SETTINGS,
  type SettingName,
} from "../../src/memory/index.js";
import { PLUGIN_SETTINGS, type PluginSettingName } from "./settings.js";

export { PLUGIN_SETTINGS, type PluginSettingName } from "./settings.js";

const onOff = z.union([z.boolean(), z.enum(["on", "off", "true", "false", "1", "0"])]).transform((v) => {
  if (typeof v === "boolean") return v;
  return v === "on" || v === "true" || v === "1";
});

const pluginSchema = z.object({
  mode: z.enum(["replace", "augment"], { errorMap: () => ({ message: "not replace or augment" }) }),
  scope: z
    .string()
    .regex(/^(project|isolated|profile:[A-Za-z0-9_.-]{1,100})$/, "not project, isolated or profile:<name>"),
  readiness: z.enum(["strict", "partial"], { errorMap: () => ({ message: "not strict or partial" }) }),
  readinessWaitMs: integerFrom(0, 600_000),
  previousExchange: onOff,
  cacheEpochTurns: integerFrom(1, 1000),
  cacheEpochKeptTokens: integerFrom(0, 1_000_000),
  embeddedWorker: onOff,
  thread: onOff,
  localServer: z.enum(["auto", "on", "off"], { errorMap: () => ({ message: "not auto, on or off" }) }),
  localServerRuntime: z.enum(["auto", "node", "bun"], { errorMap: () => ({ message: "not auto, node or bun" }) }),
  localServerIdleSeconds: integerFrom(1, 86_400),
  embeddedWorkerConcurrency: integerFrom(1, 64),
  embeddedWorkerStartMs: integerFrom(0, 600_000),
  closeFlushMs: integerFrom(0, 60_000),
  windowTokens: integerFrom(0, 10_000_000).refine((v) => v === 0 || v >= 1000, "below 1000"),
  outputTokens: integerFrom(0, 1_000_000),
  toolsTokens: integerFrom(0, 1_000_000),
  reserveTokens: integerFrom(0, 1_000_000),
  leaseSeconds: integerFrom(5, 3600),
  onSessionDelete: z.enum(["delete", "archive", "keep"], {
    errorMap: () => ({ message: "not delete, archive or keep" }),
  }),
  timingsFile: z.string().max(4096, "longer than 4096 characters"),
});

export type PluginSettings = Readonly<z.infer<typeof pluginSchema>>;

export interface ResolvedPluginConfig {
  /** The memory service's settings (database, compactor, views). */
  readonly core: Config;
  readonly plugin: PluginSettings;
}

/**
 * Resolves the plugin's configuration once, from plugin options and the environment, into frozen objects. Unknown
 * option names are refused (a typo would otherwise silently fall back to a default). Errors name the option and the
 * environment variable of every bad setting.
 */
export function resolvePluginConfig(
  options: Readonly<Record<string, unknown>> | undefined,
  env: Readonly<Record<string, string | undefined>>,
): ResolvedPluginConfig {
  const given = options ?? {};
  const unknown = Object.keys(given).filter((key) => !(key in PLUGIN_SETTINGS) && !(key in SETTINGS));
  if (unknown.length > 0) {
    const names = [...Object.keys(PLUGIN_SETTINGS), ...Object.keys(SETTINGS)].sort();
    const named = unknown.map((key) => {
      const near = nearest(key, names);
      return near === undefined ? key : `${key} (did you mean ${near}?)`;
    });
    throw new OptchatError(
      "CONFIG_INVALID",
      `optchat plugin: unknown option(s) ${named.join(", ")} in opencode.json; known options: ${names.join(", ")}`,
      { options: unknown },
    );
  }
  const coreOverrides: Partial<Record<SettingName, string | number>> = {};
  for (const name of Object.keys(SETTINGS) as SettingName[]) {
    const value = given[name];
    if (typeof value === "string" || typeof value === "number") coreOverrides[name] = value;
  }
  const core = resolveConfig({ env, overrides: coreOverrides });

  const plugin = resolveSettings({
    table: PLUGIN_SETTINGS,
    schema: pluginSchema,
    explicit: given as Partial<Record<PluginSettingName, unknown>>,
    explicitLabel: (name) => `plugin option ${name}`,
    env,
    describe: (name) => `${PLUGIN_SETTINGS[name].env} / option ${name}`,
    title: "Invalid optchat plugin configuration",
  });
  return Object.freeze({ core, plugin: Object.freeze(plugin) });
}
