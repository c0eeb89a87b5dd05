/**
 * Which directory on disk each optchat project scope stands for. The plugin names a scope `project:<id>` after
 * OpenCode's project (projectScopeId: the repository's root commit, or a hash of the directory outside git), which
 * tells a user nothing; OpenCode's storage knows the directories behind each project, and git the remote.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { promisify } from "node:util";
import { projectScopeId } from "../base/identity.js";
import type { OpencodeStorage } from "./storage.js";

const run = promisify(execFile);

export interface ScopeLocation {
  /** The repository root (git projects) or the directory (outside git). */
  readonly directory: string;
  /** Other directories OpenCode ran this project's sessions in (subdirectories, other worktrees). */
  readonly otherDirectories: readonly string[];
  /** `git remote get-url origin` (or the first remote), when the directory is still a git checkout with one. */
  readonly gitRemote: string | null;
  /** OpenCode sessions stored for it. */
  readonly opencodeSessions: number;
}

/** `project:<id>` scope ids, as the plugin opens them with OPTCHAT_SCOPE=project, to where they are on disk. */
export async function scopeLocations(storage: OpencodeStorage): Promise<Map<string, ScopeLocation>> {
  const grouped = new Map<string, { worktree: string; directories: Map<string, number>; global: boolean }>();
  for (const row of await storage.directories()) {
    const scopeId = `project:${projectScopeId({ id: row.projectId, worktree: row.worktree, directory: row.directory })}`;
    const entry = grouped.get(scopeId) ?? {
      worktree: row.projectId === "global" ? row.directory : row.worktree,
      directories: new Map<string, number>(),
      global: row.projectId === "global",
    };
    entry.directories.set(row.directory, (entry.directories.get(row.directory) ?? 0) + row.sessions);
    grouped.set(scopeId, entry);
  }
  const out = new Map<string, ScopeLocation>();
  for (const [scopeId, entry] of grouped) {
    const sessions = [...entry.directories.values()].reduce((a, b) => a + b, 0);
    out.set(scopeId, {
      directory: entry.worktree,
      otherDirectories: [...entry.directories.keys()].filter((dir) => dir !== entry.worktree),
      gitRemote: entry.global ? null : await gitRemote(entry.worktree),
      opencodeSessions: sessions,
    });
  }
  return out;
}

async function gitRemote(directory: string): Promise<string | null> {
  if (!existsSync(directory)) return null;
  const git = (args: string[]) =>
    run("git", ["-C", directory, ...args], { timeout: 5_000 }).then(
      (result) => result.stdout.trim(),
      () => "",
    );
  const origin = await git(["remote", "get-url", "origin"]);
  if (origin) return origin;
  const [first] = (await git(["remote"])).split("\n").filter(Boolean);
  return first ? (await git(["remote", "get-url", first])) || null : null;
}
