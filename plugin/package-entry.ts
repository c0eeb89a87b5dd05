/**
 * The npm package's entry (package.json "exports" "."), the module both OpenCode lines load when optchat is installed
 * by name: V1 (`"plugin": ["optchat"]` in opencode.json) and V2 (`opencode plugin add optchat`). Its default export
 * is `{ id, server, setup }`:
 * - V1 1.18.33 refuses a package whose default export has no `server()`, calls `server(input, options)`, and then
 *   also calls `setup(ctx)` with its own context (agent, catalog, command, integration, plugin, … but no `session`
 *   and no `event`);
 * - V2 2.1.2 calls only `setup(ctx)`, with `session.hook` and `event.subscribe`.
 * So each half acts only under its own host: `setup` starts the V2 host only for a context with V2's session hooks
 * and bus, and never in a process where V1 already called `server`. docs/opencode-v2-notes.md "Installed by name".
 */
import type { Hooks, PluginInput } from "@opencode-ai/plugin";

/** Set once V1 called `server()` in this process: its later `setup()` is then V1's, not V2's. */
let servedByV1 = false;

/** Whether `setup(ctx)` was given V2's plugin context (the parts the V2 host needs). */
export function isV2Context(ctx: unknown): boolean {
  const candidate = ctx as { session?: { hook?: unknown }; event?: { subscribe?: unknown } } | null | undefined;
  return typeof candidate?.session?.hook === "function" && typeof candidate?.event?.subscribe === "function";
}

export default {
  id: "optchat",
  /** OpenCode V1: the plugin of plugin/index.ts, with the `[name, options]` entry's options. */
  async server(input: PluginInput, options?: Record<string, unknown>): Promise<Hooks> {
    servedByV1 = true;
    const { OptchatPlugin } = await import("./index.js");
    return OptchatPlugin(input, options);
  },
  /** OpenCode V2: plugin/v2's setup; under V1 (which calls it too) nothing. */
  async setup(ctx: unknown): Promise<(() => Promise<void>) | undefined> {
    if (servedByV1 || !isV2Context(ctx)) return undefined;
    const { default: v2 } = await import("./v2/index.js");
    return v2.setup(ctx);
  },
};
