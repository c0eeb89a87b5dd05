import { listScopes, type ScopeSummary } from "../../memory/scopes.js";
import { type Command, type Output, parseCommand, withMemory } from "../command.js";
import { openOpencodeStorage, type ScopeLocation, scopeLocations } from "../opencode.js";

const usage = "optchat scopes [--all] [--data-dir DIR] [--json]";

export const scopesCommand: Command = {
  name: "scopes",
  usage: [usage],
  summary: "the scopes in memory with their sessions, and the project directory (and git remote) of each",
  details: `A scope is the set of sessions that share memory. The OpenCode plugin puts a session in
  project:<id>   with OPTCHAT_SCOPE=project (the default): <id> is OpenCode's project id, i.e. the root commit of
                 the git repository, or global-<hash of the directory> outside git;
  profile:<name> with OPTCHAT_SCOPE=profile:<name>;
  isolated:<session> with OPTCHAT_SCOPE=isolated (listed only with --all).
A JSONL import puts its sessions in project:<the file's project>.
The directories come from OpenCode's own storage (--data-dir, default ~/.local/share/opencode), the remote from git.`,
  async run(args, { config, output }) {
    const { values } = parseCommand(args, { all: { type: "boolean" }, "data-dir": { type: "string" } }, 0, usage);
    const scopes = await withMemory(
      config,
      "optchat-cli",
      (memory) => listScopes(memory, { includeIsolated: values.all === true }),
      { readOnly: true },
    );
    const locations = await locate(values["data-dir"]);
    if (output.json) {
      output.out(
        JSON.stringify({
          ok: true,
          scopes: scopes.map((scope) => ({ ...scope, location: locations.get(scope.scopeId) ?? null })),
        }),
      );
      return 0;
    }
    if (scopes.length === 0) output.out("no scopes yet: memory is empty");
    for (const scope of scopes) printScope(scope, locations.get(scope.scopeId), output);
    return 0;
  },
};

/** Locations from OpenCode's storage; none when there is no storage at the default place (nobody asked for it). */
async function locate(dataDir: string | undefined): Promise<Map<string, ScopeLocation>> {
  let storage: ReturnType<typeof openOpencodeStorage>;
  try {
    storage = openOpencodeStorage(dataDir === undefined ? {} : { dataDir });
  } catch (error) {
    if (dataDir !== undefined) throw error;
    return new Map();
  }
  return await scopeLocations(storage);
}

function printScope(scope: ScopeSummary, location: ScopeLocation | undefined, output: Output): void {
  const hosts = Object.entries(scope.hosts)
    .map(([host, n]) => `${host} ${n}`)
    .join(", ");
  output.out(
    `${scope.scopeId}  ${scope.sessions} session(s)${hosts ? ` (${hosts})` : ""}, ${scope.publications} publication(s)${scope.lastTurnAt ? `, last message ${scope.lastTurnAt.toISOString()}` : ""}`,
  );
  if (location) {
    output.out(`    ${location.directory}${location.gitRemote ? `  (${location.gitRemote})` : ""}`);
    for (const other of location.otherDirectories) output.out(`    also ${other}`);
  } else if (scope.kind === "profile" || scope.projectIds.length > 1) {
    output.out(`    projects: ${scope.projectIds.join(", ")}`);
  }
}
