/**
 * The previous exchange's block (docs/caching.md): the previous turn's user and assistant messages word for word, and
 * when that turn stopped mid-way (failed or interrupted), its hand-on (issue 36, src/core/stopped-turn.ts): its error
 * and every call it made, so that "continue" resumes where it stopped.
 */
import { estimateTokens, renderPreviousExchange, verbatimSessionLines } from "../core/context.js";
import { payloadAsText } from "../core/payload.js";
import { renderStoppedTurn, type StoppedTurn } from "../core/stopped-turn.js";
import type { Pool } from "../store/db.js";
import { readTurnMessages } from "../store/records.js";
import { findPreviousTurn, type Turn } from "../store/turns.js";
import type { AssembledBlock } from "./assembly.js";
import { readStoppedTurn } from "./stopped-turn.js";

/** The previous exchange's messages, and the hand-on of the turn when it stopped mid-way (issue 36). */
export interface PreviousSource {
  readonly meta: { readonly sessionId: string; readonly refs: string };
  readonly shown: readonly { readonly seq: number; readonly kind: string; readonly text: string }[];
  readonly stopped?: StoppedTurn;
}

function previousBlock(source: PreviousSource, extra: readonly string[] = []): AssembledBlock {
  const { text, pieces } = renderPreviousExchange(source.meta, source.shown, extra);
  return { name: "previous_exchange", text, pieces, tokens: estimateTokens(text), lines: source.shown.length };
}

/** The most of the window a stopped turn's hand-on takes (it folds coarser past it). */
const HAND_ON_WINDOW_SHARE = 1 / 8;

/**
 * The previous exchange's block; when the previous turn stopped mid-way, with its hand-on (src/core/stopped-turn.ts)
 * folded to fit what the memory blocks leave (at most an eighth of the window), or without it when even folded it
 * does not fit.
 */
export function withHandOn(
  base: AssembledBlock | undefined,
  source: PreviousSource | undefined,
  left: number,
  windowTokens: number,
): AssembledBlock | undefined {
  const stopped = source?.stopped;
  if (!base || !stopped || !source) return base;
  const cap = Math.min(left, Math.floor(windowTokens * HAND_ON_WINDOW_SHARE)) - base.tokens;
  const block = previousBlock(source, renderStoppedTurn(stopped, cap));
  return block.tokens <= left ? block : base;
}

/** The previous turn's messages as a block, or undefined when there is no previous turn or it has none. */
export async function previousExchangeBlock(
  pool: Pool,
  turn: Turn,
): Promise<{ block: AssembledBlock; source: PreviousSource; verbatim: string[] } | undefined> {
  const previous = await findPreviousTurn(pool, turn);
  if (!previous) return undefined;
  const messages = await readTurnMessages(pool, turn.sessionId, turn.generation, previous.turnId);
  if (messages.length === 0) return undefined;
  const first = messages[0]?.seq as number;
  const last = messages[messages.length - 1]?.seq as number;
  const shown = messages.map((m) => ({ seq: m.seq, kind: m.kind, text: payloadAsText(m.payload) }));
  const stopped = await readStoppedTurn(pool, previous);
  const source = {
    meta: { sessionId: turn.sessionId, refs: `${first}+1..${last}+1` },
    shown,
    ...(stopped ? { stopped } : {}),
  };
  return { block: previousBlock(source), source, verbatim: verbatimSessionLines(shown) };
}
