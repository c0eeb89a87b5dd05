/**
 * How the shared block's lines are grouped into the memory message's text parts (docs/caching.md "The layout").
 *
 * A provider reads a cached prefix only up to a block boundary where an earlier request put a breakpoint: OpenCode
 * marks the memory message's last part at an epoch's first request, so the end of every stable memory sent so far must
 * stay a part boundary in every later rendering of the same lines, or the next epoch writes the whole memory again.
 * One part per line guarantees that, but each part costs its JSON wrapper (`{"type":"text","text":"…"},`, 26 bytes,
 * ~7 tokens) in every request: 110 lines were ~800 tokens per request (bench cache, s2). So the parts are the stretches
 * between the ends of the renderings seen: a new rendering keeps every earlier end within the lines it shares with the
 * earlier ones, and adds its own end; the lines gained since are one part.
 *
 * The ends are kept per shared block opening (its scope), for the process: the sessions of one project render the
 * same lines and, with the same parts, read each other's cache entries (a new session reads the memory another session
 * wrote). A process that starts afresh sends the lines it has as one part, which costs one write of the memory.
 */

/** Shared block openings (scopes) remembered; past it the least recently rendered is forgotten. */
const MAX_SCOPES = 64;

interface Known {
  readonly lines: readonly string[];
  /** Line counts at which some rendering ended (a part boundary), ascending. */
  readonly ends: readonly number[];
}

export class SharedParts {
  private readonly known = new Map<string, Known>();

  /**
   * `lines` (the shared block's data lines, each ending with its newline) as parts: the lines joined between
   * consecutive boundaries. Records this rendering's end.
   */
  group(opening: string, lines: readonly string[]): string[] {
    const before = this.known.get(opening);
    const common = before ? commonLines(before.lines, lines) : 0;
    const kept = (before?.ends ?? []).filter((end) => end > 0 && end <= common && end < lines.length);
    const ends = lines.length > 0 ? [...kept, lines.length] : kept;
    const parts: string[] = [];
    let from = 0;
    for (const end of ends) {
      parts.push(lines.slice(from, end).join(""));
      from = end;
    }
    // Remember the longer of the two when one extends the other (a session at an older snapshot renders a prefix), so
    // no rendering's end is forgotten while its lines are still current; after a fold, the new lines.
    const longer = before && common === lines.length && before.lines.length > lines.length ? before : undefined;
    const remembered: Known = longer
      ? { lines: longer.lines, ends: union(longer.ends, ends) }
      : {
          lines: [...lines],
          ends: union(
            (before?.ends ?? []).filter((end) => end <= common),
            ends,
          ),
        };
    this.known.delete(opening);
    this.known.set(opening, remembered);
    if (this.known.size > MAX_SCOPES) this.known.delete(this.known.keys().next().value as string);
    return parts;
  }
}

function commonLines(a: readonly string[], b: readonly string[]): number {
  let k = 0;
  while (k < a.length && k < b.length && a[k] === b[k]) k++;
  return k;
}

function union(a: readonly number[], b: readonly number[]): number[] {
  return [...new Set([...a, ...b])].sort((x, y) => x - y);
}

/** The process's grouping, shared by every session it serves. */
export const processSharedParts = new SharedParts();
