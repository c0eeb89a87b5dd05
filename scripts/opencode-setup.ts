// `npm run opencode-setup`: prepares OpenCode's global config directory so that OpenCode 1.18.33 fetches nothing
// when it starts with the optchat plugin, and adds the plugin to that directory's opencode.json (the README's quick
// start: nothing to edit by hand). `npm run opencode-setup -- --remove` takes the plugin out again (the off switch).
// With `--v2` it configures OpenCode V2 (`@opencode/cli` 2.1.2) instead: the plugin directory `plugin/v2` under V2's
// key `"plugins"` in the same global opencode.json (docs/opencode-v2-notes.md); V2 installs nothing at start-up for a
// local plugin directory, so nothing is linked.
//
// Why: at every start with a plugin configured, OpenCode installs @opencode-ai/plugin into its config directory from
// the npm registry unless the directory already has `node_modules/` and a package-lock.json listing it; with no
// registry it hangs (docs/opencode-notes.md "Start-up without registry access"). This links the copy that this
// project's `npm install` already put in node_modules. Existing files are merged, never replaced.
import { existsSync, lstatSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { redactUrl, resolveConfig } from "../src/memory/config.js";

const PLUGIN_PACKAGE = "@opencode-ai/plugin";
const PLUGIN_VERSION = "1.18.33";
const ROOT = new URL("..", import.meta.url).pathname.replace(/\/$/, "");
const say = (line = "") => process.stdout.write(`${line}\n`);

function readJson(path: string): Record<string, unknown> {
  if (!existsSync(path)) return {};
  try {
    return JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
  } catch (error) {
    throw new Error(`${path} is not valid JSON (${(error as Error).message}); fix or move it, then run this again`);
  }
}

/**
 * Links this checkout's @opencode-ai/plugin into `dir/node_modules` (unless one is there) and lists it in
 * `dir/package.json` and `dir/package-lock.json`, merging with what they hold. The e2e harness uses it too, so the
 * tests that run OpenCode with a closed registry prove it.
 */
export function prepareOpencodeConfigDir(dir: string): { linked: boolean; source: string; others: string[] } {
  const source = join(ROOT, "node_modules", PLUGIN_PACKAGE);
  if (!existsSync(source)) throw new Error(`${source} is missing: run \`npm install\` in ${ROOT} first`);

  mkdirSync(join(dir, "node_modules", "@opencode-ai"), { recursive: true });
  const target = join(dir, "node_modules", PLUGIN_PACKAGE);
  let linked = false;
  try {
    lstatSync(target);
  } catch {
    symlinkSync(source, target, "dir");
    linked = true;
  }

  const manifestPath = join(dir, "package.json");
  const manifest = readJson(manifestPath);
  const dependencies = { ...((manifest.dependencies as Record<string, string>) ?? {}) };
  dependencies[PLUGIN_PACKAGE] ??= PLUGIN_VERSION;
  writeFileSync(manifestPath, `${JSON.stringify({ ...manifest, dependencies }, null, 2)}\n`);

  // OpenCode installs when a dependency of package.json is missing from the lock file's root entry.
  const lockPath = join(dir, "package-lock.json");
  const lock = readJson(lockPath);
  const packages = { ...((lock.packages as Record<string, Record<string, unknown>>) ?? {}) };
  const rootEntry = { ...(packages[""] ?? {}) };
  // Only our entry: listing the user's other dependencies would tell OpenCode they are installed when they may not be.
  rootEntry.dependencies = {
    ...((rootEntry.dependencies as Record<string, string>) ?? {}),
    [PLUGIN_PACKAGE]: dependencies[PLUGIN_PACKAGE] as string,
  };
  packages[""] = rootEntry;
  writeFileSync(
    lockPath,
    `${JSON.stringify({ name: "opencode", lockfileVersion: 3, requires: true, ...lock, packages }, null, 2)}\n`,
  );
  return { linked, source, others: Object.keys(dependencies).filter((name) => name !== PLUGIN_PACKAGE) };
}

/**
 * The opencode.json plugin entry for the database in effect here (DATABASE_URL, else the default). A password is not
 * printed: the line shows `***` and says where to put it, since a terminal's scrollback is not a secret store.
 */
export function pluginLine(databaseUrl: string | null): { line: string; passwordHidden: boolean } {
  if (databaseUrl === null)
    return { line: `"plugin": ${JSON.stringify([`${ROOT}/plugin/index.ts`])}`, passwordHidden: false };
  const shown = redactUrl(databaseUrl);
  const entry = [[`${ROOT}/plugin/index.ts`, { databaseUrl: shown }]];
  return { line: `"plugin": ${JSON.stringify(entry)}`, passwordHidden: shown !== databaseUrl };
}

/** Whether an opencode.json plugin entry is this checkout's plugin (a path string, or [path, options]). */
function isThisPlugin(entry: unknown): boolean {
  const path = Array.isArray(entry) ? entry[0] : entry;
  return typeof path === "string" && path === `${ROOT}/plugin/index.ts`;
}

/**
 * Adds this checkout's plugin to `dir/opencode.json` (created if missing, merged otherwise) unless it is there. The
 * entry is the plain path: the settings (DATABASE_URL among them) then come from the environment OpenCode starts
 * with, so no password is ever written into the file. Returns whether the file changed.
 */
export function addPluginEntry(dir: string): { path: string; added: boolean } {
  const path = join(dir, "opencode.json");
  const config = readJson(path);
  const plugins = Array.isArray(config.plugin) ? [...config.plugin] : [];
  if (plugins.some(isThisPlugin)) return { path, added: false };
  plugins.push(`${ROOT}/plugin/index.ts`);
  const next = { $schema: "https://opencode.ai/config.json", ...config, plugin: plugins };
  mkdirSync(dir, { recursive: true });
  writeFileSync(path, `${JSON.stringify(next, null, 2)}\n`);
  return { path, added: true };
}

/** Removes this checkout's plugin from `dir/opencode.json`; everything else in the file stays. */
export function removePluginEntry(dir: string): { path: string; removed: boolean } {
  const path = join(dir, "opencode.json");
  if (!existsSync(path)) return { path, removed: false };
  const config = readJson(path);
  const plugins = Array.isArray(config.plugin) ? config.plugin : [];
  const kept = plugins.filter((entry) => !isThisPlugin(entry));
  if (kept.length === plugins.length) return { path, removed: false };
  writeFileSync(path, `${JSON.stringify({ ...config, plugin: kept }, null, 2)}\n`);
  return { path, removed: true };
}

/** This checkout's V2 plugin directory, as V2 lists it under `"plugins"`. */
export const V2_PLUGIN_DIR = `${ROOT}/plugin/v2`;

/** Whether a V2 `plugins` entry is this checkout's V2 plugin (a path string, or [path, options]). */
function isThisV2Plugin(entry: unknown): boolean {
  const path = Array.isArray(entry) ? entry[0] : entry;
  return typeof path === "string" && path.replace(/\/(index\.ts)?$/, "") === V2_PLUGIN_DIR;
}

/**
 * Adds this checkout's V2 plugin directory to `dir/opencode.json`'s `"plugins"` (V2's key; V1's `"plugin"` is left as
 * it is) unless it is there; the file is created if missing, merged otherwise. Returns whether the file changed.
 */
export function addV2PluginEntry(dir: string): { path: string; added: boolean } {
  const path = join(dir, "opencode.json");
  const config = readJson(path);
  const plugins = Array.isArray(config.plugins) ? [...config.plugins] : [];
  if (plugins.some(isThisV2Plugin)) return { path, added: false };
  plugins.push(V2_PLUGIN_DIR);
  mkdirSync(dir, { recursive: true });
  writeFileSync(path, `${JSON.stringify({ ...config, plugins }, null, 2)}\n`);
  return { path, added: true };
}

/** Removes this checkout's V2 plugin from `dir/opencode.json`'s `"plugins"`; everything else in the file stays. */
export function removeV2PluginEntry(dir: string): { path: string; removed: boolean } {
  const path = join(dir, "opencode.json");
  if (!existsSync(path)) return { path, removed: false };
  const config = readJson(path);
  const plugins = Array.isArray(config.plugins) ? config.plugins : [];
  const kept = plugins.filter((entry) => !isThisV2Plugin(entry));
  if (kept.length === plugins.length) return { path, removed: false };
  writeFileSync(path, `${JSON.stringify({ ...config, plugins: kept }, null, 2)}\n`);
  return { path, removed: true };
}

/** `--v2`: OpenCode V2's line. */
function mainV2(dir: string, remove: boolean): void {
  if (remove) {
    const { path, removed } = removeV2PluginEntry(dir);
    say(
      removed
        ? `optchat (OpenCode V2) removed from ${path}: V2 runs without it from its next start (\`opencode service stop\` ends a running background service).`
        : `optchat (OpenCode V2) is not in ${path}; nothing changed.`,
    );
    say('Its memory stays in the database (README "Turn it off, or remove it" says how to delete it).');
    return;
  }
  const { path, added } = addV2PluginEntry(dir);
  say("Configuring OpenCode V2 (@opencode/cli 2.1.2); without --v2 this configures OpenCode V1 (opencode-ai 1.18.33).");
  say(added ? `optchat added to ${path}:` : `optchat is already in ${path}:`);
  say(`  "plugins": ${JSON.stringify([V2_PLUGIN_DIR])}`);
  say("  (settings from the environment OpenCode starts with; `npm run opencode-setup -- --v2 --remove` takes it out)");
  const config = resolveConfig({ env: process.env });
  say(
    config.embedded
      ? `The database is the embedded server (DATABASE_URL is not set here), data in ${config.embedded.dataDir}.`
      : "The database is DATABASE_URL's: set it in the environment OpenCode V2 (and its background service) starts with.",
  );
}

function main(): void {
  const args = process.argv.slice(2);
  const configHome = process.env.XDG_CONFIG_HOME || join(homedir(), ".config");
  const dir = args.find((arg) => !arg.startsWith("--")) ?? join(configHome, "opencode");
  if (args.includes("--v2")) {
    mainV2(dir, args.includes("--remove"));
    return;
  }
  if (args.includes("--remove")) {
    const { path, removed } = removePluginEntry(dir);
    say(
      removed
        ? `optchat removed from ${path}: OpenCode runs without it from its next start.`
        : `optchat is not in ${path}; nothing changed.`,
    );
    say('Its memory stays in the database (README "Turn it off, or remove it" says how to delete it).');
    return;
  }
  const config = resolveConfig({ env: process.env });
  // The embedded server needs no URL in the line: each process finds it from the same settings.
  const databaseUrl = config.embedded ? null : config.databaseUrl;
  const { linked, source, others } = prepareOpencodeConfigDir(dir);

  say("Configuring OpenCode V1 (opencode-ai 1.18.33); `--v2` configures OpenCode V2 (@opencode/cli 2.1.2).");
  say(`OpenCode config directory: ${dir}`);
  say(`  ${PLUGIN_PACKAGE}: ${linked ? `linked to ${source}` : "already present (left as it is)"}`);
  say("  package.json and package-lock.json list it, so OpenCode installs nothing at start-up.");
  if (others.length > 0) {
    say(`  Note: package.json also lists ${others.join(", ")}; OpenCode still installs those itself at start-up.`);
  }
  const added = args.includes("--no-plugin") ? undefined : addPluginEntry(dir);
  say();
  if (added) {
    say(added.added ? `optchat added to ${added.path}:` : `optchat is already in ${added.path}:`);
    say(`  "plugin": ${JSON.stringify([`${ROOT}/plugin/index.ts`])}`);
    say("  (settings from the environment OpenCode starts with; `npm run opencode-setup -- --remove` takes it out)");
  } else {
    say("Add optchat to opencode.json (your project's, or the global one in that directory):");
  }
  say();
  const { line, passwordHidden } = pluginLine(databaseUrl);
  if (!added) say(`  ${line}`);
  say();
  say(
    config.embedded
      ? `The database is the embedded server (DATABASE_URL is not set here), data in ${config.embedded.dataDir}; set DATABASE_URL and run this again for another.`
      : "The database is DATABASE_URL's, as set here.",
  );
  if (passwordHidden && !added) {
    say("The password is shown as ***: write it into the line, or leave databaseUrl out of the line and set");
    say("DATABASE_URL in the environment OpenCode starts with.");
  }
  say(
    config.embedded
      ? "Then start OpenCode as usual: the first process starts the server (docs/database.md)."
      : "Then run `npm run optchat -- migrate` once with the same database, and start OpenCode as usual.",
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    main();
  } catch (error) {
    process.stderr.write(`opencode-setup failed: ${(error as Error).message}\n`);
    process.exitCode = 1;
  }
}
