/**
 * The plugin's thread: a Bun worker started by plugin/thread-bridge.ts, holding everything that does work (the
 * adapter, the memory service and its database pool, the embedded compactor). It runs the very hooks an in-process
 * plugin runs (plugin/hooks.ts), on the data the main thread forwards, and asks the main thread whenever it needs
 * OpenCode's client. Why a thread: docs/opencode-notes.md "The plugin's thread".
 */
import type { Hooks, PluginInput } from "@opencode-ai/plugin";
import { type OptchatInstance, optchatInstance } from "./hooks.js";
import { PromptRefused } from "./prompt-refused.js";
import { closeRegistered, flushRegistered } from "./shutdown.js";
import {
  type ClientCall,
  type ForwardedHook,
  type ThreadError,
  type ToMainThread,
  type ToolCallContext,
  type ToPluginThread,
  type TransformReply,
  threadError,
} from "./thread-protocol.js";
import { markPluginThread } from "./thread-state.js";

declare const self: {
  postMessage(message: ToMainThread): void;
  onmessage: ((event: { data: ToPluginThread }) => void) | null;
};

markPluginThread();

// An error nothing caught must not end the thread (Bun ends a worker on one, and memory would then be off until
// OpenCode restarts): in OpenCode's own thread such an error was only printed, and so it is here.
process.on("unhandledRejection", (reason) => {
  process.stderr.write(`optchat (plugin thread): unhandled rejection: ${describeError(reason)}\n`);
});
process.on("uncaughtException", (error) => {
  process.stderr.write(`optchat (plugin thread): uncaught exception: ${describeError(error)}\n`);
});

function describeError(error: unknown): string {
  return error instanceof Error ? (error.stack ?? error.message) : String(error);
}

let nextClientId = 0;
const clientCalls = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();

/** OpenCode's client as the hooks use it, each call answered by the main thread (see ClientCall). */
function askMain(call: ClientCall, args?: unknown): Promise<unknown> {
  const id = nextClientId++;
  return new Promise((resolve, reject) => {
    clientCalls.set(id, { resolve, reject });
    self.postMessage({ type: "client", id, call, args });
  });
}

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

function reply(id: number, value?: unknown, error?: ThreadError): void {
  self.postMessage(error ? { type: "reply", id, error } : { type: "reply", id, value });
}

/** Runs a forwarded hook on the thread's copy of its input and output; answers with the output it may have changed. */
async function runHook(id: number, name: ForwardedHook, input: unknown, output: unknown): Promise<void> {
  try {
    const hook = (await hooks)[name] as ((input: unknown, output: unknown) => Promise<void>) | undefined;
    await hook?.(input, output);
    if (name !== "experimental.chat.messages.transform") return reply(id);
    // With the request, what its chat.params will decide from (plugin/request-checks.ts): the main thread answers
    // chat.params itself.
    const messages = (output as { messages?: { info?: { sessionID?: string } }[] }).messages;
    const sessionId = messages?.at(-1)?.info?.sessionID;
    const checks = sessionId ? await (await instance).requestChecks(sessionId) : undefined;
    reply(id, { ...(output as object), checks } satisfies TransformReply);
  } catch (error) {
    reply(id, undefined, threadError(error));
  }
}

async function runTool(id: number, name: string, args: unknown, context: ToolCallContext): Promise<void> {
  try {
    const tool = (await hooks).tool?.[name];
    // Only hooks without tools exist when the plugin could not start (a configuration error, or a failed start): the
    // tools are declared by OpenCode's thread all the same, so say why they cannot run.
    if (!tool)
      throw new Error(
        `${name} failed: optchat memory is not running in this OpenCode process (its configuration or start failed; the reason is the error shown when a prompt is sent)`,
      );
    // Only the fields the memory tools read cross the thread (ToolCallContext).
    reply(id, await tool.execute(args as never, context as never));
  } catch (error) {
    reply(id, undefined, threadError(error));
  }
}

self.onmessage = ({ data: message }) => {
  switch (message.type) {
    case "init": {
      const input = { ...message.input, client: clientStandIn } as unknown as PluginInput;
      // A configuration error comes back as hooks that refuse every prompt; anything else thrown here does too.
      void optchatInstance(input, message.options).then(resolveInstance, (error: unknown) =>
        resolveInstance({
          hooks: {
            "chat.message": async () => {
              throw new PromptRefused(`optchat: the plugin could not start: ${threadError(error).message}`);
            },
          },
          requestChecks: async () => undefined,
        }),
      );
      return;
    }
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
      void (message.signal === "close" ? closeRegistered() : flushRegistered()).then(() => reply(message.id));
      return;
    case "client-reply": {
      const pending = clientCalls.get(message.id);
      clientCalls.delete(message.id);
      if (!pending) return;
      if (message.error) pending.reject(Object.assign(new Error(message.error.message), { name: message.error.name }));
      else pending.resolve(message.value);
      return;
    }
  }
};
