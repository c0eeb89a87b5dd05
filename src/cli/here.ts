/**
 * Where a person runs `optchat`: the scope the OpenCode plugin puts the sessions of the current directory in, so that
 * commands that read a scope need no --scope (issue 40 item 2).
 *
 * OpenCode names a git project by an id it caches in the repository's common git directory (`<git dir>/opencode`),
 * first computed as the root commit (`git rev-list --max-parents=0 HEAD`); outside git every directory is OpenCode's
 * project "global", which the plugin splits by directory (plugin projectScopeId). The same computation here, through
 * the plugin's own projectScopeId, gives the scope id the plugin opens for a session started in `cwd`.
 */
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { isAbsolute, resolve, sep } from "node:path";
import { promisify } from "node:util";
import { OptchatError } from "../core/errors.js";
import type { ScopeReader } from "../memory/reader.js";
import type { Memory } from "../memory/service.js";
import { openOpencodeStorage, projectScopeId } from "./opencode.js";

const run = promisify(execFile);

export interface Here {
  /** `project:<id>` as the plugin names it with OPTCHAT_SCOPE=project (the default). */
  readonly scopeId: string;
  /** The repository root, or the directory itself outside git. */
  readonly root: string;
}

async function git(cwd: string, args: string[]): Promise<string | undefined> {
  try {
    const { stdout } = await run("git", ["-C", cwd, ...args], { timeout: 5_000 });
    return stdout.trim() || undefined;
  } catch {
    return undefined;
  }
}

/** The plugin's project scope for sessions started in `cwd`. */
export async function projectHere(cwd: string): Promise<Here> {
  const root = await git(cwd, ["rev-parse", "--show-toplevel"]);
  if (root) {
    const common = await git(cwd, ["rev-parse", "--git-common-dir"]);
    const cached = common
      ? await readFile(resolve(isAbsolute(common) ? common : resolve(cwd, common), "opencode"), "utf8").then(
          (text) => text.trim() || undefined,
          () => undefined,
        )
      : undefined;
    const rootCommit = (await git(cwd, ["rev-list", "--max-parents=0", "HEAD"]))?.split("\n")[0]?.trim();
    const id = cached ?? rootCommit;
    if (id) return { scopeId: `project:${projectScopeId({ id, worktree: root, directory: cwd })}`, root };
  }
  return { scopeId: `project:${projectScopeId({ id: "global", worktree: "/", directory: cwd })}`, root: cwd };
}

/**
 * The scope reader a command reads with: --scope when given, else the current directory's project, which must be in
 * memory. The error says where it looked and what to do.
 */
export async function readScopeOrHere(memory: Memory, given: string | undefined, cwd: string): Promise<ScopeReader> {
  if (given) return await memory.readScope(given);
  const here = await projectHere(cwd);
  try {
    return await memory.readScope(here.scopeId);
  } catch (error) {
    if (!(error instanceof OptchatError) || error.code !== "SCOPE_DENIED") throw error;
    // OpenCode's own record of the directory's project, when git alone does not give OpenCode's id.
    const stored = await storedScopeOf(cwd);
    if (stored && stored !== here.scopeId) {
      const found = await memory.readScope(stored).catch(() => undefined);
      if (found) return found;
    }
    throw new OptchatError(
      "SCOPE_DENIED",
      `No memory yet for this directory's project (${here.root}, scope ${here.scopeId}): no OpenCode session with the plugin has run here. Run one here, or pass --scope <scope> (\`optchat scopes\` lists the scopes in memory)`,
      { scopeId: here.scopeId, directory: here.root },
    );
  }
}

/** The project scope OpenCode's storage files `cwd` (or the nearest directory above it) under, if it has one. */
async function storedScopeOf(cwd: string): Promise<string | undefined> {
  try {
    const rows = await openOpencodeStorage().directories();
    const matching = rows
      .filter((row) => cwd === row.directory || cwd.startsWith(`${row.directory}${sep}`))
      .sort((a, b) => b.directory.length - a.directory.length);
    const row = matching.find((r) => r.projectId !== "global" || r.directory === cwd);
    return row
      ? `project:${projectScopeId({ id: row.projectId, worktree: row.worktree, directory: row.directory })}`
      : undefined;
  } catch {
    return undefined;
  }
}
