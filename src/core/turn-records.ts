/**
 * The records a turn owns (issue 9 item 4, docs/shared-memory.md "A turn's records"). Records carry their turn, and
 * a host can interleave two turns' records (OpenCode stores a prompt queued during a tool call between the running
 * turn's records), so a turn's records are a set of maximal runs of consecutive seqs, not one range. A publication
 * covers exactly those runs: the canonical dyadic cover of each run, in order. Every session node of that cover lies
 * inside one run, so it summarizes only the turn's own records.
 */
import { dyadicCover, endOf, type NodeAddress, startOf } from "./tree.js";

/** Records [start, end) of one session generation, all of one turn. */
export interface RecordRun {
  readonly start: number;
  readonly end: number;
}

/** The ordered, disjoint session nodes that exactly tile `runs` (each run's canonical dyadic cover, in order). */
export function coverOfRuns(runs: readonly RecordRun[]): NodeAddress[] {
  return runs.flatMap((run) => dyadicCover(run.start, run.end));
}

/** The runs an ordered, disjoint cover tiles: adjacent nodes merged. */
export function runsOfCover(cover: readonly NodeAddress[]): RecordRun[] {
  const runs: { start: number; end: number }[] = [];
  for (const node of cover) {
    const last = runs[runs.length - 1];
    if (last && last.end === startOf(node)) last.end = endOf(node);
    else runs.push({ start: startOf(node), end: endOf(node) });
  }
  return runs;
}

/** Runs as people read them: inclusive message numbers, `0..2` for one run, `0..0, 2..3` for two. */
export function formatRuns(runs: readonly RecordRun[]): string {
  return runs.map((run) => `${run.start}..${run.end - 1}`).join(", ");
}
