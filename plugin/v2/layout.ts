/**
 * Where the memory goes in a V2 request (docs/caching.md "OpenCode V2"). V2 sends the session's history itself (from
 * its latest checkpoint, which optchat writes: compaction.ts), so the memory carries only what V2 does not have: the
 * other conversations' turns from the shared view. Every request keeps V2's own order and bytes, its history growing at
 * the end, and the memory is text leading a user message of the turn it was first sent with, re-sent with the same
 * bytes at every later request (a user message of its own just before the turn's); so each request begins with
 * everything the previous one sent and V2's four cache marks (last tool, system[0], system[3], the last message) read
 * it back.
 *
 * - A rendering (the head, the shared lines that are not only this session's turns) leads the user message of the
 *   first turn this process lays out, and again whenever that message has left V2's history (a compaction).
 * - A later turn's user message is led by what other conversations published since (an update, or nothing).
 * Pure: the hook (turn-hooks.ts) assembles the memory and applies the result.
 */
import type { AssembledContext } from "../../src/memory/index.js";
import { sharedLineRange, sharedThrough } from "../request/cache-epoch.js";
import { MEMORY_CONTINUED, MEMORY_HEAD, sharedUpdateText } from "../request/memory-message.js";
import type { V2Message, V2Text } from "./v2-api.js";

export interface V2Layout {
  /** The user message that carries this layout's rendering. */
  readonly renderedAt: string;
  /** User message id → the text leading it, exactly as first sent ("" for none). */
  readonly leading: Map<string, string>;
  /** Publications shown so far: [0, shownThrough). */
  shownThrough: number;
}

/**
 * The layout after the first request of the turn whose user message is `turnMessageId`: a new rendering when there
 * is no layout yet or its rendering's message is no longer in `messages`, else the update of the shared view since.
 */
export function layoutTurn(
  layout: V2Layout | undefined,
  messages: readonly V2Message[],
  turnMessageId: string,
  context: AssembledContext,
): V2Layout {
  if (layout?.leading.has(turnMessageId)) return layout;
  const own = new Set(context.ownPublications);
  const lines = sharedLines(context);
  const through = Math.max(layout?.shownThrough ?? 0, sharedThrough(lines));
  if (layout && messages.some((m) => m.id === layout.renderedAt)) {
    const picked = othersSince(lines, layout.shownThrough, own);
    layout.leading.set(turnMessageId, sharedUpdateText(context.snapshot.publicationHighWater, picked));
    layout.shownThrough = through;
    return layout;
  }
  return {
    renderedAt: turnMessageId,
    leading: new Map([[turnMessageId, renderText(context, othersSince(lines, 0, own))]]),
    shownThrough: through,
  };
}

/**
 * `messages` (in place) with the text each user message this layout led was first sent with, as a user message of its
 * own just before it. Its own message, not a part of the person's: V2's OpenAI-compatible provider joins a message's
 * text parts into one string, where the memory and the person's words could no longer be told apart.
 */
export function applyLayout(layout: V2Layout, messages: V2Message[]): void {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i] as V2Message;
    const text = message.role === "user" && message.id ? layout.leading.get(message.id) : undefined;
    if (!text) continue;
    const lead: V2Text = { type: "text", text };
    messages.splice(i, 0, { role: "user", content: [lead] });
  }
}

/** The head and the shared block with the lines of other conversations' turns. */
function renderText(context: AssembledContext, lines: readonly string[]): string {
  const shared = context.blocks.find((b) => b.name === "shared_memory");
  const omitted = context.omitted.filter((o) => o.block === "shared memory").map((o) => `${o.block}: ${o.reason}`);
  const parts = [MEMORY_HEAD];
  if (shared) parts.push([shared.pieces[0], ...lines, shared.pieces.at(-1)].join("\n"));
  parts.push(
    [
      `${MEMORY_CONTINUED} shared memory as of publication ${context.snapshot.publicationHighWater}; this conversation's own turns are left out of it (they are in the conversation itself).`,
      ...(omitted.length > 0 ? [`Not included: ${omitted.join("; ")}`] : []),
    ].join("\n"),
  );
  return `${parts.join("\n\n")}\n\n`;
}

function sharedLines(context: AssembledContext): string[] {
  const shared = context.blocks.find((b) => b.name === "shared_memory");
  return shared ? shared.pieces.slice(1, -1) : [];
}

/**
 * The shared lines covering a publication at or past `from` that is not this session's own (a line without a range
 * is kept at a rendering, `from` = 0).
 */
function othersSince(lines: readonly string[], from: number, own: ReadonlySet<number>): string[] {
  return lines.filter((line) => {
    const range = sharedLineRange(line);
    if (!range) return from === 0;
    for (let seq = Math.max(range.start, from); seq < range.end; seq++) if (!own.has(seq)) return true;
    return false;
  });
}
