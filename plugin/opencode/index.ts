/**
 * What the `optchat` command uses of plugin/: OpenCode's own data (its storage, the directories behind the project
 * scopes, its configuration files and the compactor model they name), how the plugin names a project's scope, and the
 * plugin's settings. The only module of plugin/ that src/cli imports (scripts/import-rules.ts checks it; in src/cli,
 * src/cli/opencode.ts is its one importer), so the plugin's inside can move without the CLI.
 */

export { resolvePluginConfig } from "../base/config.js";
export { projectScopeId } from "../base/identity.js";
export { PLUGIN_SETTINGS } from "../base/settings.js";
export { resolveFromOpencode } from "./compactor-model.js";
export { configSourceFromFiles, findOptchatPlugin, PLUGIN_ENTRY, readOpencodeConfigs } from "./config-files.js";
export { importOpencodeSessions, type OpencodeImportSummary } from "./import.js";
export { type ScopeLocation, scopeLocations } from "./project-directories.js";
export { type OpencodeStorage, opencodeDatabasePath, openOpencodeStorage, type StoredSession } from "./storage.js";
