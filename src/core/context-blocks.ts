/**
 * The compactor's `<chat>` context cut into cache-stable blocks (issue 13 item 3, seed 002 §4.2 and §8). Pure.
 *
 * Consecutive compactor calls of one tree see almost the same context: the view's lines up to the node, which grows at
 * its end and changes only where the fold merged two lines. A provider's prompt cache reuses an earlier request's
 * prefix only up to a block boundary it has an entry for (Anthropic: an entry is looked up at each block boundary up to
 * 20 blocks before a breakpoint), so the context is sent as several blocks whose boundaries must not move when lines
 * are appended or when something changes further back:
 *
 * - Boundaries are content-defined: a block ends after a line whose hash selects it (once the block holds at least
 *   BLOCK_MIN_BYTES), or when it reaches BLOCK_MAX_BYTES. A boundary depends only on the lines since the previous one,
 *   so appending lines never moves an earlier boundary, and after a changed line the boundaries fall back into step
 *   within a block or two.
 * - When the context is larger than the model's window, whole blocks are dropped from the front, and the first kept
 *   block is rounded up to a multiple of a quantum: the start then moves only after the context has grown by about a
 *   quarter of the window, instead of on every call (dropping the oldest line each time would change the first
 *   bytes of every request, and nothing would ever be read from a cache).
 */

const encoder = new TextEncoder();
const utf8Bytes = (text: string): number => encoder.encode(text).length;

/** A block ends once it holds this much and a line's hash selects it. */
export const BLOCK_MIN_BYTES = 1024;
/** A block never grows past this (a run of lines none of whose hashes selects an end). */
export const BLOCK_MAX_BYTES = 4096;
/** 1 in this many lines ends a block once it is past the minimum: blocks of ~2 KB with lines of ~250 bytes. */
const BOUNDARY_ONE_IN = 4;

export interface ContextBlock {
  /** The block's lines, each followed by a newline (the first block also starts with `<chat>\n`). */
  readonly text: string;
  readonly bytes: number;
  readonly lines: number;
  /**
   * Whether the block ended at a boundary. An open block (the last one, when its lines did not reach a boundary) gets
   * more lines on the next call of the tree, so a cache entry ending with it is read only by a call with this very
   * context (docs/compactor.md "Cache marks").
   */
  readonly closed: boolean;
}

/** FNV-1a over UTF-16 code units: cheap, and the same everywhere. */
function lineHash(line: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < line.length; i++) {
    h ^= line.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** Groups flattened context lines into content-defined blocks (boundaries as described above). */
export function groupLines(lines: readonly string[]): { lines: string[]; bytes: number; closed: boolean }[] {
  const groups: { lines: string[]; bytes: number; closed: boolean }[] = [];
  let current: string[] = [];
  let bytes = 0;
  for (const line of lines) {
    current.push(line);
    bytes += utf8Bytes(line) + 1;
    if ((bytes >= BLOCK_MIN_BYTES && lineHash(line) % BOUNDARY_ONE_IN === 0) || bytes >= BLOCK_MAX_BYTES) {
      groups.push({ lines: current, bytes, closed: true });
      current = [];
      bytes = 0;
    }
  }
  if (current.length > 0) groups.push({ lines: current, bytes, closed: false });
  return groups;
}

/**
 * The groups to keep within `budgetBytes`: a suffix of them, starting at a group index that is a multiple of
 * `quantum` (so the start stays put while the context grows). Everything when it fits.
 */
export function stableWindow<T extends { bytes: number }>(groups: readonly T[], budgetBytes: number): T[] {
  let total = groups.reduce((sum, g) => sum + g.bytes, 0);
  if (total <= budgetBytes) return [...groups];
  const quantum = Math.max(1, Math.floor(budgetBytes / 4 / ((BLOCK_MIN_BYTES + BLOCK_MAX_BYTES) / 2)));
  let start = 0;
  while (start < groups.length && total > budgetBytes) {
    total -= (groups[start] as T).bytes;
    start += 1;
  }
  // Round up to the quantum: at most `quantum - 1` more groups dropped than needed.
  const rounded = Math.min(groups.length, Math.ceil(start / quantum) * quantum);
  return groups.slice(rounded);
}

/**
 * The `<chat>` opening and the context lines as blocks, within `budgetBytes` (see stableWindow). The text of all
 * blocks joined is `<chat>\n` followed by each kept line and a newline; the closing tag belongs to the step that
 * follows (it would otherwise change the last block on every call).
 */
export function contextBlocks(lines: readonly string[], budgetBytes: number): ContextBlock[] {
  const kept = stableWindow(groupLines(lines), Math.max(0, budgetBytes));
  return kept.map((group, k) => {
    const text = `${k === 0 ? "<chat>\n" : ""}${group.lines.join("\n")}\n`;
    return { text, bytes: utf8Bytes(text), lines: group.lines.length, closed: group.closed };
  });
}
