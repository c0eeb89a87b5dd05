// The one place src/cli imports plugin/: its public index for the CLI (plugin/opencode/index.ts), so that the
// plugin's layout stays one edit away from the CLI.
export {
  configSourceFromFiles,
  findOptchatPlugin,
  importOpencodeSessions,
  type OpencodeImportSummary,
  type OpencodeStorage,
  opencodeDatabasePath,
  openOpencodeStorage,
  PLUGIN_ENTRY,
  PLUGIN_SETTINGS,
  projectScopeId,
  readOpencodeConfigs,
  resolveFromOpencode,
  resolvePluginConfig,
  type ScopeLocation,
  type StoredSession,
  scopeLocations,
} from "../../plugin/opencode/index.js";
