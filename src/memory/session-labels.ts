import { type SessionLabel, sessionLabels } from "../store/sessions.js";
import type { Memory } from "./service.js";

export type { SessionLabel };

/** How a person recognises each session (its host id, title, first prompt): for listings of the CLI and the browser. */
export async function labelSessions(memory: Memory, sessionIds: readonly string[]): Promise<Map<string, SessionLabel>> {
  return await sessionLabels(memory.pool, [...new Set(sessionIds)]);
}
