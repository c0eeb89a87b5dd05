/**
 * The V2 host: OpenCode V2's session hooks and bus events onto the same memory service (src/memory) the V1 adapter
 * uses. What it does, and what it does not do yet, is in docs/opencode-v2-notes.md "The V2 host". Its parts:
 * runtime.ts (memory, sessions, queues, the finalizer), turn-hooks.ts (`prompt`, `context`), events.ts (bus events
 * → records and outcomes), compaction.ts (`compaction` answered from memory), tools.ts (the memory tools).
 */
import { registerCompaction } from "./compaction.js";
import { followEvents } from "./events.js";
import { v2Records } from "./records.js";
import { createV2Runtime } from "./runtime.js";
import { registerMemoryTools } from "./tools.js";
import { registerTurnHooks } from "./turn-hooks.js";
import type { V2Context } from "./v2-api.js";

export { V2_HOST } from "./runtime.js";

/**
 * Starts the host; the function returned is V2's finalizer for the plugin (setup's return value, awaited when V2
 * closes the plugin's scope, e.g. at the end of `opencode run`): it lets late events arrive, flushes every session's
 * queue (bounded) and closes the worker and the memory service.
 */
export async function startV2Host(ctx: V2Context): Promise<() => Promise<void>> {
  const runtime = createV2Runtime(ctx);
  const records = v2Records();
  registerTurnHooks(ctx, runtime, records);
  registerCompaction(ctx, runtime);
  await registerMemoryTools(ctx, runtime);
  followEvents(ctx, runtime, records);
  return () => runtime.close();
}
