/**
 * The plugin's settings declared once: each one's environment variable, default and accepted values. Plain data with
 * no imports, so that OpenCode's thread reads the few settings it needs (plugin/transport/remote-hooks.ts) from the
 * same declarations that plugin/base/config.ts validates (its schema) and README "Configuration" lists.
 */
/**
 * The plugin's own settings, each with its environment variable and its plugin option (the second element of the
 * `["/path/to/optchat/plugin/index.ts", { ... }]` entry in opencode.json). Plugin options win over the environment.
 * README "Configuration" lists the same table.
 */
export const PLUGIN_SETTINGS = {
  mode: {
    env: "OPTCHAT_MODE",
    default: "replace",
    accepted:
      "'replace' (older native history is replaced by the memory blocks) or 'augment' (native history is kept and only the shared memory block is added)",
  },
  scope: {
    env: "OPTCHAT_SCOPE",
    default: "project",
    accepted:
      "'project' (share with every session of the same OpenCode project), 'profile:<name>' (share across projects that use the same profile) or 'isolated' (neither publish nor read shared memory)",
  },
  readiness: {
    env: "OPTCHAT_READINESS",
    default: "strict",
    accepted:
      "'strict' (stop the request with an actionable error when memory is not ready in time) or 'partial' (continue and say in the memory block what is missing)",
  },
  readinessWaitMs: {
    env: "OPTCHAT_READINESS_WAIT_MS",
    default: 15_000,
    accepted:
      "an integer from 0 to 600000: how long a model request waits for the compactor before the readiness policy applies (for a turn's first request, counted from the prompt's admission)",
  },
  previousExchange: {
    env: "OPTCHAT_PREVIOUS_EXCHANGE",
    default: "on",
    accepted: "'on' or 'off': include the previous exchange verbatim when it fits",
  },
  cacheEpochTurns: {
    env: "OPTCHAT_CACHE_EPOCH_TURNS",
    default: 10,
    accepted:
      "an integer from 1 to 1000: the most turns that re-send the same memory and keep their native messages before the memory is rendered afresh (docs/caching.md; 1: afresh at every turn)",
  },
  cacheEpochKeptTokens: {
    env: "OPTCHAT_CACHE_EPOCH_KEPT_TOKENS",
    default: 6_000,
    accepted:
      "an integer from 0 to 1000000: native history kept after the memory (estimated tokens) beyond which the next turn renders the memory afresh (docs/caching.md)",
  },
  embeddedWorker: {
    env: "OPTCHAT_EMBEDDED_WORKER",
    default: "on",
    accepted: "'on' or 'off': run a compactor worker inside each OpenCode process (besides any `optchat worker`)",
  },
  embeddedWorkerStartMs: {
    env: "OPTCHAT_EMBEDDED_WORKER_START_MS",
    default: 10_000,
    accepted:
      "an integer from 0 to 600000: the embedded worker starts when a session first goes idle, when memory is not ready for a request, or this long after OpenCode loads the plugin, whichever comes first (0: at once)",
  },
  closeFlushMs: {
    env: "OPTCHAT_CLOSE_FLUSH_MS",
    // Ends as soon as the work is done, so a long bound costs nothing normally; 3 s lost a final step's ingestion at
    // load average ~30 (a tool step's ingestion took 1-4 s there).
    default: 10_000,
    accepted:
      "an integer from 0 to 60000: how long closing OpenCode (dispose, SIGTERM, SIGINT, SIGHUP) waits for pending ingestion and turn outcomes before it exits",
  },
  thread: {
    env: "OPTCHAT_PLUGIN_THREAD",
    default: "on",
    accepted:
      "'on' or 'off': run the plugin's work (database, ingestion, memory assembly, the embedded compactor) in a thread of its own beside OpenCode's, which only forwards its hooks (docs/opencode-notes.md \"The plugin's thread\"); off runs everything in OpenCode's thread",
  },
  localServer: {
    env: "OPTCHAT_LOCAL_SERVER",
    default: "auto",
    accepted:
      "'auto' (`opencode run` processes use it), 'on' (every OpenCode process) or 'off': run the plugin's work in the optchat local server, one long-lived process per configuration that OpenCode processes connect to (started by the first one; docs/opencode-notes.md \"The local server\"), instead of the plugin's thread; needs thread on",
  },
  localServerRuntime: {
    env: "OPTCHAT_LOCAL_SERVER_RUNTIME",
    default: "auto",
    accepted:
      "'auto' (Node.js 20.6 or later when it is on PATH, else OpenCode's own Bun), 'node' or 'bun': what runs the optchat local server; on Node.js a served run costs it about half the CPU (docs/opencode-notes.md \"The local server on Node.js\")",
  },
  localServerIdleSeconds: {
    env: "OPTCHAT_LOCAL_SERVER_IDLE_SECONDS",
    default: 300,
    accepted: "an integer from 1 to 86400: how long the local server stays up with no OpenCode process connected",
  },
  embeddedWorkerConcurrency: {
    env: "OPTCHAT_EMBEDDED_WORKER_CONCURRENCY",
    default: 2,
    accepted: "an integer from 1 to 64: compactor jobs the embedded worker runs at once",
  },
  windowTokens: {
    env: "OPTCHAT_WINDOW_TOKENS",
    default: 0,
    accepted:
      "0 (use the model's context limit from OpenCode's provider configuration) or an integer from 1000 to 10000000: the window assumed when the model's limit is unknown",
  },
  outputTokens: {
    env: "OPTCHAT_OUTPUT_TOKENS",
    default: 0,
    accepted:
      "0 (use the model's output limit, else 4096) or an integer from 1 to 1000000: tokens reserved for the answer",
  },
  toolsTokens: {
    env: "OPTCHAT_TOOLS_TOKENS",
    default: 10_000,
    accepted:
      "an integer from 0 to 1000000: tokens charged for tool definitions, which a plugin cannot see (the system prompt is measured)",
  },
  reserveTokens: {
    env: "OPTCHAT_RESERVE_TOKENS",
    default: 2_048,
    accepted: "an integer from 0 to 1000000: safety reserve R of the budget (seed 000 §7)",
  },
  timingsFile: {
    env: "OPTCHAT_TIMINGS_FILE",
    default: "",
    accepted:
      "empty (off) or a file path: append one JSON line per admission, request transform and ingested message with its duration (`npm run bench -- plugin` reads it)",
  },
  onSessionDelete: {
    env: "OPTCHAT_ON_SESSION_DELETE",
    default: "delete",
    accepted:
      "'delete' (OpenCode's session delete forgets the session's memory: records, summaries, publications; docs/deletion.md), 'archive' (hide it from session listings, keep its memory) or 'keep' (change nothing)",
  },
  leaseSeconds: {
    env: "OPTCHAT_LEASE_SECONDS",
    default: 30,
    accepted:
      "an integer from 5 to 3600: how long a process's claim on a session lasts without renewal (renewed every third of it while a turn runs)",
  },
} as const;

export type PluginSettingName = keyof typeof PLUGIN_SETTINGS;

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
