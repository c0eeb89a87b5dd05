/**
 * What the `optchat` command uses of plugin/: OpenCode's own data (its storage, the directories behind the project
 * scopes, its configuration files and the compactor model they name) and the plugin's settings. The only module of
 * plugin/ that src/cli imports (scripts/import-rules.ts checks it), so the plugin's inside can move without the CLI.
 */
export { resolvePluginConfig } from "../base/config.js";
export { resolveFromOpencode } from "./compactor-model.js";
export { configSourceFromFiles, findOptchatPlugin, PLUGIN_ENTRY, readOpencodeConfigs } from "./config-files.js";
export { importOpencodeSessions, type OpencodeImportSummary } from "./import.js";
export { type ScopeLocation, scopeLocations } from "./project-directories.js";
export { openOpencodeStorage } from "./storage.js";
