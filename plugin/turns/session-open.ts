import type { Memory, Session } from "../../src/memory/index.js";
import type { Diagnostics } from "../base/diagnostics.js";
import { HOST } from "../base/identity.js";
import { memoryWasSwitchedOff } from "./session-diagnostics.js";
import type { SessionState } from "./session-state.js";
import type { HostSessions } from "./sessions.js";

export interface SessionOpenDeps {
  readonly memory: Memory;
  /** The plugin's scope setting (OPTCHAT_SCOPE): `project`, `isolated` or `profile:<name>`. */
  readonly scope: string;
  readonly projectId: string;
  readonly sessions: HostSessions;
  /** The parent session of a host session, asked of OpenCode's client (when it is a subagent's). */
  readonly parentOf: (hostSessionId: string) => Promise<string | undefined>;
  readonly diagnostics: Diagnostics;
}

/** What this module alone writes of a session's state. */
interface OpenFields {
  session: Session | undefined;
  opening: Promise<Session | undefined> | undefined;
}

const fields = (state: SessionState): OpenFields => state as unknown as OpenFields;

/** The session's history was rewound in memory (plugin/turns/history-rewind.ts): it goes on at `generation`. */
export function rewoundTo(state: SessionState, session: Session, generation: number): void {
  fields(state).session = { ...session, currentGeneration: generation };
}

/**
 * A host session's session in memory, opened once per process (with its parent and scope): the one writer of a
 * state's `session` and `opening` (concurrent callers share the open under way and its result).
 */
export class SessionOpener {
  constructor(private readonly deps: SessionOpenDeps) {}

  /** The session in memory; undefined when it cannot be opened (the problem is recorded). */
  async open(state: SessionState): Promise<Session | undefined> {
    if (state.session) return state.session;
    const open = fields(state);
    open.opening ??= this.openOnce(state).finally(() => {
      open.opening = undefined;
    });
    return await open.opening;
  }

  private async openOnce(state: SessionState): Promise<Session | undefined> {
    const { memory, sessions, scope } = this.deps;
    try {
      // Asked beside the rest: `chat.message` waits for this open. A session created in this process has no problem
      // recorded yet: not asked (in `opencode run` the lookup needed a second pool connection inside chat.message).
      const rewrittenLookup = sessions.createdHere(state.hostSessionId)
        ? Promise.resolve(undefined)
        : memory.host.findProblem(HOST, state.hostSessionId, "HISTORY_REWRITTEN");
      rewrittenLookup.catch(() => {});
      // A session created in this process says whether it has a parent (`session.created`): no client round trip.
      const parentHost =
        sessions.parentOf(state.hostSessionId) ??
        (sessions.isRoot(state.hostSessionId)
          ? undefined
          : await this.deps.parentOf(state.hostSessionId).catch(() => undefined));
      const parent = parentHost ? await memory.host.findSession(HOST, parentHost) : undefined;
      const session = await memory.openSession({
        host: HOST,
        hostSessionId: state.hostSessionId,
        projectId: this.deps.projectId,
        ...(scope.startsWith("profile:") ? { scopeId: scope } : {}),
        ...(scope === "isolated" ? { sharing: "isolated" as const } : {}),
        ...(parent ? { parentSessionId: parent.sessionId } : {}),
      });
      const rewritten = await rewrittenLookup;
      // Memory was switched off for this session by an earlier process (plugin/turns/session-rewind.ts says why).
      if (rewritten) memoryWasSwitchedOff(state, rewritten.message);
      fields(state).session = session;
      return session;
    } catch (error) {
      await this.deps.diagnostics.problem("open", state.hostSessionId, error);
      return undefined;
    }
  }
}
