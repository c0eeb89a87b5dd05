/**
 * The opencode.json files OpenCode 1.18.33 reads, as `optchat doctor` checks them (issue 37 item 4): whether one
 * loads this plugin, with what options, and which compactor model `auto` would get from them. Read the way OpenCode
 * does (docs/opencode-notes.md "Start-up without registry access"): the global config directory
 * `$XDG_CONFIG_HOME/opencode` (`~/.config/opencode`), `$OPENCODE_CONFIG` when set, and opencode.json(c) and
 * `.opencode/opencode.json(c)` in the project directory and each parent up to the git worktree's root; nearer files
 * win. JSONC comments and trailing commas are accepted.
 */
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { OpencodeConfigSource } from "./compactor-model.js";

export interface OpencodeConfigFile {
  readonly path: string;
  readonly config: Record<string, unknown>;
}

export interface OpencodeConfigs {
  /** Files read, the nearest (highest precedence) last. */
  readonly files: readonly OpencodeConfigFile[];
  /** Files that exist and could not be read or parsed, with why. */
  readonly unreadable: readonly { readonly path: string; readonly error: string }[];
}

const NAMES = ["opencode.json", "opencode.jsonc", "config.json"];

/** Reads every config file OpenCode would read for a project in `projectDir`, lowest precedence first. */
export function readOpencodeConfigs(
  projectDir: string,
  env: Readonly<Record<string, string | undefined>>,
): OpencodeConfigs {
  const candidates: string[] = [];
  const configHome = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), ".config");
  for (const name of NAMES) candidates.push(join(configHome, "opencode", name));
  if (env.OPENCODE_CONFIG) candidates.push(resolve(env.OPENCODE_CONFIG));
  // From the worktree's root down to the project directory: nearer files win.
  const chain: string[] = [];
  for (let dir = resolve(projectDir); ; dir = dirname(dir)) {
    chain.unshift(dir);
    if (existsSync(join(dir, ".git")) || dirname(dir) === dir) break;
  }
  for (const dir of chain) {
    for (const name of ["opencode.json", "opencode.jsonc"]) {
      candidates.push(join(dir, name), join(dir, ".opencode", name));
    }
  }
  const files: OpencodeConfigFile[] = [];
  const unreadable: { path: string; error: string }[] = [];
  for (const path of [...new Set(candidates)]) {
    if (!existsSync(path)) continue;
    try {
      const parsed = JSON.parse(stripJsonc(readFileSync(path, "utf8")));
      if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error("not a JSON object");
      files.push({ path, config: parsed as Record<string, unknown> });
    } catch (error) {
      unreadable.push({ path, error: (error as Error).message });
    }
  }
  return { files, unreadable };
}

/** JSONC to JSON: comments outside strings removed, trailing commas before `}` or `]` dropped. */
export function stripJsonc(text: string): string {
  let out = "";
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j;
    } else if (c === "/" && text[i + 1] === "/") {
      while (i < text.length && text[i] !== "\n") i++;
      out += "\n";
    } else if (c === "/" && text[i + 1] === "*") {
      const end = text.indexOf("*/", i + 2);
      i = end < 0 ? text.length : end + 1;
    } else out += c;
  }
  return out.replace(/,(\s*[}\]])/g, "$1");
}

/** A plugin entry of some opencode.json that loads optchat. */
export interface OptchatPluginEntry {
  readonly file: string;
  /** The entry's module as written. */
  readonly module: string;
  /** Its options (the tuple's second element), {} for a plain string. */
  readonly options: Record<string, unknown>;
  /** The module's file exists. */
  readonly exists: boolean;
  /** It is this checkout's plugin (not another copy of optchat). */
  readonly thisCheckout: boolean;
}

/** This checkout's plugin entry module. */
export const PLUGIN_ENTRY = fileURLToPath(
  new URL(import.meta.url.endsWith(".ts") ? "../index.ts" : "../index.js", import.meta.url),
);

/**
 * The entry that loads optchat, from the nearest file that lists one (nearer files win in OpenCode's merge); an
 * entry loads optchat when it is this checkout's plugin/index.ts or names optchat.
 */
export function findOptchatPlugin(configs: OpencodeConfigs): OptchatPluginEntry | undefined {
  const own = realPath(PLUGIN_ENTRY);
  for (const file of [...configs.files].reverse()) {
    const plugins = file.config.plugin;
    if (!Array.isArray(plugins)) continue;
    for (const item of plugins) {
      const [module, options] = Array.isArray(item) ? item : [item, {}];
      if (typeof module !== "string") continue;
      const path = module.startsWith("file://") ? fileURLToPath(module) : module;
      const resolved = path.startsWith("/") ? path : resolve(dirname(file.path), path);
      const thisCheckout = realPath(resolved) === own;
      if (!thisCheckout && !/optchat/i.test(module)) continue;
      return {
        file: file.path,
        module,
        options: options && typeof options === "object" ? (options as Record<string, unknown>) : {},
        // A package name (`optchat`, `optchat@0.1.0`): OpenCode installs it from the npm registry at its start.
        exists: isPackageName(module) || existsSync(resolved),
        thisCheckout,
      };
    }
  }
  return undefined;
}

