import { looksLikeFork } from "./fork-inherit.js";
import { newSessionState, type RequestSliceView, type SessionState } from "./session-state.js";

/**
 * The host sessions this process knows: the state of each one it drives (plugin/turns/session-state.ts), and what
 * `session.created` said of the sessions created here (a parent, or OpenCode's fork title), which spares a client
 * round trip at their first prompt.
 */
export class HostSessions {
  /** `newRequest` makes each state's request slice (plugin/request/slice.ts, which owns it). */
  constructor(private readonly newRequest: () => RequestSliceView) {}

  private readonly states = new Map<string, SessionState>();
  /** Parents of subagent sessions created in this process (`session.created` carries them). */
  private readonly parents = new Map<string, string>();
  /** Sessions created in this process without a parent. */
  private readonly roots = new Set<string>();
  /** Sessions created in this process with OpenCode's fork title: they may hold copies (plugin/turns/fork-inherit.ts). */
  private readonly forkTitled = new Set<string>();
  /** When (the injected clock's time) `session.created` told of each session created in this process. */
  private readonly createdAt = new Map<string, number>();

  /** The state of a session this process drives (or reconciles), if any. */
  get(hostSessionId: string): SessionState | undefined {
    return this.states.get(hostSessionId);
  }

  /** The session's state, created at first sight. */
  state(hostSessionId: string): SessionState {
    let state = this.states.get(hostSessionId);
    if (!state) {
      state = newSessionState(hostSessionId, this.newRequest());
      this.states.set(hostSessionId, state);
    }
    return state;
  }

  /** A snapshot of the sessions' states. */
  all(): SessionState[] {
    return [...this.states.values()];
  }

  /** The sessions' states as they are when iterated: one added meanwhile (a prompt during a close) is visited too. */
  live(): IterableIterator<SessionState> {
    return this.states.values();
  }

  /** `session.created`, seen at `now`. */
  noteCreated(info: { id?: string; parentID?: string; title?: string } | undefined, now: number): void {
    if (info?.id) this.createdAt.set(info.id, now);
    if (info?.id && info.parentID) this.parents.set(info.id, info.parentID);
    else if (info?.id) this.roots.add(info.id);
    if (info?.id && !info.parentID && looksLikeFork(info.title)) this.forkTitled.add(info.id);
  }

  /** The parent a session created here was given; undefined for a root or a session created elsewhere. */
  parentOf(hostSessionId: string): string | undefined {
    return this.parents.get(hostSessionId);
  }

  /** Created in this process without a parent (so it has none: no lookup needed). */
  isRoot(hostSessionId: string): boolean {
    return this.roots.has(hostSessionId);
  }

  /** Created in this process (so no other process left a turn or a record in it before). */
  createdHere(hostSessionId: string): boolean {
    return this.roots.has(hostSessionId) || this.parents.has(hostSessionId);
  }

  /**
   * Created in this process at most `withinMs` ago (so no other process can have learned its id from OpenCode's
   * storage and prompted it yet: see plugin/turns/admission.ts, where its first claim is not waited for).
   */
  createdRecently(hostSessionId: string, now: number, withinMs: number): boolean {
    const at = this.createdAt.get(hostSessionId);
    return at !== undefined && now - at <= withinMs;
  }

  /**
   * Whether the session may be a fork holding copies of another's messages: not a subagent's, and when created here,
   * only with OpenCode's fork title.
   */
  mayBeFork(hostSessionId: string): boolean {
    return !(this.parents.has(hostSessionId) || (this.roots.has(hostSessionId) && !this.forkTitled.has(hostSessionId)));
  }

  /** Forgets a deleted session. */
  delete(hostSessionId: string): void {
    this.states.delete(hostSessionId);
    this.parents.delete(hostSessionId);
    this.roots.delete(hostSessionId);
    this.createdAt.delete(hostSessionId);
  }
}
