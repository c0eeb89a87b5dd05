/**
 * What a committed revert does to a session's state in this process, once the memory service has rewound its history
 * (memory.rewindSession, a new generation): pure, so the decision is tested alone (tests/unit/plugin-history-rewind).
 */

/** The parts of the adapter's per-session state a rewind changes (plugin/turns/session-state.ts SessionState). */
export interface RewoundState<Session extends { readonly currentGeneration: number }> {
  session: Session | undefined;
  readonly turns: Map<string, { readonly turnId: string; admitted: boolean; finished: boolean }>;
  readonly turnOfMessage: Map<string, string>;
  readonly pinned: Map<string, unknown>;
  readonly ingested: Set<string>;
  readonly seqs: Map<string, number>;
  seqsLoaded: boolean;
  /** What the requests were built from (plugin/request/slice.ts): the old generation's. */
  readonly request: { forgetHistory(): void };
}

export type RewindDecision =
  | { readonly type: "rewound" }
  /** Memory must go off for the session, for this reason. */
  | { readonly type: "disable"; readonly reason: string };

/**
 * Applies a rewind to generation `generation` after OpenCode removed `removed` (host message ids): the removed turns
 * and every cache of the previous generation go. A prompt admitted before the revert was seen (the revert was staged in
 * another process and its `message.removed` events came after this prompt's admission) belongs to the generation the
 * rewind ended, which cannot be repaired reliably: memory then goes off for the session (seed 000 §12).
 */
export function applyRewind<Session extends { readonly currentGeneration: number }>(
  state: RewoundState<Session>,
  session: Session,
  removed: readonly string[],
  generation: number,
): RewindDecision {
  const gone = new Set(removed);
  const stranded = [...state.turns.values()].find((t) => t.admitted && !t.finished && !gone.has(t.turnId));
  if (stranded) {
    return {
      type: "disable",
      reason: `OpenCode committed a revert for a prompt (${stranded.turnId}) that optchat had already admitted in the history before the revert`,
    };
  }
  state.session = { ...session, currentGeneration: generation };
  state.seqs.clear();
  state.seqsLoaded = false;
  state.request.forgetHistory();
  for (const id of gone) {
    state.turns.delete(id);
    state.turnOfMessage.delete(id);
    state.pinned.delete(id);
    state.ingested.delete(id);
  }
  return { type: "rewound" };
}
