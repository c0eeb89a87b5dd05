/**
 * Where a request's billed input tokens go (bench cache, docs/caching.md "Measured"): each piece of the request, in
 * the order the provider's cache sees it, is given the share of the read, written and uncached tokens that falls on
 * its bytes (the cache reads a prefix, writes the stretch after it up to the last breakpoint, the rest is uncached),
 * so the shares add up to the request's billed tokens.
 *
 * Pieces: tool definitions (OpenCode's, optchat's memory_* tools), the system prompt, and every message content
 * block, named by what it is: optchat's memory head, the shared block's opening and lines (or the session block's,
 * where it leads the memory), the volatile part, a shared
 * update, the person's prompt (the bench's `[bench sN tK]` marker), or native history (everything else).
 */
import { BYTES_PER_TOKEN } from "../prompt-cache.js";

// biome-ignore lint/suspicious/noExplicitAny: wire JSON as the client sent it
type Json = any;

export const PIECES = [
  "tools",
  "memoryTools",
  "system",
  "memoryHead",
  "sharedOpening",
  "sharedLines",
  "sessionOpening",
  "sessionLines",
  "memoryVolatile",
  "sharedUpdate",
  "prompt",
  "history",
] as const;
export type Piece = (typeof PIECES)[number];

function textPiece(text: string): Piece {
  if (text.startsWith("optchat memory. ")) return "memoryHead";
  if (text.startsWith("<shared_memory")) return "sharedOpening";
  if (text.startsWith("pub:")) return "sharedLines";
  // The session block leads the stable memory when there is no shared block (an isolated session).
  if (text.startsWith("<session_memory")) return "sessionOpening";
  if (/^\d+\+\d+\|/.test(text)) return "sessionLines";
  if (text.startsWith("optchat memory, continued: published")) return "sharedUpdate";
  if (text.startsWith("optchat memory, continued:")) return "memoryVolatile";
  if (/\[bench s\d t\d+\]/.test(text)) return "prompt";
  return "history";
}

/** The request's pieces in cache order with their JSON bytes (the blocks prompt-cache.ts hashes, or messages). */
export function requestPieces(api: "anthropic" | "openai", body: Json): { piece: Piece; bytes: number }[] {
  const out: { piece: Piece; bytes: number }[] = [];
  const size = (value: Json) => Buffer.byteLength(JSON.stringify(value), "utf8");
  for (const tool of body.tools ?? []) {
    const name = String(tool.name ?? tool.function?.name ?? "");
    out.push({ piece: name.startsWith("memory_") ? "memoryTools" : "tools", bytes: size(tool) });
  }
  if (api === "anthropic") for (const block of body.system ?? []) out.push({ piece: "system", bytes: size(block) });
  for (const message of body.messages ?? []) {
    if (message.role === "system") {
      out.push({ piece: "system", bytes: size(message) });
      continue;
    }
    const content = typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content;
    for (const block of Array.isArray(content) ? content : []) {
      const piece = block?.type === "text" ? textPiece(String(block.text)) : "history";
      out.push({ piece, bytes: size(block) });
    }
  }
  return out;
}

/** The request's billed tokens per piece (they add up to `billed(usage)`, up to the estimator's rounding). */
export function billedByPiece(
  pieces: readonly { piece: Piece; bytes: number }[],
  usage: { inputTokens: number; cacheReadTokens: number; cacheWriteTokens: number },
): Record<Piece, number> {
  const totalBytes = pieces.reduce((sum, p) => sum + p.bytes, 0);
  // Positions in tokens, scaled so the pieces span exactly the request's input tokens.
  const scale = totalBytes > 0 ? usage.inputTokens / (totalBytes / BYTES_PER_TOKEN) : 0;
  const read = usage.cacheReadTokens;
  const writeEnd = read + usage.cacheWriteTokens;
  const out = Object.fromEntries(PIECES.map((p) => [p, 0])) as Record<Piece, number>;
  let at = 0;
  for (const { piece, bytes } of pieces) {
    const start = at;
    const end = at + (bytes / BYTES_PER_TOKEN) * scale;
    at = end;
    const r = Math.max(0, Math.min(end, read) - start);
    const w = Math.max(0, Math.min(end, writeEnd) - Math.max(start, read));
    // billed = uncached + 0.1 × read + 1.25 × written (cache.ts `billed`)
    out[piece] += end - start - r - w + 0.1 * r + 1.25 * w;
  }
  return out;
}

/** Sums per-piece figures over requests, rounded. */
export function sumPieces(all: readonly Record<Piece, number>[]): Record<Piece, number> {
  const out = Object.fromEntries(PIECES.map((p) => [p, 0])) as Record<Piece, number>;
  for (const one of all) for (const p of PIECES) out[p] += one[p];
  for (const p of PIECES) out[p] = Math.round(out[p]);
  return out;
}
