import { randomBytes } from "node:crypto";
import type { z } from "zod";
import { sessionIdFromRandom } from "../core/ids.js";
import type { Pool } from "../store/db.js";
import { findOrRegisterSession, type Session, type SessionVisibility } from "../store/sessions.js";
import { sessionDeleted } from "./retention-epoch.js";
import type { openSessionSchema } from "./schemas.js";

/** The session of a host's session ID, registered (with its scope) on first sight, in one statement. */
export async function openSession(
  pool: Pool,
  valid: z.output<typeof openSessionSchema>,
  defaultVisibility: SessionVisibility,
): Promise<Session> {
  // Scope (seed 000 §11): the project by default; an explicit profile scope shares several projects; an isolated
  // session gets a scope of its own, with no shared tree: it neither publishes nor reads shared memory. A known session
  // is returned as it is (no scope is created for it again: an isolated one would leak a scope).
  const sessionId = sessionIdFromRandom(randomBytes(16));
  const kind = valid.sharing === "isolated" ? "isolated" : valid.scopeId !== undefined ? "profile" : "project";
  const scopeId = kind === "isolated" ? `isolated:${sessionId}` : (valid.scopeId ?? `project:${valid.projectId}`);
  const { session } = await findOrRegisterSession(
    pool,
    {
      sessionId,
      scopeId,
      host: valid.host,
      hostSessionId: valid.hostSessionId,
      projectId: valid.projectId ?? null,
      parentSessionId: valid.parentSessionId ?? null,
      title: valid.title ?? null,
      visibility: valid.visibility ?? defaultVisibility,
    },
    kind,
  );
  // A forgotten session's late host events (or a host that replays it) must not bring its memory back.
  if (session.deletedAt !== null) throw sessionDeleted(session.sessionId);
  return session;
}
