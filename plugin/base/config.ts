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
  zeroOrIntegerFrom,
} from "../../src/memory/index.js";
import { PLUGIN_SETTINGS, type PluginSettingName, type SettingForm, type SettingValue } from "./settings.js";

export { PLUGIN_SETTINGS, type PluginSettingName } from "./settings.js";

const onOff = z.union([z.boolean(), z.enum(["on", "off", "true", "false", "1", "0"])]).transform((v) => {
  if (typeof v === "boolean") return v;
  return v === "on" || v === "true" || v === "1";
});

/** "a, b or c". */
const orList = (words: readonly string[]) =>
  words.length > 1 ? `${words.slice(0, -1).join(", ")} or ${words.at(-1)}` : words.join("");

/** The schema of a setting's form (plugin/base/settings.ts): the same numbers and words its accepted text says. */
function schemaOf(form: SettingForm): z.ZodTypeAny {
  switch (form.kind) {
    case "integer":
      return integerFrom(...form.range);
    case "zeroOrInteger":
      return zeroOrIntegerFrom(...form.range);
    case "words": {
      const words = Object.keys(form.meanings) as [string, ...string[]];
      return z.enum(words, { errorMap: () => ({ message: `not ${orList(words)}` }) });
    }
    case "switch":
      return onOff;
    case "pattern":
      return z.string().regex(new RegExp(form.pattern), form.message);
    case "text":
      return z.string().max(form.maxLength, `longer than ${form.maxLength} characters`);
  }
}

export type PluginSettings = {
  readonly [Name in PluginSettingName]: SettingValue<(typeof PLUGIN_SETTINGS)[Name]["form"]>;
};

const pluginSchema = z.object(
  Object.fromEntries(Object.entries(PLUGIN_SETTINGS).map(([name, setting]) => [name, schemaOf(setting.form)])),
) as unknown as z.ZodType<PluginSettings>;

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
