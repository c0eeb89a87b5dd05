/**
 * The hooks OpenCode gets at once, while the plugin's side (the local server's connection, or the plugin's thread) is
 * set up in the background: each call waits for that side's hooks and hands itself over, in the order OpenCode made
 * the calls. The memory tools are declared from their specs (plugin/tools/specs.ts), as the bridge declares them.
 *
 * Why (issue 9 item 2, docs/opencode-notes.md "Eighth pass"): OpenCode 1.18.33 waits for each plugin's function before
 * it goes on with its start, and the set-up (the bridge's import, the connection, the server's `ready` through
 * OpenCode's busy event loop) took 56 ms of that wait (median, `bench plugin`, 20 served runs), while the first hook
 * OpenCode calls comes later in its start (`chat.message`, or an event).
 */
import type { Hooks, ToolContext } from "@opencode-ai/plugin";
import { declaredMemoryTools } from "../tools/specs.js";

/** The hooks the plugin's side answers (plugin/transport/remote-hooks.ts `forwardedHooks`, plugin/host/hooks.ts). */
const DEFERRED_HOOKS = [
  "chat.message",
  "event",
  "experimental.chat.messages.transform",
  "experimental.chat.system.transform",
  "chat.params",
  "experimental.session.compacting",
  "dispose",
] as const;

/**
 * The hooks whose throw OpenCode shows for the prompt: a side that could not be set up at all (not even in OpenCode's
 * thread) refuses prompts with why, as the configuration check does; the other hooks leave it at that.
 */
const REFUSING_HOOKS: ReadonlySet<string> = new Set(["chat.message", "chat.params"]);

type HookFunction = (input: unknown, output: unknown) => Promise<unknown>;
type ToolDefinition = { execute(args: unknown, context: ToolContext): Promise<string> };

/**
 * Hooks that wait for `ready` and call its hooks with the same arguments, so that a hook's changes to OpenCode's output
 * objects and its throws reach OpenCode as they would have. `ready` rejects only when no side could be set up (the
 * caller falls back from the server to a thread to OpenCode's thread itself).
 */
export function deferredHooks(ready: Promise<Hooks>): Hooks {
  const hooks: Record<string, unknown> = {};
  for (const name of DEFERRED_HOOKS) {
    hooks[name] = async (input: unknown, output: unknown) => {
      let side: Hooks;
      try {
        side = await ready;
      } catch (error) {
        if (REFUSING_HOOKS.has(name)) throw new Error(`optchat could not start: ${String(error)}`);
        return;
      }
      await (side[name] as HookFunction | undefined)?.(input, output);
    };
  }
  const tools = declaredMemoryTools(async (name, args, context) => {
    const target = (await ready).tool?.[name] as unknown as ToolDefinition | undefined;
    if (!target) throw new Error(`optchat: the memory tool ${name} is not available`);
    return target.execute(args, context);
  });
  hooks.tool = tools;
  return hooks as Hooks;
}
