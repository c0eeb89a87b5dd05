import type { Memory, Session, Turn } from "../../src/memory/index.js";
import type { Clock } from "../base/clock.js";
import type { Diagnostics } from "../base/diagnostics.js";
import type { HostPart, RecordDraft } from "../opencode/messages.js";
import { recordEvents } from "../opencode/record-events.js";
import type { SessionState } from "./session-state.js";
import { markAdmitted, noteSeq, setSeqsLoaded } from "./turn-slice.js";

/**
 * A session's memory as this process writes and reads it: the parts of messages still being streamed, the records of
 * finished messages (plugin/opencode/record-events.ts), the host message seqs the transform replaces messages by, and the
 * pinned turns every request and tool call of a turn reads.
 */
export class SessionMemory {
  /** Parts of messages not yet final, by message id (only of sessions this process drives). */
  private readonly parts = new Map<string, Map<string, HostPart>>();

  constructor(
    private readonly memory: Memory,
    private readonly projectId: string,
    private readonly clock: Clock,
    private readonly diagnostics: Diagnostics,
  ) {}

  notePart(part: HostPart): void {
    let parts = this.parts.get(part.messageID);
    if (!parts) {
      parts = new Map();
      this.parts.set(part.messageID, parts);
    }
    parts.set(part.id, part);
  }

  partsOf(messageId: string): HostPart[] {
    return [...(this.parts.get(messageId)?.values() ?? [])];
  }

  dropParts(messageId: string): void {
    this.parts.delete(messageId);
  }

  /** Drops the parts held for a session's messages (the session was deleted). */
  dropSession(hostSessionId: string): void {
    for (const [id, parts] of this.parts)
      if (parts.values().next().value?.sessionID === hostSessionId) this.parts.delete(id);
  }

  /** Stores a finished host message's records and notes the highest seq they got (see `SessionState.seqs`). */
  async ingestDrafts(
    state: SessionState,
    session: Session,
    turnId: string,
    messageId: string,
    at: number | undefined,
    drafts: readonly RecordDraft[],
  ): Promise<void> {
    if (drafts.length === 0) return;
    const results = await this.memory.ingestMany(
      recordEvents(
        {
          sessionId: session.sessionId,
          hostSessionId: state.hostSessionId,
          turnId,
          messageId,
          at,
          fallbackAt: this.clock.now(),
          projectId: this.projectId,
        },
        drafts,
      ),
      // The next request of the turn waits for these to be summarized (readiness): short ones need no model.
      { buildFreeInline: true },
    );
    let max = -1;
    for (const result of results) {
      if ("seq" in result && result.status !== "conflict") max = Math.max(max, result.seq);
      if (result.status === "conflict") {
        await this.diagnostics.problem(
          "ingest",
          state.hostSessionId,
          new Error(`conflicting re-delivery of ${result.eventKey}`),
        );
      }
    }
    if (max >= 0) noteSeq(state, messageId, max);
  }

  /** Merges the database's host message seqs into this process's once per session (see `SessionState.seqs`). */
  async loadSeqs(state: SessionState, session: Session): Promise<void> {
    if (state.seqsLoaded) return;
    const stored = await this.memory.host.hostMessageSeqs(session.sessionId, session.currentGeneration);
    for (const [id, seq] of stored) noteSeq(state, id, seq);
    setSeqsLoaded(state, true);
  }

  /** The turn at its pinned snapshot, once its admission's queued part has run. */
  async pinnedTurn(state: SessionState, session: Session, turnId: string): Promise<Turn> {
    await state.turns.get(turnId)?.admission;
    const known = state.pinned.get(turnId);
    if (known) return known;
    const open = state.turns.get(turnId);
    // A continuation turn (OpenCode going on by itself after a native compaction) is admitted by whatever needs it
    // first: its first request, a memory tool in it, or its first step's ingestion (admission is idempotent).
    const turn =
      open && !open.admitted
        ? await this.memory.admitTurn({ sessionId: session.sessionId, turnId })
        : await this.memory.getTurn({ sessionId: session.sessionId, turnId });
    markAdmitted(state, turnId, turn);
    return turn;
  }
}
