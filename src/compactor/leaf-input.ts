import { createPayloadTextDecoder } from "../core/payload.js";
import { leafSourceAffixes } from "../core/summary.js";
import type { Pool } from "../store/db.js";
import { PAYLOAD_READ_BYTES, readPayloadBytes, readRecordWithPayload } from "../store/records.js";
import type { Tree } from "../store/trees.js";

/**
 * Payload bytes read and decoded per step for a leaf's text. Read whole, a 64 MiB payload arrived as one 128 MiB hex
 * string that was parsed and decoded in one task; 1 MiB pages keep each step to a few milliseconds, and the event
 * loop turns between them (every page is a round trip).
 */
const LEAF_PAGE_BYTES = PAYLOAD_READ_BYTES;

/**
 * A session leaf's source text (its record's kind and payload as the summarizer reads it), its tool's name and its
 * payload hash.
 */
export async function leafInput(
  pool: Pool,
  tree: Pick<Tree, "treeId" | "kind" | "sessionId" | "generation">,
  index: number,
): Promise<{ kind: string; toolName: string | null; text: string; hash: Buffer }> {
  if (tree.kind !== "session" || tree.sessionId === null || tree.generation === null) {
    throw new Error(`tree ${tree.treeId}: leaves of ${tree.kind} trees are not built by this job`);
  }
  // One round trip for a payload of at most a page (nearly every record), with the record's fields.
  const found = await readRecordWithPayload(pool, tree.sessionId, tree.generation, index, LEAF_PAGE_BYTES);
  if (!found) throw new Error(`record ${tree.sessionId}:${tree.generation}:${index} is missing (integrity error)`);
  const { record } = found;
  // The text is joined once, with the leaf's prefix and suffix: each concatenation of a 64 MiB string is another
  // copy of it in one task when the chunker first reads it.
  const { prefix, suffix } = leafSourceAffixes(record);
  const decoder = createPayloadTextDecoder();
  const pieces: string[] = [prefix];
  if (found.payload) {
    pieces.push(decoder.push(found.payload));
  } else {
    // Blobs are immutable (addressed by their hash), so pages read in separate statements belong to one payload.
    for (let offset = 0; offset < record.payloadBytes; offset += LEAF_PAGE_BYTES) {
      pieces.push(decoder.push(await readPayloadBytes(pool, record.payloadHash, offset, LEAF_PAGE_BYTES)));
    }
  }
  pieces.push(decoder.end(), suffix);
  return { kind: record.kind, toolName: record.toolName, text: pieces.join(""), hash: record.payloadHash };
}
