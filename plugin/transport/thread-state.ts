/**
 * Where this module instance runs the plugin's work: in OpenCode's own thread (the default state), in the plugin's
 * thread (plugin/transport/thread-entry.ts marks it before anything else runs) or in the local server (plugin/transport/local-server/server.ts).
 * Read where they differ: who listens for stop signals (plugin/transport/shutdown.ts) and what memory_inspect reports.
 */
export type PluginRunner = "opencode" | "thread" | "local server";

let runner: PluginRunner = "opencode";

export function markPluginThread(where: Exclude<PluginRunner, "opencode">): void {
  runner = where;
}

/** True outside OpenCode's own thread: OpenCode's stop signals reach only that thread, which forwards them. */
export function runsInPluginThread(): boolean {
  return runner !== "opencode";
}

export function pluginRunner(): PluginRunner {
  return runner;
}
