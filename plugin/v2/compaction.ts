/**
 * V2's `compaction` hook answered from optchat's own memory: `result` set to optchat's view of the session, so V2
 * records it as the checkpoint and asks no model (0 model tokens; docs/opencode-v2-notes.md "Hook order"). Left
 * unset when the memory cannot answer: V2 then compacts natively and the person's turn goes on either way.
 */
import { escapeMemoryText } from "../../src/memory/index.js";
import type { V2Runtime } from "./runtime.js";
import type { V2CompactionInput, V2Context } from "./v2-api.js";

/** The view's budget: a checkpoint well inside the ~15,000 recent tokens V2 keeps after compacting. */
const VIEW_BUDGET_TOKENS = 8_000;

/** How long a compaction waits for the compactor to summarize the session's latest records. */
const SETTLE_MS = 3_000;

export const CHECKPOINT_HEAD =
  "optchat's summary of this session so far (memory_zoom opens any ref down to the exact messages):";

export function registerCompaction(ctx: V2Context, runtime: V2Runtime): void {
  ctx.session.hook("compaction", async (input: V2CompactionInput) => {
    try {
      const entry = await runtime.entryOf(input.sessionID);
      await entry.queue;
      const memory = await runtime.memory();
      // The latest records summarized where the compactor manages it in time; unsummarized parts say "zoom it".
      await memory.settle(entry.sessionId, { timeoutMs: SETTLE_MS }).catch(() => undefined);
      const view = await memory.view(entry.sessionId, { budget: VIEW_BUDGET_TOKENS });
      // Each line under the ref memory_zoom takes (`session:generation:start+count`), as in the injected memory.
      const lines = view.lines.map(
        (line) => `${entry.sessionId}:${entry.generation}:${line.ref}|${escapeMemoryText(line.text)}`,
      );
      input.result = {
        summary: [CHECKPOINT_HEAD, ...lines].join("\n"),
        metadata: { optchat: { revision: view.revision, lines: lines.length } },
      };
    } catch (error) {
      runtime.report("compaction", error);
    }
  });
}
