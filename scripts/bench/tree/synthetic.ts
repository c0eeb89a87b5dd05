/** `bench tree`'s deterministic synthetic sizes and texts (the fold cases' size model, see index.ts). */
import { NODE_BYTES } from "../../../src/core/summary.js";
import { type NodeAddress, refOf } from "../../../src/core/tree.js";
import { lineAsText } from "../../../src/memory/views.js";

/** A uniform number in [0, 1) from (seed, a, b, c): a 32-bit integer mix, the same on every platform. */
export function unit(seed: number, a: number, b: number, c: number): number {
  let h = (seed ^ 0x9e3779b9) >>> 0;
  for (const v of [a, b, c]) {
    h = Math.imul(h ^ v, 0x85ebca6b) >>> 0;
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35) >>> 0;
    h ^= h >>> 16;
  }
  return (h >>> 0) / 2 ** 32;
}

/** Text sizes of every node of a complete tree over `leaves` leaves (see the file header for the model). */
export class SizeModel {
  /** levels[l][i]: UTF-8 bytes of node (l, i)'s text. */
  readonly levels: Int32Array[] = [];
  /** free[l][i] = 1 when parent (l, i) is the free concatenation of its children. */
  readonly free: Uint8Array[] = [];
  freeParents = 0;
  parents = 0;

  constructor(
    readonly leaves: number,
    readonly seed: number,
  ) {
    const leafSizes = new Int32Array(leaves);
    for (let i = 0; i < leaves; i++) leafSizes[i] = Math.round(100 + 412 * unit(seed, 0, i, 0) ** 3);
    this.levels.push(leafSizes);
    this.free.push(new Uint8Array(leaves));
    for (let level = 1; 2 ** level <= leaves; level++) {
      const below = this.levels[level - 1] as Int32Array;
      const sizes = new Int32Array(Math.floor(below.length / 2));
      const free = new Uint8Array(sizes.length);
      for (let i = 0; i < sizes.length; i++) {
        const joined = (below[2 * i] as number) + 1 + (below[2 * i + 1] as number);
        this.parents += 1;
        if (joined <= NODE_BYTES) {
          sizes[i] = joined;
          free[i] = 1;
          this.freeParents += 1;
        } else {
          sizes[i] = Math.round(120 + (NODE_BYTES - 120) * unit(seed, level, i, 1) ** 2);
        }
      }
      this.levels.push(sizes);
      this.free.push(free);
    }
  }

  bytes(node: NodeAddress): number | undefined {
    return this.levels[node.level]?.[node.index];
  }

  meanLeafBytes(): number {
    const leaves = this.levels[0] as Int32Array;
    let sum = 0;
    for (const size of leaves) sum += size;
    return leaves.length > 0 ? sum / leaves.length : 0;
  }
}

export const WORDS = (
  "the importer queue durable broker retries commit failed passed test suite config worker reads writes file " +
  "src/consumer.ts decided asked wants because ack after before dead-letter open question fixed ordering delay " +
  "seconds ops monitors backups schema migration index lock session view fold node parent leaf summary line " +
  "budget cache prefix zoom record payload hash generation tree compactor job lease heartbeat notify poll " +
  "error timeout pool client transaction"
).split(" ");
export const TAGS = ["user", "assistant", "tool_call", "tool_result", "assistant", "tool_result", "tool_call", "user"];

/** A long run of words (single spaces, no newlines), sliced to make texts of exact lengths. */
export function makeFiller(seed: number, chars: number): string {
  const words: string[] = [];
  let length = 0;
  for (let k = 0; length < chars; k++) {
    const word =
      unit(seed, 7, k, 0) < 0.06
        ? `${TAGS[k % TAGS.length]}:`
        : (WORDS[Math.floor(unit(seed, 7, k, 1) * WORDS.length)] as string);
    words.push(unit(seed, 7, k, 2) < 0.08 ? `${word};` : word);
    length += word.length + 2;
  }
  return words.join(" ");
}

/** Exactly `bytes` ASCII characters, starting with a kind tag, no leading/trailing space, no newline. */
export function syntheticText(filler: string, bytes: number, pick: number, tag: string): string {
  const head = `${tag}: `;
  const bodyLength = Math.max(1, bytes - head.length);
  let at = Math.floor(pick * (filler.length - bodyLength - 64));
  at = filler.indexOf(" ", at) + 1;
  let body = filler.slice(at, at + bodyLength);
  if (body.endsWith(" ")) body = `${body.slice(0, -1)}.`;
  return `${head}${body}`.slice(0, Math.max(bytes, 1));
}

/** Texts of the size model's nodes, made on demand: free parents are their children joined by a newline. */
export class TextModel {
  private readonly texts: (string | undefined)[][];
  private readonly lines: (string | undefined)[][];
  private readonly filler: string;

  constructor(readonly sizes: SizeModel) {
    this.filler = makeFiller(sizes.seed, 400_000);
    this.texts = sizes.levels.map(() => []);
    this.lines = sizes.levels.map(() => []);
  }

  text(node: NodeAddress): string {
    const row = this.texts[node.level] as (string | undefined)[];
    const cached = row[node.index];
    if (cached !== undefined) return cached;
    const bytes = this.sizes.bytes(node) ?? 0;
    let text: string;
    if (node.level > 0 && this.sizes.free[node.level]?.[node.index] === 1) {
      const left = this.text({ level: node.level - 1, index: 2 * node.index });
      const right = this.text({ level: node.level - 1, index: 2 * node.index + 1 });
      text = `${left}\n${right}`;
    } else {
      const tag = node.level === 0 ? (TAGS[node.index % TAGS.length] as string) : "user";
      text = syntheticText(this.filler, bytes, unit(this.sizes.seed, node.level, node.index, 3), tag);
    }
    row[node.index] = text;
    return text;
  }

  /** The view line as the model reads it (`start+count|text`, newlines flattened), through the product's renderer. */
  line(node: NodeAddress): string {
    const row = this.lines[node.level] as (string | undefined)[];
    const cached = row[node.index];
    if (cached !== undefined) return cached;
    const line = lineAsText({ ref: refOf(node), text: this.text(node) });
    row[node.index] = line;
    return line;
  }
}
