import type { Hooks, Plugin, PluginInput } from "@opencode-ai/plugin";

/**
 * The optchat plugin for OpenCode 1.18.33. Add it to opencode.json as
 * `"plugin": [["/absolute/path/to/optchat/plugin/index.ts", { "databaseUrl": "postgres://…" }]]`
 * (or a plain path string, with settings from the environment). See README "Use it with OpenCode".
 *
 * Under OpenCode's Bun the plugin runs in a thread of its own (plugin/thread-bridge.ts): OpenCode's thread imports
 * only the bridge and the tools' declarations, and forwards the hooks. An `opencode run` forwards them to the optchat
 * local server instead when one answers (plugin/local-server-client.ts, setting `localServer`). `thread: "off"`
 * (OPTCHAT_PLUGIN_THREAD=off) runs everything in OpenCode's thread, as before (plugin/hooks.ts); so does a runtime
 * without Bun's workers.
 */
export const OptchatPlugin: Plugin = async (input: PluginInput, options?: Record<string, unknown>): Promise<Hooks> => {
  const started = performance.now();
  if (threadWanted(options?.thread ?? process.env.OPTCHAT_PLUGIN_THREAD)) {
    const { bridgedHooks, recordLoad, threadedHooks, workerClass } = await import("./thread-bridge.js");
    // The local server, where this process uses one and it answers (plugin/local-server-client.ts).
    const local = await import("./local-server-client.js")
      .then(({ localServerChannel }) =>
        localServerChannel(options, process.env, new URL("./local-server-entry.ts", import.meta.url)),
      )
      .catch((error: unknown) => {
        process.stderr.write(`optchat: the local server could not be reached (${String(error)}); using a thread\n`);
        return undefined;
      });
    if (local) {
      const hooks = bridgedHooks(input, options, local.channel, { env: local.env, flushOutlivesProcess: true });
      recordLoad(options, "local server", started);
      return hooks;
    }
    const WorkerClass = workerClass();
    try {
      if (WorkerClass) {
        const hooks = threadedHooks(input, options, new URL("./thread-entry.ts", import.meta.url), WorkerClass);
        recordLoad(options, "thread", started);
        return hooks;
      }
    } catch (error) {
      // A thread that cannot start (Bun resolves the entry when the worker is made): run in OpenCode's thread.
      process.stderr.write(
        `optchat: the plugin's thread could not start (${String(error)}); running in OpenCode's thread\n`,
      );
    }
  }
  const { optchatHooks } = await import("./hooks.js");
  return optchatHooks(input, options);
};

/**
 * On unless set off. An invalid value also runs in OpenCode's thread, where the configuration check (plugin/config.ts,
 * setting `thread`) refuses every prompt with the error, as for any other bad setting.
 */
function threadWanted(setting: unknown): boolean {
  if (typeof (globalThis as { Bun?: unknown }).Bun === "undefined") return false;
  if (setting === undefined || setting === "" || setting === true) return true;
  return setting === "on" || setting === "true" || setting === "1";
}
