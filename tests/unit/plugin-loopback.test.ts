import type { PluginInput } from "@opencode-ai/plugin";
import { describe, expect, it } from "vitest";
import { PromptRefused } from "../../plugin/base/prompt-refused.js";
import { wouldBeRetried } from "../../plugin/opencode/messages.js";
import { MEMORY_TOOL_SPECS } from "../../plugin/tools/specs.js";
import { type Channel, loopbackChannel, type SendToOpencode } from "../../plugin/transport/channel.js";
import type { ToPluginSide } from "../../plugin/transport/protocol.js";
import { remoteHooks } from "../../plugin/transport/remote-hooks.js";

/**
 * OpenCode's side (plugin/transport/remote-hooks.ts) before its channel is set up, and over the loopback in OpenCode's
 * own thread (plugin/transport/channel.ts): calls made meanwhile wait and reach the side in the order OpenCode made
 * them, with OpenCode's own objects; throws and tool results come back as the side gave them; a channel that could
 * not be set up refuses prompts with why. The plugin's side here is a script answering each message.
 */

type AnyHook = (input: unknown, output: unknown) => Promise<void>;
type Script = (message: ToPluginSide) => Promise<unknown>;

const input = { project: { id: "p1" }, worktree: "/w", directory: "/w", client: {} } as unknown as PluginInput;

function deferred<T>() {
  let resolve: (value: T) => void = () => {};
  let reject: (error: unknown) => void = () => {};
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** A loopback whose plugin's side answers each request with `script` (a throw goes back as the side's error). */
function scripted(script: Script, seen: ToPluginSide[] = []): Channel {
  return loopbackChannel((send: SendToOpencode) => ({
    receive(message) {
      seen.push(message);
      if (!("id" in message) || message.type === "client-reply") return;
      void script(message).then(
        (value) => send({ type: "reply", id: message.id, value }),
        (error: Error) => send({ type: "reply", id: message.id, error: { name: error.name, message: error.message } }),
      );
    },
    disconnected() {},
  }));
}

describe("OpenCode's side before and over the loopback", () => {
  it("holds calls made before the channel is ready and hands them over in order, with OpenCode's objects", async () => {
    const channel = deferred<Channel>();
    const seen: ToPluginSide[] = [];
    const hooks = remoteHooks(input, {}, channel.promise, { listenToSignals: false }) as unknown as Record<
      string,
      AnyHook
    >;
    const messages = [{ info: { sessionID: "ses_1" }, parts: [] as unknown[] }];
    const pending = [
      hooks.event?.({ event: { type: "session.created", properties: { info: { id: "ses_1" } } } }, undefined),
      hooks["chat.message"]?.({ sessionID: "ses_1" }, { message: {}, parts: [] }),
      hooks["experimental.chat.messages.transform"]?.({}, { messages }),
    ];
    await Promise.resolve();
    expect(seen).toEqual([]);
    channel.resolve(
      scripted(async (message) => {
        if (message.type !== "hook" || message.hook !== "experimental.chat.messages.transform") return undefined;
        // The side changes the array OpenCode passed, in place (the loopback passes OpenCode's own objects).
        const output = message.output as { messages: unknown[] };
        output.messages.unshift({ info: { sessionID: "ses_1" }, parts: [{ type: "text", text: "memory" }] });
        return output;
      }, seen),
    );
    await Promise.all(pending);
    expect(seen.map((m) => (m.type === "hook" ? m.hook : m.type))).toEqual([
      "init",
      "event",
      "chat.message",
      "experimental.chat.messages.transform",
    ]);
    expect(seen[0]).toMatchObject({ type: "init", runner: "opencode" });
    expect(messages).toHaveLength(2);
    expect(messages[0]?.parts).toEqual([{ type: "text", text: "memory" }]);
  });

  it("passes the side's refusal to OpenCode as a PromptRefused, never with the words OpenCode retries on", async () => {
    const hooks = remoteHooks(
      input,
      {},
      scripted(async () => {
        throw new PromptRefused("optchat: memory is unavailable");
      }),
      { listenToSignals: false },
    ) as unknown as Record<string, AnyHook>;
    const refused = (await hooks["chat.message"]?.({ sessionID: "ses_1" }, { message: {}, parts: [] }).catch(
      (e: unknown) => e,
    )) as Error;
    expect(refused).toBeInstanceOf(PromptRefused);
    expect(wouldBeRetried(refused.message)).toBe(false);
  });

  it("declares every memory tool at once and runs each call on the side", async () => {
    const channel = deferred<Channel>();
    const hooks = remoteHooks(input, {}, channel.promise, { listenToSignals: false });
    const tools = hooks.tool as unknown as Record<
      string,
      { description: string; execute(args: unknown, context: unknown): Promise<string> }
    >;
    expect(Object.keys(tools).sort()).toEqual(Object.keys(MEMORY_TOOL_SPECS).sort());
    expect(tools.memory_zoom?.description).toBe(MEMORY_TOOL_SPECS.memory_zoom.description);
    const result = tools.memory_zoom?.execute({ ref: "pub:1+1" }, { sessionID: "ses_1", messageID: "m" });
    channel.resolve(
      scripted(async (message) =>
        message.type === "tool"
          ? `opened ${(message.args as { ref: string }).ref} for ${message.context.sessionID}`
          : undefined,
      ),
    );
    await expect(result).resolves.toBe("opened pub:1+1 for ses_1");
  });

  it("refuses prompts with why when no channel could be set up, and leaves the other hooks quiet", async () => {
    const hooks = remoteHooks(input, {}, Promise.reject(new Error("cannot import ./host/hooks.js")), {
      listenToSignals: false,
    }) as unknown as Record<string, AnyHook>;
    const refused = (await hooks["chat.message"]?.({ sessionID: "ses_1" }, { message: {}, parts: [] }).catch(
      (e: unknown) => e,
    )) as Error;
    // A PromptRefused without retry triggers, as every refusal (it was a plain Error that OpenCode retried, issue 35).
    expect(refused).toBeInstanceOf(PromptRefused);
    expect(refused.message.replace(/\u2060/g, "")).toMatch(/could not be set up: cannot import \.\/host\/hooks\.js/);
    expect(wouldBeRetried(refused.message)).toBe(false);
    await expect(
      hooks["chat.params"]?.({ sessionID: "ses_1", agent: "build", model: { id: "m", providerID: "p" } }, {}),
    ).rejects.toBeInstanceOf(PromptRefused);
    await expect(hooks.event?.({ event: { type: "session.idle" } }, undefined)).resolves.toBeUndefined();
    await expect(hooks.dispose?.(undefined, undefined)).resolves.toBeUndefined();
  });
});
