/**
 * What OpenCode's session delete does to memory (issue 15 items 4-5). OpenCode 1.18.33 emits only `session.deleted`
 * for `DELETE /session/:id` (no `message.removed`, docs/opencode-notes.md), so this is the one place a deletion is
 * seen. The setting OPTCHAT_ON_SESSION_DELETE (plugin option onSessionDelete) decides:
 * - `delete` (default): forget the session (src/memory/forget.ts): its records, summaries and publications go, and the
 *   shared summaries are rebuilt without it. The user deleted the conversation; text they chose to delete that keeps
 *   surfacing in every other session is a privacy failure that cannot be undone later, while memory lost on purpose
 *   is what they asked for (OpenCode deleted its own copy too).
 * - `archive`: hide it from listings (memory_sessions, `optchat sessions`, the browser) and keep its memory.
 * - `keep`: change nothing (the behaviour before issue 15).
 * Never throws: a failure is reported through `problem` (memory_inspect, `optchat status`) and the hook goes on.
 */
import { isOptchatError, type Memory } from "../../src/memory/index.js";

export type OnSessionDelete = "delete" | "archive" | "keep";

export interface SessionDeletedDeps {
  readonly memory: Memory;
  readonly host: string;
  readonly mode: OnSessionDelete;
  readonly log: (message: string) => void;
  readonly problem: (error: unknown) => Promise<void>;
}

/** Applies the policy to the host session; `after` is the session's pending ingestion, which finishes first. */
export async function onSessionDeleted(
  deps: SessionDeletedDeps,
  hostSessionId: string,
  after: Promise<unknown>,
): Promise<void> {
  try {
    await after.catch(() => {});
    if (deps.mode === "keep") return;
    const session = await deps.memory.host.findSession(deps.host, hostSessionId);
    if (!session || session.deletedAt !== null) return; // never seen by optchat, or forgotten already
    if (deps.mode === "archive") {
      await deps.memory.archiveSession(session.sessionId, true);
      deps.log(`optchat: archived session ${hostSessionId} (OPTCHAT_ON_SESSION_DELETE=archive)`);
      return;
    }
    const report = await deps.memory.forget({ sessionIds: [session.sessionId] });
    deps.log(
      `optchat: deleted session ${hostSessionId} from memory: ${report.removed.records} records, ${report.publications} publications retired (OPTCHAT_ON_SESSION_DELETE=delete)`,
    );
  } catch (error) {
    if (isOptchatError(error, "SESSION_DELETED")) return;
    await deps.problem(error).catch(() => {});
  }
}
