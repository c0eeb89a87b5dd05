import { createHash } from "node:crypto";

/** Where the plugin's side runs: OpenCode's thread (the loopback), the plugin's thread, or the local server. */
export type PluginRunner = "opencode" | "thread" | "local server";

/** The host name optchat records for OpenCode's sessions, problems and leases. */
export const HOST = "opencode";

/** The OpenCode project id as an opaque id (it is a hash or "global"; anything else is made safe). */
function safeId(value: string): string {
  const cleaned = value
    .replace(/[^A-Za-z0-9_.:-]/g, "_")
    .replace(/^[.-]+/, "")
    .slice(0, 200);
  return cleaned || "global";
}

/**
 * The project a session's memory is shared in: OpenCode's project id (the repository's root commit), except for
 * directories outside git, which OpenCode all files under one project "global": those share by directory instead, so
 * unrelated scratch directories do not see each other's memory.
 */
export function projectScopeId(project: { id: string; worktree: string; directory?: string }): string {
  if (project.id !== "global") return safeId(project.id);
  const where = project.directory ?? project.worktree;
  return `global-${createHash("sha256").update(where).digest("hex").slice(0, 16)}`;
}