/** An npm package specifier rather than a path: what `"plugin": ["optchat"]` lists (OpenCode installs it itself). */
function isPackageName(module: string): boolean {
  return /^(@[a-z0-9][\w.-]*\/)?[a-z0-9][\w.-]*(@[^/\\]+)?$/i.test(module) && !/\.(ts|js|mjs)$/.test(module);
}

function realPath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}

/** OpenCode's built-in providers optchat can call, with the SDK package and the key variable OpenCode reads. */
const BUILT_IN: Readonly<Record<string, { npm: string; keyEnv: string }>> = {
  anthropic: { npm: "@ai-sdk/anthropic", keyEnv: "ANTHROPIC_API_KEY" },
  openai: { npm: "@ai-sdk/openai", keyEnv: "OPENAI_API_KEY" },
};

/**
 * What `client.config.get()` and `client.config.providers()` would answer (plugin/opencode/compactor-model.ts reads those),
 * approximated from the files, the environment and OpenCode's auth.json (`opencode auth login`): the merged `model`
 * and `small_model`, the providers declared in the files, and the built-in Anthropic and OpenAI providers when a key
 * is found for them. OpenCode itself may know more (its model list); `optchat doctor` says the result is read from
 * the files.
 */
export function configSourceFromFiles(
  configs: OpencodeConfigs,
  env: Readonly<Record<string, string | undefined>>,
): OpencodeConfigSource {
  const merged: { model?: string; small_model?: string; provider: Record<string, Record<string, unknown>> } = {
    provider: {},
  };
  for (const { config } of configs.files) {
    if (typeof config.model === "string") merged.model = config.model;
    if (typeof config.small_model === "string") merged.small_model = config.small_model;
    const providers = config.provider;
    if (providers && typeof providers === "object") {
      for (const [id, value] of Object.entries(providers as Record<string, Record<string, unknown>>)) {
        merged.provider[id] = { ...(merged.provider[id] ?? {}), ...value };
      }
    }
  }
  const auth = readAuth(env);
  const named = [merged.model, merged.small_model].filter((m): m is string => typeof m === "string" && m.includes("/"));
  const modelsOf = (id: string, npm: string, declared: Record<string, Record<string, unknown>> = {}) => {
    const models: Record<string, unknown> = {};
    for (const [model, entry] of Object.entries(declared)) {
      models[model] = {
        ...entry,
        api: { npm: (entry.provider as { npm?: string })?.npm ?? npm, id: entry.id ?? model },
      };
    }
    for (const full of named) {
      const [provider, ...rest] = full.split("/");
      const model = rest.join("/");
      if (provider === id && !models[model]) models[model] = { api: { npm, id: model } };
    }
    return models;
  };
  const providers: Record<string, unknown>[] = [];
  for (const [id, value] of Object.entries(merged.provider)) {
    const npm = typeof value.npm === "string" ? value.npm : (BUILT_IN[id]?.npm ?? "");
    const options = (value.options ?? {}) as Record<string, unknown>;
    const keyEnv = BUILT_IN[id]?.keyEnv;
    providers.push({
      id,
      key: (keyEnv ? env[keyEnv] : undefined) || auth[id] || undefined,
      options,
      models: modelsOf(id, npm, (value.models ?? {}) as Record<string, Record<string, unknown>>),
    });
  }
  for (const [id, builtIn] of Object.entries(BUILT_IN)) {
    if (merged.provider[id]) continue;
    const key = env[builtIn.keyEnv] || auth[id];
    if (key) providers.push({ id, key, options: {}, models: modelsOf(id, builtIn.npm) });
  }
  return {
    configGet: async () => ({ data: { model: merged.model, small_model: merged.small_model } }),
    configProviders: async () => ({ data: { providers, default: {} } }),
  };
}

/** Keys from OpenCode's auth.json (`opencode auth login`), by provider id. */
function readAuth(env: Readonly<Record<string, string | undefined>>): Record<string, string> {
  const dataHome = env.XDG_DATA_HOME || join(env.HOME || homedir(), ".local", "share");
  try {
    const parsed = JSON.parse(readFileSync(join(dataHome, "opencode", "auth.json"), "utf8")) as Record<
      string,
      { key?: unknown }
    >;
    return Object.fromEntries(
      Object.entries(parsed).flatMap(([id, entry]) => (typeof entry?.key === "string" ? [[id, entry.key]] : [])),
    );
  } catch {
    return {};
  }
}
