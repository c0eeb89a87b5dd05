/**
 * Binary range trees (seed 002 §3, seed 000 §4). Node (level, index) covers leaves [index·2^level, (index+1)·2^level)
 * and is addressed `start+count`. The same structure serves session trees (leaves = records) and shared trees
 * (leaves = publications).
 */
export interface NodeAddress {
  readonly level: number;
  readonly index: number;
}

/** 2^level for levels 0..52 (exact in a double); a table lookup is several times cheaper than `2 ** level` here. */
const POW2: readonly number[] = Array.from({ length: 53 }, (_, level) => 2 ** level);

export function pow2(level: number): number {
  return POW2[level] ?? 2 ** level;
}

export function startOf(node: NodeAddress): number {
  return node.index * pow2(node.level);
}

export function countOf(node: NodeAddress): number {
  return pow2(node.level);
}

export function endOf(node: NodeAddress): number {
  return (node.index + 1) * pow2(node.level);
}

export function parentOf(node: NodeAddress): NodeAddress {
  return { level: node.level + 1, index: Math.floor(node.index / 2) };
}

export function siblingOf(node: NodeAddress): NodeAddress {
  return { level: node.level, index: node.index ^ 1 };
}

export function childrenOf(node: NodeAddress): [NodeAddress, NodeAddress] {
  if (node.level === 0) throw new RangeError("a leaf has no children");
  return [
    { level: node.level - 1, index: node.index * 2 },
    { level: node.level - 1, index: node.index * 2 + 1 },
  ];
}

export function refOf(node: NodeAddress): string {
  return `${startOf(node)}+${countOf(node)}`;
}

/** A number identifying (level, index) within one tree, for Map keys (numbers hash far faster than strings). */
export function nodeKey(node: NodeAddress): number {
  return node.index * 64 + node.level;
}

/**
 * Parses `start+count`: count a power of two, start aligned to it (seed 002 §7.1). Returns undefined for anything
 * else, including counts beyond 2^40.
 */
export function parseRef(ref: string): NodeAddress | undefined {
  const match = /^(\d{1,15})\+(\d{1,15})$/.exec(ref.trim());
  if (!match) return undefined;
  const start = Number(match[1]);
  const count = Number(match[2]);
  if (count < 1 || count > 2 ** 40) return undefined;
  const level = Math.log2(count);
  if (!Number.isInteger(level) || start % count !== 0) return undefined;
  return { level, index: start / count };
}

/**
 * The readiness rule (seed 002 §4.1). Leaves are built strictly in order, so "every view part before the node's end is
 * a summary" reduces to comparing with `builtLeaves`, the length of the built prefix of leaves:
 * - a leaf i is ready when its record exists and i === builtLeaves (everything before it is summarized);
 * - a parent is ready when both children are built and its end <= builtLeaves.
 */
export function leafReady(index: number, leafCount: number, builtLeaves: number): boolean {
  return index < leafCount && index === builtLeaves;
}

export function parentReady(parent: NodeAddress, childrenBuilt: boolean, builtLeaves: number): boolean {
  return childrenBuilt && endOf(parent) <= builtLeaves;
}

/**
 * The ordered, disjoint nodes exactly tiling [start, end): the canonical dyadic cover (at most 2·log2 nodes). Used for
 * a publication's source cover and for the coarsest possible cover of a prefix.
 */
export function dyadicCover(start: number, end: number): NodeAddress[] {
  const out: NodeAddress[] = [];
  let at = start;
  while (at < end) {
    let level = 0;
    while (at % 2 ** (level + 1) === 0 && at + 2 ** (level + 1) <= end) level += 1;
    out.push({ level, index: at / 2 ** level });
    at += 2 ** level;
  }
  return out;
}
