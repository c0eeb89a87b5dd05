import { AUTO, createSummarizer, MODEL_SETTINGS_HINT } from "../../compactor/registry.js";
import { type Config, redactUrl, summarizerSettingsOf } from "../../memory/config.js";
import { type Check, checkDatabase, checkModel, checkWorker, DOCTOR_CALL_TIMEOUT_MS } from "../../memory/doctor.js";
import { type Command, integerFlag, type Output, parseCommand } from "../command.js";
import {
  configSourceFromFiles,
  findOptchatPlugin,
  PLUGIN_ENTRY,
  readOpencodeConfigs,
  resolveFromOpencode,
  resolvePluginConfig,
} from "../opencode.js";

const usage = "optchat doctor [--project DIR] [--timeout-ms N] [--json]";

export const doctorCommand: Command = {
  name: "doctor",
  usage: [usage],
  summary:
    "checks the whole set-up, one line each with the fix: database reachable and migrated, an\n" +
    "opencode.json loads the plugin, a worker will run, the compactor model resolves, answers and has a price",
  details:
    "Reads the opencode.json files OpenCode reads for the project in --project (default: the current directory): " +
    "the global one under $XDG_CONFIG_HOME/opencode (~/.config/opencode), $OPENCODE_CONFIG, and the project's " +
    "up to its git root. The plugin entry's options and this environment are its settings, as in OpenCode: run the " +
    "doctor in the environment OpenCode runs in. The model check makes one tiny real call (bounded by " +
    `--timeout-ms, default ${DOCTOR_CALL_TIMEOUT_MS}). Exit code 0 when every check passed, 1 otherwise.`,
  async run(args, ctx) {
    const { values } = parseCommand(args, { project: { type: "string" }, "timeout-ms": { type: "string" } }, 0, usage);
    const timeoutMs = integerFlag(values["timeout-ms"], "timeout-ms", 100, 600_000) ?? DOCTOR_CALL_TIMEOUT_MS;
    const env = process.env;
    const configs = readOpencodeConfigs(values.project ?? process.cwd(), env);
    const entry = findOptchatPlugin(configs);
    const { checks, plugin, config } = opencodeChecks(configs, entry, env, ctx.config);
    const database = await checkDatabase(config);
    checks.push(
      config.databaseUrl !== ctx.config.databaseUrl && database.ok
        ? { ...database, text: `${database.text} (the plugin's databaseUrl in ${entry?.file})` }
        : database,
    );
    checks.push(await checkWorker(config, embeddedWorkerOf(plugin, entry, env), database.ok, plugin === undefined));
    checks.push(
      ...(await checkModel(config, () => resolveModel(config, configs.files.length > 0, configs, env), timeoutMs)),
    );
    const passed = printChecks(ctx.output, checks);
    return passed ? 0 : 1;
  },
};

/** The compactor model as the plugin would get it: with auto inside OpenCode, from OpenCode's config. */
async function resolveModel(
  config: Config,
  inOpencode: boolean,
  configs: ReturnType<typeof readOpencodeConfigs>,
  env: NodeJS.ProcessEnv,
) {
  if (config.summarizer !== AUTO) {
    return {
      summarizer: await createSummarizer(summarizerSettingsOf(config)),
      from: `OPTCHAT_SUMMARIZER=${config.summarizer}`,
    };
  }
  if (!inOpencode) {
    return { summarizer: await createSummarizer(summarizerSettingsOf(config)), from: "auto, from the API key set" };
  }
  const found = await resolveFromOpencode(configSourceFromFiles(configs, env), config);
  if (found.type !== "found") {
    throw new Error(
      `OPTCHAT_SUMMARIZER is auto and OpenCode's config names no model optchat can call${found.type === "none" ? ` (${found.reason})` : ""}; ${MODEL_SETTINGS_HINT}`,
    );
  }
  return {
    summarizer: await createSummarizer(found.settings),
    from: `auto: ${found.from} in opencode.json`,
    fix: "check that provider's baseURL, model and key in opencode.json (or OpenCode's auth) and that its server runs",
  };
}

