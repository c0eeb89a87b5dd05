/**
 * The plugin's working side of the bridge: it holds one OpenCode process's plugin instance (the adapter, the memory
 * service, the embedded compactor) and runs the very hooks an in-process plugin runs (plugin/host/hooks.ts) on the data
 * OpenCode's thread forwards (plugin/transport/remote-hooks.ts), asking back whenever it needs OpenCode's client. It runs in the
 * plugin's thread (plugin/transport/thread-entry.ts), or in the local server for each OpenCode process connected to it
 * (plugin/transport/local-server/server.ts).
 */
import type { Hooks, PluginInput } from "@opencode-ai/plugin";
import { PromptRefused } from "../base/prompt-refused.js";
import { IN_PROCESS_HOST } from "../host/adapter-opener.js";
import { type InstanceHost, type OptchatInstance, optchatInstance } from "../host/hooks.js";
import { holdLocalServer } from "./local-server/client.js";
import {
  type ClientCall,
  type ForwardedHook,
  type ThreadError,
  type ToMainThread,
  type ToolCallContext,
  type ToPluginThread,
  type TransformReply,
  threadError,
} from "./protocol.js";
import type { ClosableRegistry } from "./shutdown.js";

export interface PluginHost {
  /** Handles one message from OpenCode's thread. */
  receive(message: ToPluginThread): void;
  /** OpenCode's side is gone: its client calls still waiting fail (a later one fails at once). */
  disconnected(reason: string): void;
}

/**
 * Serves one OpenCode process: `send` reaches its thread; `registry` holds the instance's adapters, closed or flushed
 * by a forwarded stop signal; `host` is where the instance runs (undefined: this process, as in the plugin's thread).
 */
export function hostPlugin(
  send: (message: ToMainThread) => void,
  registry: Pick<ClosableRegistry, "closeAll" | "flushAll">,
  host?: (init: Extract<ToPluginThread, { type: "init" }>) => InstanceHost,
): PluginHost {
  let nextClientId = 0;
  let gone: string | undefined;
  const clientCalls = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();

  /** OpenCode's client as the hooks use it, each call answered by OpenCode's thread (see ClientCall). */
  const askMain = (call: ClientCall, args?: unknown): Promise<unknown> => {
    if (gone) return Promise.reject(new Error(`OpenCode's client is unavailable: ${gone}`));
    const id = nextClientId++;
    return new Promise((resolve, reject) => {
      clientCalls.set(id, { resolve, reject });
      send({ type: "client", id, call, args });
    });
  };
  const clientStandIn = {
    session: {
      get: (args: unknown) => askMain("session.get", args),
      messages: (args: unknown) => askMain("session.messages", args),
    },
    config: {
      get: () => askMain("config.get"),
      providers: () => askMain("config.providers"),
    },
  };

  let resolveInstance: (instance: OptchatInstance) => void = () => {};
  /** The plugin once `init` arrived; every later message waits for it, in the order it came. */
  const instance = new Promise<OptchatInstance>((resolve) => {
    resolveInstance = resolve;
  });
  const hooks: Promise<Hooks> = instance.then((plugin) => plugin.hooks);

  const reply = (id: number, value?: unknown, error?: ThreadError): void => {
    if (gone) return;
    send(error ? { type: "reply", id, error } : { type: "reply", id, value });
  };

  /** Runs a forwarded hook on this side's copy of its input and output; answers with the output it may have changed. */
  const runHook = async (id: number, name: ForwardedHook, input: unknown, output: unknown): Promise<void> => {
    try {
      const hook = (await hooks)[name] as ((input: unknown, output: unknown) => Promise<void>) | undefined;
      await hook?.(input, output);
      if (name !== "experimental.chat.messages.transform") return reply(id);
      // With the request, what its chat.params will decide from (plugin/request/checks.ts): OpenCode's thread answers
      // chat.params itself.
      const messages = (output as { messages?: { info?: { sessionID?: string } }[] }).messages;
      const sessionId = messages?.at(-1)?.info?.sessionID;
      const checks = sessionId ? await (await instance).requestChecks(sessionId) : undefined;
      reply(id, { ...(output as object), checks } satisfies TransformReply);
    } catch (error) {
      reply(id, undefined, threadError(error));
    }
  };

  const runTool = async (id: number, name: string, args: unknown, context: ToolCallContext): Promise<void> => {
    try {
      const tool = (await hooks).tool?.[name];
      // Only hooks without tools exist when the plugin could not start (a configuration error, or a failed start):
      // the tools are declared by OpenCode's thread all the same, so say why they cannot run.
      if (!tool)
        throw new Error(
          `${name} failed: optchat memory is not running in this OpenCode process (its configuration or start failed; the reason is the error shown when a prompt is sent)`,
        );
      // Only the fields the memory tools read cross the thread (ToolCallContext).
      reply(id, await tool.execute(args as never, context as never));
    } catch (error) {
      reply(id, undefined, threadError(error));
    }
  };

  const init = (message: Extract<ToPluginThread, { type: "init" }>): void => {
    const input = { ...message.input, client: clientStandIn } as unknown as PluginInput;
    // A configuration error comes back as hooks that refuse every prompt; anything else thrown here does too.
    void optchatInstance(input, message.options, host?.(message) ?? ownThreadHost(message)).then(
      resolveInstance,
      (error: unknown) =>
        resolveInstance({
          hooks: {
            "chat.message": async () => {
              throw new PromptRefused(`optchat: the plugin could not start: ${threadError(error).message}`);
            },
          },
          requestChecks: async () => undefined,
        }),
    );
  };

  return {
    receive(message) {
      switch (message.type) {
        case "init":
          return init(message);
        case "hook":
          void runHook(message.id, message.hook, message.input, message.output);
          return;
        case "event":
          void hooks.then((h) => h.event?.({ event: message.event as never })).catch(() => {});
          return;
        case "tool":
          void runTool(message.id, message.name, message.args, message.context);
          return;
        case "signal":
          void (message.signal === "close" ? registry.closeAll() : registry.flushAll()).then(() => reply(message.id));
          return;
        case "client-reply": {
          const pending = clientCalls.get(message.id);
          clientCalls.delete(message.id);
          if (!pending) return;
          if (message.error)
            pending.reject(Object.assign(new Error(message.error.message), { name: message.error.name }));
          else pending.resolve(message.value);
          return;
        }
      }
    },
    disconnected(reason) {
      gone ??= reason;
      for (const [id, pending] of clientCalls) {
        clientCalls.delete(id);
        pending.reject(new Error(`OpenCode's client is unavailable: ${reason}`));
      }
    },
  };
}

/** The plugin's own thread: its queue goes to the local server starting for this process, if any, at close. */
function ownThreadHost(message: Extract<ToPluginThread, { type: "init" }>): InstanceHost | undefined {
  const socket = message.handOffSocket;
  if (!socket) return undefined;
  return {
    ...IN_PROCESS_HOST,
    env: process.env,
    holdServer: () => holdLocalServer(socket),
  };
}
