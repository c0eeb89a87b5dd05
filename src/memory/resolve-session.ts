import { OptchatError } from "../core/errors.js";
import type { Session } from "../store/sessions.js";
import { sessionDeleted } from "./retention-epoch.js";
import type { Memory } from "./service.js";

/**
 * Hosts whose session ids a user may type instead of optchat's: OpenCode's (the plugin registers its sessions as host
 * "opencode", and imports from OpenCode's storage do too), then JSONL imports (host "import", the file's `id`).
 */
const HOSTS_BY_PREFERENCE = ["opencode", "import"] as const;

/**
 * The session a user means by `id`: optchat's own session id first (`mem_…`, or `ses_…` for sessions created before
 * optchat's ids got their own prefix), else a host's session id (OpenCode's `ses_…`, an imported file's `id`).
 * SESSION_NOT_FOUND names both kinds when none matches.
 */
export async function resolveSession(memory: Memory, id: string): Promise<Session> {
  const own = await memory.getSession(id).catch((error: unknown) => {
    if (error instanceof OptchatError && (error.code === "SESSION_NOT_FOUND" || error.code === "INPUT_INVALID")) {
      return undefined;
    }
    throw error;
  });
  if (own) return living(own);
  for (const host of HOSTS_BY_PREFERENCE) {
    const found = await memory.host.findSession(host, id).catch((error: unknown) => {
      if (error instanceof OptchatError && error.code === "INPUT_INVALID") return undefined;
      throw error;
    });
    if (found) return living(found);
  }
  throw new OptchatError(
    "SESSION_NOT_FOUND",
    `No session ${id}: give an optchat session id (from \`optchat sessions\`) or an OpenCode session id that the plugin has seen`,
    { sessionId: id },
  );
}

/** A forgotten session is SESSION_DELETED wherever a person names it (issue 40 item 5): its tombstone is no session. */
function living(session: Session): Session {
  if (session.deletedAt !== null) throw sessionDeleted(session.sessionId);
  return session;
}
