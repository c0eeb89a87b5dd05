import type { Hooks, ToolContext } from "@opencode-ai/plugin";
import { describe, expect, it } from "vitest";
import { PromptRefused } from "../../plugin/base/prompt-refused.js";
import { MEMORY_TOOL_SPECS } from "../../plugin/tools/specs.js";
import { deferredHooks } from "../../plugin/transport/deferred-hooks.js";

/**
 * The hooks OpenCode gets before the plugin's side is set up (plugin/transport/deferred-hooks.ts): calls made meanwhile wait,
 * reach the side in the order OpenCode made them, with OpenCode's own output objects; throws and tool results come
 * back as the side gave them.
 */

type AnyHook = (input: unknown, output: unknown) => Promise<void>;

function deferred<T>() {
  let resolve: (value: T) => void = () => {};
  let reject: (error: unknown) => void = () => {};
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe("deferredHooks", () => {
  it("holds calls made before the side is ready and hands them over in order, with OpenCode's objects", async () => {
    const side = deferred<Hooks>();
    const calls: string[] = [];
    const hooks = deferredHooks(side.promise) as unknown as Record<string, AnyHook>;
    const messages = [{ info: { sessionID: "ses_1" }, parts: [] as unknown[] }];
    const pending = [
      hooks.event?.({ event: { type: "session.created" } }, undefined),
      hooks["chat.message"]?.({ sessionID: "ses_1" }, { message: {}, parts: [] }),
      hooks["experimental.chat.messages.transform"]?.({}, { messages }),
    ];
    await Promise.resolve();
    expect(calls).toEqual([]);
    side.resolve({
      event: async ({ event }: { event: { type: string } }) => {
        calls.push(`event ${event.type}`);
      },
      "chat.message": async (input: { sessionID: string }) => {
        calls.push(`chat.message ${input.sessionID}`);
      },
      "experimental.chat.messages.transform": async (_input: unknown, output: { messages: unknown[] }) => {
        calls.push("transform");
        // The side changes the array OpenCode passed, in place: OpenCode reads that array.
        output.messages.unshift({ info: { sessionID: "ses_1" }, parts: [{ type: "text", text: "memory" }] });
      },
    } as unknown as Hooks);
    await Promise.all(pending);
    expect(calls).toEqual(["event session.created", "chat.message ses_1", "transform"]);
    expect(messages).toHaveLength(2);
    expect(messages[0]?.parts).toEqual([{ type: "text", text: "memory" }]);
  });

  it("passes the side's refusal to OpenCode", async () => {
    const hooks = deferredHooks(
      Promise.resolve({
        "chat.params": async () => {
          throw new PromptRefused("optchat: memory is unavailable");
        },
      } as unknown as Hooks),
    ) as unknown as Record<string, AnyHook>;
    await expect(hooks["chat.params"]?.({ sessionID: "ses_1" }, {})).rejects.toBeInstanceOf(PromptRefused);
  });

  it("declares every memory tool at once and runs each call on the side", async () => {
    const side = deferred<Hooks>();
    const hooks = deferredHooks(side.promise);
    const tools = hooks.tool as unknown as Record<
      string,
      { description: string; args: unknown; execute(args: unknown, context: ToolContext): Promise<string> }
    >;
    expect(Object.keys(tools).sort()).toEqual(Object.keys(MEMORY_TOOL_SPECS).sort());
    expect(tools.memory_zoom?.description).toBe(MEMORY_TOOL_SPECS.memory_zoom.description);
    const context = { sessionID: "ses_1" } as ToolContext;
    const result = tools.memory_zoom?.execute({ ref: "pub:1+1" }, context);
    side.resolve({
      tool: {
        memory_zoom: {
          execute: async (args: { ref: string }, ctx: ToolContext) => `opened ${args.ref} for ${ctx.sessionID}`,
        },
      },
    } as unknown as Hooks);
    await expect(result).resolves.toBe("opened pub:1+1 for ses_1");
  });

  it("refuses prompts with why when no side could be set up, and leaves the other hooks quiet", async () => {
    const hooks = deferredHooks(Promise.reject(new Error("cannot import ./hooks.js"))) as unknown as Record<
      string,
      AnyHook
    >;
    await expect(hooks["chat.message"]?.({ sessionID: "ses_1" }, { message: {}, parts: [] })).rejects.toThrow(
      "optchat could not start: Error: cannot import ./hooks.js",
    );
    await expect(hooks.event?.({ event: { type: "session.idle" } }, undefined)).resolves.toBeUndefined();
    await expect(hooks.dispose?.(undefined, undefined)).resolves.toBeUndefined();
  });
});