/** OpenCode's config: the entry, and the settings it gives the plugin (an unknown or bad option stops the plugin). */
function opencodeChecks(
  configs: ReturnType<typeof readOpencodeConfigs>,
  entry: ReturnType<typeof findOptchatPlugin>,
  env: NodeJS.ProcessEnv,
  baseConfig: Config,
): { checks: Check[]; plugin: ReturnType<typeof resolvePluginConfig> | undefined; config: Config } {
  const checks: Check[] = [];
  // OpenCode's config: the entry, and the settings it gives the plugin (an unknown or bad option stops the plugin).
  let config: Config = baseConfig;
  let plugin: ReturnType<typeof resolvePluginConfig> | undefined;
  const read = configs.files.map((f) => f.path);
  if (configs.unreadable.length > 0) {
    for (const bad of configs.unreadable) {
      checks.push({
        name: "opencode",
        ok: false,
        text: `${bad.path} cannot be read: ${bad.error}`,
        fix: "fix the file (OpenCode refuses it too)",
      });
    }
  }
  if (!entry) {
    checks.push({
      name: "opencode",
      ok: false,
      text: `no opencode.json loads optchat (read: ${read.length > 0 ? read.join(", ") : "none found"})`,
      fix: missingEntryFix(baseConfig),
    });
  } else if (!entry.exists) {
    checks.push({
      name: "opencode",
      ok: false,
      text: `${entry.file} loads ${entry.module}, which does not exist`,
      fix: `point the entry at ${PLUGIN_ENTRY}`,
    });
  } else {
    try {
      plugin = resolvePluginConfig(entry.options, env);
      config = plugin.core;
      checks.push({
        name: "opencode",
        ok: true,
        text: `${entry.file} loads ${entry.thisCheckout ? "this checkout's plugin" : `another copy of optchat (${entry.module})`}${Object.keys(entry.options).length > 0 ? ` with options ${Object.keys(entry.options).join(", ")}` : ""}`,
      });
    } catch (error) {
      checks.push({
        name: "opencode",
        ok: false,
        text: `${entry.file}: the plugin's settings are refused: ${(error as Error).message}`,
        fix: "correct the option or environment variable named above",
      });
    }
  }
  return { checks, plugin, config };
}

/** Whether the plugin runs its embedded worker, and which setting says so. */
function embeddedWorkerOf(
  plugin: ReturnType<typeof resolvePluginConfig> | undefined,
  entry: ReturnType<typeof findOptchatPlugin>,
  env: NodeJS.ProcessEnv,
) {
  if (!plugin) return undefined;
  return {
    on: plugin.plugin.embeddedWorker,
    source:
      entry?.options.embeddedWorker !== undefined
        ? `option embeddedWorker in ${entry.file}`
        : env.OPTCHAT_EMBEDDED_WORKER
          ? "OPTCHAT_EMBEDDED_WORKER"
          : "the default",
  };
}

/** One line per check with its fix (or JSON), then the tally; whether every check passed. */
function printChecks(output: Output, checks: readonly Check[]): boolean {
  const failed = checks.filter((c) => !c.ok && !c.skipped);
  const passed = failed.length === 0 && checks.every((c) => c.ok);
  if (output.json) {
    output.out(JSON.stringify({ ok: passed, checks }));
  } else {
    const width = Math.max(...checks.map((c) => c.name.length));
    for (const check of checks) {
      output.out(
        `${check.ok ? "ok  " : check.skipped ? "skip" : "FAIL"}  ${check.name.padEnd(width)}  ${check.text}${check.ok || check.skipped ? "" : ` — fix: ${check.fix}`}`,
      );
    }
    output.out(
      passed
        ? `doctor: all ${checks.length} checks passed`
        : `doctor: ${failed.length} of ${checks.length} checks failed${checks.some((c) => c.skipped) ? ", others skipped until they pass" : ""}`,
    );
  }
  return passed;
}

/**
 * How to load optchat: by name when this CLI is the npm package (OpenCode installs it at its next start), by this
 * checkout's path from a clone (`npm run opencode-setup` writes that entry); the database only when it is not the
 * embedded server, which needs no setting.
 */
function missingEntryFix(config: Config): string {
  const packaged = !PLUGIN_ENTRY.endsWith(".ts");
  const name = packaged ? "optchat" : PLUGIN_ENTRY;
  const entry = config.embedded ? `"${name}"` : `["${name}", {"databaseUrl": "${redactUrl(config.databaseUrl)}"}]`;
  const where = "to the project's opencode.json or the global one (~/.config/opencode/opencode.json)";
  return packaged
    ? `add "plugin": [${entry}] ${where}; OpenCode installs it from npm at its next start`
    : `add "plugin": [${entry}] ${where} (\`npm run opencode-setup\` in this checkout writes it)`;
}
