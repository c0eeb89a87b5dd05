/**
 * optchat for OpenCode V2 (`@opencode/cli` 2.1.2): the directory V2 loads when it is listed under `"plugins"` in
 * opencode.json (docs/opencode-v2-notes.md). V2 wants a default export `{ id, setup(ctx) }`; setup never throws
 * (a failed start is written to stderr and the plugin stays inert, so the person's turns still run).
 */
import { startV2Host } from "./host.js";

export default {
  id: "optchat",
  /** Returns V2's finalizer (awaited when V2 closes the plugin): flush and close. */
  async setup(ctx: unknown): Promise<(() => Promise<void>) | undefined> {
    try {
      return await startV2Host(ctx as Parameters<typeof startV2Host>[0]);
    } catch (error) {
      process.stderr.write(`optchat (OpenCode V2): not started: ${error instanceof Error ? error.message : error}\n`);
      return undefined;
    }
  },
};
