/**
 * The plugin's settings declared once: each one's environment variable, default, and the form of its values (a range,
 * a few words, on/off, a pattern, a text) with what it means. The accepted text (errors, docs/configuration.md, README
 * "Configuration") is said from the form here (src/memory/setting-text.ts, as memory's own settings are), and
 * plugin/base/config.ts derives each schema from the same form, so a range or a word is stated once. No zod and no
 * memory service here: OpenCode's thread reads the few settings it needs (plugin/transport/remote-hooks.ts) from these
 * same declarations. Plugin options (the second element of the `["/path/to/optchat/plugin/index.ts", { ... }]` entry
 * in opencode.json) win over the environment.
 */
import { integerText, wordsText, zeroOrIntegerText } from "../../src/memory/setting-text.js";

/** The form of a setting's values: what its schema checks (plugin/base/config.ts) and its accepted text say. */
export type SettingForm =
  | { readonly kind: "integer"; readonly range: readonly [number, number] }
  | { readonly kind: "zeroOrInteger"; readonly range: readonly [number, number]; readonly zero: string }
  | { readonly kind: "words"; readonly meanings: Readonly<Record<string, string>> }
  | { readonly kind: "switch" }
  | {
      readonly kind: "pattern";
      readonly meanings: Readonly<Record<string, string>>;
      readonly pattern: string;
      readonly message: string;
    }
  | { readonly kind: "text"; readonly maxLength: number; readonly accepted: string };

/** A declared setting; `rest` is what its accepted text says after the values (`: what it means`). */
interface Declared<Form extends SettingForm, Default extends string | number> {
  readonly env: string;
  readonly default: Default;
  readonly form: Form;
  readonly rest: string;
}

/** The accepted values of a declared setting, said from its form. */
function acceptedOf({ form, rest }: Declared<SettingForm, string | number>): string {
  switch (form.kind) {
    case "integer":
      return integerText(form.range, rest);
    case "zeroOrInteger":
      return zeroOrIntegerText(form.range, { zero: form.zero }, rest);
    case "words":
    case "pattern":
      return wordsText(form.meanings, rest);
    case "switch":
      return wordsText({ on: "", off: "" }, rest);
    case "text":
      return form.accepted;
  }
}

const integer = <D extends number>(env: string, fallback: D, range: readonly [number, number], rest: string) =>
  ({ env, default: fallback, form: { kind: "integer", range }, rest }) as const;

const zeroOrInteger = <D extends number>(
  env: string,
  fallback: D,
  range: readonly [number, number],
  zero: string,
  rest: string,
) => ({ env, default: fallback, form: { kind: "zeroOrInteger", range, zero }, rest }) as const;

const words = <M extends Readonly<Record<string, string>>>(
  env: string,
  fallback: keyof M & string,
  meanings: M,
  rest = "",
) => ({ env, default: fallback, form: { kind: "words", meanings }, rest }) as const;

const onOff = (env: string, fallback: "on" | "off", rest: string) =>
  ({ env, default: fallback, form: { kind: "switch" }, rest }) as const;

