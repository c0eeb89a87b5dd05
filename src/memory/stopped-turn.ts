/**
 * Reads a stopped turn's hand-on (issue 36 deliver 4; rendering in src/core/stopped-turn.ts): when the turn before
 * `turn` in its session failed or was interrupted, its records with the start of their text, for the next turn's
 * previous-exchange block.
 */
import { type StoppedTurn, stoppedTurnOf } from "../core/stopped-turn.js";
import type { Pool } from "../store/db.js";
import { turnStepRows } from "../store/turn-steps.js";
import type { Turn } from "../store/turns.js";

/** Bytes of each record's text read: enough for a call's arguments and a result's start at full detail. */
const HEAD_BYTES = 600;
/** Bytes of a longer result's end read: how it ended (the last detailed lines show it). */
const TAIL_BYTES = 400;
/** The most records of a stopped turn read (the last ones); older ones are counted, not listed. */
const MAX_RECORDS = 6_000;

export async function readStoppedTurn(pool: Pool, previous: Turn): Promise<StoppedTurn | undefined> {
  if (previous.state !== "failed" && previous.state !== "interrupted") return undefined;
  const where = { sessionId: previous.sessionId, generation: previous.generation, turnId: previous.turnId };
  const { rows, total } = await turnStepRows(pool, where, HEAD_BYTES, MAX_RECORDS, TAIL_BYTES);
  // The person's words are in the exchange itself; the hand-on lists what the turn did.
  const records = rows.filter((row) => row.kind !== "user");
  return stoppedTurnOf(previous.state, records, Math.max(0, total - rows.length));
}
