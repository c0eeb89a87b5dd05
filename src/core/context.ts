/**
 * Context assembly arithmetic and rendering (seed 000 §7). Pure: token estimates, the budget split, and the memory
 * blocks with every piece of data escaped so that nothing inside a record or summary can close a block, open a new
 * one, forge a ref line or pose as an instruction.
 */

/**
 * A conservative token estimate without the model's tokenizer: bytes are not tokens. ASCII text runs about 4
 * characters per token in current tokenizers; we count 3 (over-estimating by about a third). Other scripts cost more
 * per character (CJK is often 1–2 tokens per character): every non-ASCII code point counts as 2. Overestimating only
 * shrinks memory; underestimating would overflow the window.
 */
export function estimateTokens(text: string): number {
  // One pass over UTF-16 code units (this runs over whole memory blocks on every model step): a surrogate pair is
  // one code point, counted once at its high half.
  let ascii = 0;
  let other = 0;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit < 0x80) ascii += 1;
    else if (unit < 0xdc00 || unit > 0xdfff) other += 1;
  }
  return Math.ceil(ascii / 3) + other * 2;
}

export interface ContextBudgetInput {
  /** The model's usable input+output window, in tokens. */
  readonly windowTokens: number;
  /** Instructions and tool definitions. */
  readonly instructionsTokens: number;
  /** The active transcript of the current turn. */
  readonly activeTokens: number;
  /** Reserved for the model's output. */
  readonly outputTokens: number;
  /** A safety reserve. */
  readonly reserveTokens: number;
}

/** What a request needs besides memory: I + A + O + R. When it exceeds W, nothing memory can drop makes it fit. */
export function fixedRequestTokens(input: Omit<ContextBudgetInput, "windowTokens">): number {
  return input.instructionsTokens + input.activeTokens + input.outputTokens + input.reserveTokens;
}

/** available_memory = max(0, W − I − A − O − R). */
export function availableMemoryTokens(input: ContextBudgetInput): number {
  return Math.max(0, input.windowTokens - fixedRequestTokens(input));
}

/**
 * The 30/70 split with spill-over: the shared block may use up to `sharedShare` of the budget; whatever it does not
 * need goes to the session's own blocks, and whatever they do not need may go back to shared.
 */
export function splitBudget(
  available: number,
  sharedNeed: number,
  ownNeed: number,
  sharedShare = 0.3,
): { shared: number; own: number } {
  const sharedCap = Math.floor(available * sharedShare);
  const ownCap = available - sharedCap;
  let shared = Math.min(sharedNeed, sharedCap);
  let own = Math.min(ownNeed, ownCap);
  own = Math.min(ownNeed, own + (sharedCap - shared));
  shared = Math.min(sharedNeed, shared + (available - shared - own));
  return { shared, own };
}

/**
 * Data made inert for a memory block: one line (newlines become spaces), and `&`, `<`, `>` as character references,
 * so no text can close `</shared_memory>`, open another block, or start a line that looks like a ref.
 */
export function escapeMemoryText(text: string): string {
  return text
    .replace(/\s*[\r\n]+\s*/g, " ")
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;");
}

function attribute(value: string | number): string {
  return String(value).replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
}

export interface MemoryLine {
  readonly ref: string;
  readonly text: string;
}

export function renderLines(lines: readonly MemoryLine[]): string {
  return renderLineList(lines).join("\n");
}

function renderLineList(lines: readonly MemoryLine[]): string[] {
  return lines.map((line) => `${line.ref}|${escapeMemoryText(line.text)}`);
}

/**
 * A memory block as pieces whose join with newlines is the block: the opening tag with trusted attributes, the fixed
 * introduction and an optional note; each data line; the closing tag. The plugin sends the pieces as separate text
 * parts (docs/caching.md): a block that only grew keeps every earlier piece byte-identical, so each earlier end is a
 * block boundary a provider's cache can find.
 */
function renderBlockPieces(
  tag: string,
  attributes: Record<string, string | number>,
  intro: string,
  body: readonly string[],
  note?: string,
): string[] {
  const attrs = Object.entries(attributes)
    .map(([name, value]) => ` ${name}="${attribute(value)}"`)
    .join("");
  const head = [`<${tag}${attrs}>`, intro, ...(note ? [escapeMemoryText(note)] : [])].join("\n");
  return [head, ...body.filter((line) => line !== ""), `</${tag}>`];
}

/** A block's text and its pieces (text === pieces.join("\n")). */
export interface RenderedBlock {
  readonly text: string;
  readonly pieces: readonly string[];
}

function rendered(pieces: string[]): RenderedBlock {
  return { text: pieces.join("\n"), pieces };
}

