// Listings name sessions the way a person knows them (issue 40 item 2): OpenCode's id and title and the first prompt
// beside optchat's id. The plugin records a session before OpenCode gives it a title, so titles of live sessions are
// read from OpenCode's own storage when it is there.

import type { Memory } from "../memory/service.js";
import { labelSessions, type SessionLabel } from "../memory/session-labels.js";
import { openOpencodeStorage } from "./opencode.js";

export type { SessionLabel };

/** OpenCode's titles by its session id; empty when its storage is not at the default place or cannot be read. */
export async function opencodeTitles(env: NodeJS.ProcessEnv = process.env): Promise<Map<string, string>> {
  try {
    const sessions = await openOpencodeStorage({ env }).sessions();
    return new Map(sessions.filter((s) => s.title).map((s) => [s.id, s.title]));
  } catch {
    return new Map();
  }
}

/** Labels of the sessions, titles filled in from OpenCode's storage where optchat has none. */
export async function sessionLabelsFor(
  memory: Memory,
  sessionIds: readonly string[],
): Promise<Map<string, SessionLabel>> {
  const labels = await labelSessions(memory, sessionIds);
  const untitled = [...labels.values()].filter((label) => label.title === null && label.host === "opencode");
  if (untitled.length === 0) return labels;
  const titles = await opencodeTitles();
  for (const label of untitled) {
    const title = titles.get(label.hostSessionId);
    if (title) labels.set(label.sessionId, { ...label, title });
  }
  return labels;
}

/** `ses_…  "title"  — first prompt` (what is known of it). */
export function describeLabel(label: SessionLabel | undefined): string {
  if (!label) return "";
  const parts = [label.hostSessionId === label.sessionId ? "" : label.hostSessionId];
  if (label.title) parts.push(`"${label.title}"`);
  if (label.firstPrompt && label.firstPrompt !== label.title) parts.push(`first prompt: ${label.firstPrompt}`);
  return parts.filter(Boolean).join("  ");
}
