import type { Session } from "../../src/memory/index.js";
import { rewoundTo } from "./session-open.js";
import type { SessionState } from "./session-state.js";
import { rewindTurns } from "./turn-slice.js";

/**
 * What a committed revert does to a session's state in this process, once the memory service has rewound its history
 * (memory.rewindSession, a new generation): no I/O, so the decision is tested alone (tests/unit/plugin-history-rewind);
 * the writes are the slices' own transitions (session-open.ts `rewoundTo`, turn-slice.ts `rewindTurns`).
 */

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
export function applyRewind(
  state: SessionState,
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
  rewoundTo(state, session, generation);
  rewindTurns(state, gone);
  state.request.forgetHistory();
  return { type: "rewound" };
}
