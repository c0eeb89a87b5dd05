import type { Hooks, Plugin, PluginInput } from "@opencode-ai/plugin";

/**
 * The optchat plugin for OpenCode 1.18.33. Add it to opencode.json as
 * `"plugin": [["/absolute/path/to/optchat/plugin/index.ts", { "databaseUrl": "postgres://…" }]]`
 * (or a plain path string, with settings from the environment). See README "Use it with OpenCode".
 *
 * Under OpenCode's Bun the plugin runs in a thread of its own (plugin/transport/remote-hooks.ts): OpenCode's thread imports
 * only the bridge and the tools' declarations, and forwards the hooks. An `opencode run` forwards them to the optchat
 * local server instead when one answers (plugin/transport/local-server/client.ts, setting `localServer`). OpenCode gets the
 * hooks before either is set up (plugin/transport/deferred-hooks.ts). `thread: "off"` (OPTCHAT_PLUGIN_THREAD=off) runs
 * everything in OpenCode's thread, as before (plugin/host/hooks.ts); so does a runtime without Bun's workers.
 */
export const OptchatPlugin: Plugin = async (input: PluginInput, options?: Record<string, unknown>): Promise<Hooks> => {
  const load = { started: performance.now(), waitedMs: undefined as number | undefined };
  if (!threadWanted(options?.thread ?? process.env.OPTCHAT_PLUGIN_THREAD)) return inProcessHooks(input, options);
  // OpenCode gets the hooks at once; its calls wait for the side beside it (plugin/transport/deferred-hooks.ts).
  const { deferredHooks } = await import("./transport/deferred-hooks.js");
  const hooks = deferredHooks(besideHooks(input, options, load));
  load.waitedMs = performance.now() - load.started;
  return hooks;
};

/**
 * The hooks of the plugin's side beside OpenCode: the local server's where this process uses one and it answers
 * (plugin/transport/local-server/client.ts), else the plugin's own thread's, else (a thread that cannot start: Bun resolves the
 * entry when the worker is made) the hooks of OpenCode's own thread.
 */
async function besideHooks(
  input: PluginInput,
  options: Record<string, unknown> | undefined,
  load: { readonly started: number; readonly waitedMs: number | undefined },
): Promise<Hooks> {
  try {
    const { bridgedHooks, recordLoad, threadedHooks, workerClass } = await import("./transport/remote-hooks.js");
    const local = await import("./transport/local-server/client.js")
      .then(({ localServerChannel }) =>
        localServerChannel(options, process.env, new URL("./transport/local-server/entry.ts", import.meta.url)),
      )
      .catch((error: unknown) => {
        process.stderr.write(`optchat: the local server could not be reached (${String(error)}); using a thread\n`);
        return undefined;
      });
    if (local?.served) {
      const { channel, env } = local.served;
      const hooks = bridgedHooks(input, options, channel, { env, flushOutlivesProcess: true });
      recordLoad(options, "local server", load);
      return hooks;
    }
    const WorkerClass = workerClass();
    if (WorkerClass) {
      const hooks = threadedHooks(
        input,
        options,
        new URL("./transport/thread-entry.ts", import.meta.url),
        WorkerClass,
        {
          handOffSocket: local?.handOffSocket,
        },
      );
      recordLoad(options, "thread", load);
      return hooks;
    }
  } catch (error) {
    process.stderr.write(
      `optchat: neither the local server's connection nor the plugin's thread could be set up (${String(error)}); running in OpenCode's thread\n`,
    );
  }
  return inProcessHooks(input, options);
}

async function inProcessHooks(input: PluginInput, options: Record<string, unknown> | undefined): Promise<Hooks> {
  const { optchatHooks } = await import("./host/hooks.js");
  return optchatHooks(input, options);
}

/**
 * On unless set off. An invalid value also runs in OpenCode's thread, where the configuration check (plugin/base/config.ts,
 * setting `thread`) refuses every prompt with the error, as for any other bad setting.
 */
function threadWanted(setting: unknown): boolean {
  if (typeof (globalThis as { Bun?: unknown }).Bun === "undefined") return false;
  if (setting === undefined || setting === "" || setting === true) return true;
  return setting === "on" || setting === "true" || setting === "1";
}
