/**
 * `bench plugin`, case `run`: the reference plugin, which returns no hooks. OpenCode 1.18.33 charges every run that
 * loads any plugin (it then waits for its config directories' dependency check before loading them, docs/opencode-notes.md
 * "Start-up without registry access"), so the run case measures this plugin in the same rounds: what optchat adds beyond
 * it is optchat's own. Exports nothing but the plugin function (OpenCode refuses a module that exports anything else).
 */
export const EmptyPlugin = async () => ({});
