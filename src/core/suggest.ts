// "Did you mean …?" for names a person types: commands, flags, settings, plugin options. Pure.
//
// An edit distance of a few lines rather than a dependency: the names compared are short (under 40 characters) and
// few (under 100), and the one rule that matters here (a transposed pair, `statsu` for `status`, costs one edit) is
// the optimal string alignment distance below.

/** Optimal string alignment distance: insertions, deletions, substitutions and adjacent transpositions cost 1. */
export function editDistance(a: string, b: string): number {
  const rows: number[][] = [];
  for (let i = 0; i <= a.length; i++) rows.push([i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 0; j <= b.length; j++) (rows[0] as number[])[j] = j;
  for (let i = 1; i <= a.length; i++) {
    const row = rows[i] as number[];
    const above = rows[i - 1] as number[];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min((above[j] as number) + 1, (row[j - 1] as number) + 1, (above[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, ((rows[i - 2] as number[])[j - 2] as number) + 1);
      }
      row[j] = best;
    }
  }
  return (rows[a.length] as number[])[b.length] as number;
}

/**
 * The known name nearest to `given` (case-insensitive), when it is near enough to be a slip: at most a third of the
 * longer name's length in edits (at least 1, at most 4), or `given` is a prefix of exactly one name.
 */
export function nearest(given: string, known: readonly string[]): string | undefined {
  const typed = given.toLowerCase();
  let best: { name: string; distance: number } | undefined;
  for (const name of known) {
    const distance = editDistance(typed, name.toLowerCase());
    if (!best || distance < best.distance) best = { name, distance };
  }
  if (best) {
    const allowed = Math.min(4, Math.max(1, Math.floor(Math.max(typed.length, best.name.length) / 3)));
    if (best.distance <= allowed) return best.name;
  }
  const prefixed = known.filter((name) => typed.length >= 2 && name.toLowerCase().startsWith(typed));
  return prefixed.length === 1 ? prefixed[0] : undefined;
}

/** " Did you mean X?" or "" (to append to a message). */
export function didYouMean(
  given: string,
  known: readonly string[],
  format: (name: string) => string = (n) => n,
): string {
  const match = nearest(given, known);
  return match === undefined ? "" : ` Did you mean ${format(match)}?`;
}
