/**
 * Whether this module instance runs in the plugin's thread (plugin/thread-entry.ts marks it before anything else runs),
 * rather than in OpenCode's own thread. Read where the two differ: who listens for stop signals (plugin/shutdown.ts)
 * and what memory_inspect reports.
 */
let pluginThread = false;

export function markPluginThread(): void {
  pluginThread = true;
}

export function runsInPluginThread(): boolean {
  return pluginThread;
}