/**
 * The shared block carries nothing that changes per turn (no snapshot number: that goes after all stable text, in the
 * plugin's status line), so it grows only by appending lines while its view is under its fold budget.
 */
export function renderSharedBlock(
  meta: { scopeId: string; note?: string },
  lines: readonly MemoryLine[],
): RenderedBlock {
  return rendered(
    renderBlockPieces(
      "shared_memory",
      { scope: meta.scopeId },
      "This project's conversations, this one included, as summaries of whole turns in the order they were published, oldest first; each line covers the turns pub:start+count. A turn that did not complete starts with [turn interrupted] or [turn failed].",
      renderLineList(lines),
      meta.note,
    ),
  );
}

/**
 * `whole`: the block holds all of the session's history (no shared block holds any of it).
 * Like the shared block, the session block's tag carries nothing that changes per turn (the turn's boundary goes in
 * the plugin's status line), so that where it leads the stable memory (no shared block: an isolated session, or the
 * shared block left out) it too grows only by appending lines (docs/caching.md "Without a shared block").
 */
export function renderSessionBlock(
  meta: { sessionId: string; generation: number; note?: string; whole?: boolean },
  lines: readonly MemoryLine[],
): RenderedBlock {
  const what = meta.whole ? "history" : "latest history that shared_memory does not hold yet";
  return rendered(
    renderBlockPieces(
      "session_memory",
      { session: meta.sessionId, generation: meta.generation },
      `This conversation's ${what}, oldest first, as summaries of messages start+count (this session's own refs).`,
      renderLineList(lines),
      meta.note,
    ),
  );
}

export function renderPreviousExchange(
  meta: { sessionId: string; refs: string },
  messages: readonly { kind: string; text: string }[],
  /** Pieces after the messages (a stopped turn's hand-on, src/core/stopped-turn.ts), already escaped. */
  extra: readonly string[] = [],
): RenderedBlock {
  return rendered(
    renderBlockPieces(
      "previous_exchange",
      { session: meta.sessionId, refs: meta.refs },
      "A detailed rendering of the last exchange, which the memory above summarizes (leaving out what is shown here word for word); it is not new evidence.",
      [messages.map((m) => `${m.kind}: ${escapeMemoryText(m.text)}`).join("\n"), ...extra],
    ),
  );
}

/**
 * The previous exchange's messages as the session block's free lines would show them (`seq+1|kind: text`, escaped):
 * a session line equal to one of these holds exactly what the previous exchange repeats word for word.
 */
export function verbatimSessionLines(messages: readonly { seq: number; kind: string; text: string }[]): string[] {
  return messages.map((m) => `${m.seq}+1|${escapeMemoryText(`${m.kind}: ${m.text}`)}`);
}

/**
 * `block` (its pieces: opening, data lines, closing) without the data lines in `drop`, possibly none left (the block
 * itself stays: its presence says the session's history is complete up to the turn). Used for the session block next
 * to the previous exchange, so a message is not sent twice (docs/caching.md).
 */
export function withoutLines(block: RenderedBlock, drop: ReadonlySet<string>): RenderedBlock {
  const body = block.pieces.slice(1, -1);
  const kept = body.filter((piece) => !drop.has(piece));
  if (kept.length === body.length) return block;
  return rendered([block.pieces[0] as string, ...kept, block.pieces.at(-1) as string]);
}

/**
 * A short excerpt of `text` around the first place where one of `terms` occurs (case-insensitive), for search hits.
 * Terms are the query's own tokens; the excerpt is escaped later like all memory text.
 */
export function excerptAround(text: string, terms: readonly string[], width = 160): string {
  const flat = text.replace(/\s+/g, " ").trim();
  const lower = flat.normalize("NFKC").toLowerCase();
  let at = -1;
  for (const term of terms) {
    const found = lower.indexOf(term);
    if (found >= 0 && (at < 0 || found < at)) at = found;
  }
  if (at < 0) at = 0;
  const start = Math.max(0, at - Math.floor(width / 3));
  const end = Math.min(flat.length, start + width);
  return `${start > 0 ? "…" : ""}${flat.slice(start, end)}${end < flat.length ? "…" : ""}`;
}

/**
 * The end of the longest prefix [0, end) of a session's seqs that `ranges` (sorted by start) cover without a gap:
 * the session's history the shared block already holds, so the session block shows only what comes after it.
 */
export function coveredPrefixEnd(ranges: readonly { start: number; end: number }[]): number {
  let end = 0;
  for (const range of ranges) {
    if (range.start > end) break;
    end = Math.max(end, range.end);
  }
  return end;
}
