// Settings come from the environment, where a misspelt name is silently nothing: `OPTCHAT_SUMARIZER=fake` would run
// as if unset. Every OPTCHAT_* variable optchat does not know is reported at start, with the nearest known name.
import { nearest } from "../core/suggest.js";
import { SETTINGS } from "../memory/config.js";
import { PLUGIN_SETTINGS } from "./opencode.js";

/** Variables read outside the two settings tables (plugin/hooks.ts). */
const OTHER_KNOWN = ["OPTCHAT_DEBUG"];
/** The project's own tooling (benchmarks, tests, profiles) reads these; they are not settings of a user's optchat. */
const TOOLING_PREFIXES = ["OPTCHAT_BENCH_", "OPTCHAT_TEST_", "OPTCHAT_PROFILE_"];

export function knownVariables(): string[] {
  return [
    ...Object.values(SETTINGS).map((setting) => setting.env),
    ...Object.values(PLUGIN_SETTINGS).map((setting) => setting.env),
    ...OTHER_KNOWN,
  ].filter((name) => name.startsWith("OPTCHAT_"));
}

/** One line per OPTCHAT_* variable of `env` that is no setting, naming the nearest known one. */
export function unknownVariables(env: Readonly<Record<string, string | undefined>>): string[] {
  const known = knownVariables();
  const knownSet = new Set(known);
  return Object.keys(env)
    .filter((name) => name.startsWith("OPTCHAT_") && !knownSet.has(name))
    .filter((name) => !TOOLING_PREFIXES.some((prefix) => name.startsWith(prefix)))
    .sort()
    .map((name) => {
      const near = nearest(name, known);
      return `optchat: ${name} is not a setting optchat knows, and is ignored.${near ? ` Did you mean ${near}?` : ""} (docs/configuration.md lists them all)`;
    });
}
