// The one place src/cli imports the plugin's internals (what OpenCode stored, how the plugin names a project's scope,
// the plugin's settings). Keeping it to this module makes the plugin's layout one edit away from the CLI.
export { resolveFromOpencode } from "../../plugin/compactor-model.js";
export { PLUGIN_SETTINGS, resolvePluginConfig } from "../../plugin/config.js";
export { projectScopeId } from "../../plugin/identity.js";
export { importOpencodeSessions, type OpencodeImportSummary } from "../../plugin/import-opencode.js";
export {
  configSourceFromFiles,
  findOptchatPlugin,
  PLUGIN_ENTRY,
  readOpencodeConfigs,
} from "../../plugin/opencode-config-files.js";
export {
  type OpencodeStorage,
  opencodeDatabasePath,
  openOpencodeStorage,
  type StoredSession,
} from "../../plugin/opencode-storage.js";
export { type ScopeLocation, scopeLocations } from "../../plugin/project-directories.js";