const DECLARED = {
  mode: words("OPTCHAT_MODE", "replace", {
    replace: "older native history is replaced by the memory blocks",
    augment: "native history is kept and only the shared memory block is added",
  }),
  scope: {
    env: "OPTCHAT_SCOPE",
    default: "project",
    form: {
      kind: "pattern",
      meanings: {
        project: "share with every session of the same OpenCode project",
        "profile:<name>": "share across projects that use the same profile",
        isolated: "neither publish nor read shared memory",
      },
      pattern: "^(project|isolated|profile:[A-Za-z0-9_.-]{1,100})$",
      message: "not project, isolated or profile:<name>",
    },
    rest: "",
  },
  readiness: words("OPTCHAT_READINESS", "strict", {
    strict: "stop the request with an actionable error when memory is not ready in time",
    partial: "continue and say in the memory block what is missing",
  }),
  readinessWaitMs: integer(
    "OPTCHAT_READINESS_WAIT_MS",
    15_000,
    [0, 600_000],
    ": how long a model request waits for the compactor before the readiness policy applies (for a turn's first request, counted from the prompt's admission)",
  ),
  previousExchange: onOff("OPTCHAT_PREVIOUS_EXCHANGE", "on", ": include the previous exchange verbatim when it fits"),
  cacheEpochTurns: integer(
    "OPTCHAT_CACHE_EPOCH_TURNS",
    10,
    [1, 1000],
    ": the most turns that re-send the same memory and keep their native messages before the memory is rendered afresh (docs/caching.md; 1: afresh at every turn)",
  ),
  cacheEpochKeptTokens: integer(
    "OPTCHAT_CACHE_EPOCH_KEPT_TOKENS",
    6_000,
    [0, 1_000_000],
    ": native history kept after the memory (estimated tokens) beyond which the next turn renders the memory afresh (docs/caching.md)",
  ),
  embeddedWorker: onOff(
    "OPTCHAT_EMBEDDED_WORKER",
    "on",
    ": run a compactor worker inside each OpenCode process (besides any `optchat worker`)",
  ),
  embeddedWorkerStartMs: integer(
    "OPTCHAT_EMBEDDED_WORKER_START_MS",
    10_000,
    [0, 600_000],
    ": the embedded worker starts when a session first goes idle, when memory is not ready for a request, or this long after OpenCode loads the plugin, whichever comes first (0: at once)",
  ),
  // Ends as soon as the work is done, so a long bound costs nothing normally; 3 s lost a final step's ingestion at
  // load average ~30 (a tool step's ingestion took 1-4 s there).
  closeFlushMs: integer(
    "OPTCHAT_CLOSE_FLUSH_MS",
    10_000,
    [0, 60_000],
    ": how long closing OpenCode (dispose, SIGTERM, SIGINT, SIGHUP) waits for pending ingestion and turn outcomes before it exits",
  ),
  thread: onOff(
    "OPTCHAT_PLUGIN_THREAD",
    "on",
    ": run the plugin's work (database, ingestion, memory assembly, the embedded compactor) in a thread of its own beside OpenCode's, which only forwards its hooks (docs/opencode-notes.md \"The plugin's thread\"); off runs everything in OpenCode's thread",
  ),
  localServer: words(
    "OPTCHAT_LOCAL_SERVER",
    "auto",
    { auto: "`opencode run` processes use it", on: "every OpenCode process", off: "" },
    ": run the plugin's work in the optchat local server, one long-lived process per configuration that OpenCode processes connect to (started by the first one; docs/opencode-notes.md \"The local server\"), instead of the plugin's thread; needs thread on",
  ),
  localServerRuntime: words(
    "OPTCHAT_LOCAL_SERVER_RUNTIME",
    "auto",
    { auto: "Node.js 20.6 or later when it is on PATH, else OpenCode's own Bun", node: "", bun: "" },
    ': what runs the optchat local server; on Node.js a served run costs it about half the CPU (docs/opencode-notes.md "The local server on Node.js")',
  ),
  localServerIdleSeconds: integer(
    "OPTCHAT_LOCAL_SERVER_IDLE_SECONDS",
    300,
    [1, 86_400],
    ": how long the local server stays up with no OpenCode process connected",
  ),
  embeddedWorkerConcurrency: integer(
    "OPTCHAT_EMBEDDED_WORKER_CONCURRENCY",
    2,
    [1, 64],
    ": compactor jobs the embedded worker runs at once",
  ),
  windowTokens: zeroOrInteger(
    "OPTCHAT_WINDOW_TOKENS",
    0,
    [1000, 10_000_000],
    "use the model's context limit from OpenCode's provider configuration",
    ": the window assumed when the model's limit is unknown",
  ),
  outputTokens: zeroOrInteger(
    "OPTCHAT_OUTPUT_TOKENS",
    0,
    [1, 1_000_000],
    "use the model's output limit, else 4096",
    ": tokens reserved for the answer",
  ),
  toolsTokens: integer(
    "OPTCHAT_TOOLS_TOKENS",
    10_000,
    [0, 1_000_000],
    ": tokens charged for tool definitions, which a plugin cannot see (the system prompt is measured)",
  ),
  reserveTokens: integer(
    "OPTCHAT_RESERVE_TOKENS",
    2_048,
    [0, 1_000_000],
    ": safety reserve R of the budget (seed 000 §7)",
  ),
  timingsFile: {
    env: "OPTCHAT_TIMINGS_FILE",
    default: "",
    form: {
      kind: "text",
      maxLength: 4096,
      accepted:
        "empty (off) or a file path: append one JSON line per admission, request transform and ingested message with its duration (`npm run bench -- plugin` reads it)",
    },
    rest: "",
  },
  onSessionDelete: words("OPTCHAT_ON_SESSION_DELETE", "delete", {
    delete:
      "OpenCode's session delete forgets the session's memory: records, summaries, publications; docs/deletion.md",
    archive: "hide it from session listings, keep its memory",
    keep: "change nothing",
  }),
  leaseSeconds: integer(
    "OPTCHAT_LEASE_SECONDS",
    30,
    [5, 3600],
    ": how long a process's claim on a session lasts without renewal (renewed every third of it while a turn runs)",
  ),
} as const;

type DeclaredSettings = typeof DECLARED;
export type PluginSettingName = keyof DeclaredSettings;

/** Every plugin setting with its accepted text (`{ env, default, form, accepted }`), as errors and docs show it. */
export const PLUGIN_SETTINGS = Object.fromEntries(
  Object.entries(DECLARED).map(([name, setting]) => [name, { ...setting, accepted: acceptedOf(setting) }]),
) as { readonly [Name in PluginSettingName]: DeclaredSettings[Name] & { readonly accepted: string } };

/** The value a setting of this form resolves to (plugin/base/config.ts). */
export type SettingValue<Form extends SettingForm> = Form extends { readonly kind: "switch" }
  ? boolean
  : Form extends { readonly kind: "integer" | "zeroOrInteger" }
    ? number
    : Form extends { readonly kind: "words"; readonly meanings: infer Meanings }
      ? keyof Meanings & string
      : string;

/**
 * A setting's given value as every reader takes it: the plugin option wins, an empty environment variable is unset;
 * undefined when neither is given (the default applies).
 */
export function givenSetting(
  name: PluginSettingName,
  options: Readonly<Record<string, unknown>> | undefined,
  env: Readonly<Record<string, string | undefined>>,
): unknown {
  return options?.[name] ?? (env[PLUGIN_SETTINGS[name].env] || undefined);
}
