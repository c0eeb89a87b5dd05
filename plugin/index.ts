import type { Hooks, Plugin, PluginInput } from "@opencode-ai/plugin";

/**
 * The optchat plugin for OpenCode 1.18.33. Add it to opencode.json as
 * `"plugin": [["/absolute/path/to/optchat/plugin/index.ts", { "databaseUrl": "postgres://…" }]]`
 * (or a plain path string, with settings from the environment). See README "Use it with OpenCode".
 *
 * OpenCode gets the forwarding hooks at once (plugin/transport/remote-hooks.ts); they reach the plugin's side over a
 * channel set up in the background (plugin/transport/channel.ts): the optchat local server's socket where this process
 * uses one and it answers (an `opencode run`, setting `localServer`), else a thread of its own (the default under
 * OpenCode's Bun), else the loopback in OpenCode's own thread (`thread: "off"`, OPTCHAT_PLUGIN_THREAD=off, or a runtime
 * without Bun's workers). OpenCode's thread imports only the forwarding hooks and the tools' declarations.
 */
/** `.ts` in a checkout (OpenCode's Bun runs the sources), `.js` in the npm package (compiled to dist/). */
const CODE_EXTENSION = import.meta.url.endsWith(".ts") ? ".ts" : ".js";

export const OptchatPlugin: Plugin = async (input: PluginInput, options?: Record<string, unknown>): Promise<Hooks> => {
  const load = { started: performance.now(), waitedMs: undefined as number | undefined };
  const { recordLoad, remoteHooks } = await import("./transport/remote-hooks.js");
  const channel = setUpChannel(options, threadWanted(options?.thread ?? process.env.OPTCHAT_PLUGIN_THREAD));
  void channel.then(
    ({ init }) => init.runner !== "opencode" && recordLoad(options, init.runner, load),
    () => undefined,
  );
  const hooks = remoteHooks(input, options, channel);
  load.waitedMs = performance.now() - load.started;
  return hooks;
};

/**
 * The channel to the plugin's side: the local server's where this process uses one and it answers
 * (plugin/transport/local-server/client.ts), else the plugin's own thread, else (a thread that cannot start: Bun
 * resolves the entry when the worker is made) the loopback.
 */
async function setUpChannel(
  options: Record<string, unknown> | undefined,
  thread: boolean,
): Promise<import("./transport/channel.js").Channel> {
  if (thread) {
    const { workerChannel, workerClass } = await import("./transport/channel.js");
    try {
      const local = await import("./transport/local-server/client.js")
        .then(({ localServerChannel }) =>
          localServerChannel(
            options,
            process.env,
            new URL(`./transport/local-server/entry${CODE_EXTENSION}`, import.meta.url),
          ),
        )
        .catch((error: unknown) => {
          process.stderr.write(`optchat: the local server could not be reached (${String(error)}); using a thread\n`);
          return undefined;
        });
      if (local?.served) return local.served.channel;
      const WorkerClass = workerClass();
      if (WorkerClass)
        return workerChannel(
          new WorkerClass(new URL(`./transport/thread-entry${CODE_EXTENSION}`, import.meta.url).href),
          local?.handOffSocket,
        );
    } catch (error) {
      process.stderr.write(
        `optchat: neither the local server's connection nor the plugin's thread could be set up (${String(error)}); running in OpenCode's thread\n`,
      );
    }
  }
  // OpenCode's own thread: the plugin's side over the loopback, its adapters closed on the process's signals.
  const { inThreadChannel } = await import("./transport/in-thread.js");
  return inThreadChannel();
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
