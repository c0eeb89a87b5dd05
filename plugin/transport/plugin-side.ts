/**
 * The plugin's side of a channel (plugin/transport/channel.ts): it holds one OpenCode process's plugin instance (the
 * adapter, the memory service, the embedded compactor: plugin/host/hooks.ts) and runs its hooks on the data OpenCode's
 * side forwards (plugin/transport/remote-hooks.ts), asking back whenever it needs OpenCode's client. The same module
 * serves every runner: the plugin's thread (plugin/transport/thread-entry.ts), the local server for each OpenCode
 * process connected to it (plugin/transport/local-server/server.ts), and OpenCode's own thread over the loopback; the
 * runner comes from the channel's `init`.
 */
import type { Hooks, PluginInput } from "@opencode-ai/plugin";
import { type OptchatInstance, optchatInstance, refusingInstance } from "../host/hooks.js";
import type { Runner } from "../host/runner.js";
import type { PluginSide, SendToOpencode } from "./channel.js";
import {
  type ClientCall,
  type ForwardedHook,
  type InitMessage,
  type SideError,
  sideError,
  type ToolCallContext,
  type ToPluginSide,
  type TransformReply,
} from "./protocol.js";
import type { ClosableRegistry } from "./shutdown.js";

/**
 * Serves one OpenCode process: `send` reaches OpenCode's side; `registry` holds what the instance's runner registered
 * (its adapters), closed or flushed by a forwarded stop signal; `runnerOf` makes the runner the `init` names.
 */
export function servePlugin(
  send: SendToOpencode,
  registry: Pick<ClosableRegistry, "closeAll" | "flushAll">,
  runnerOf: (init: InitMessage) => Runner,
): PluginSide {
  let gone: string | undefined;
  const client = clientStandIn(send, () => gone);
  let resolveInstance: (instance: OptchatInstance) => void = () => {};
  /** The plugin once `init` arrived; every later message waits for it, in the order it came. */
  const instance = new Promise<OptchatInstance>((resolve) => {
    resolveInstance = resolve;
  });
  const hooks: Promise<Hooks> = instance.then((plugin) => plugin.hooks);
  const reply = (id: number, value?: unknown, error?: SideError): void => {
    if (gone) return;
    send(error ? { type: "reply", id, error } : { type: "reply", id, value });
  };
  const run = (id: number, work: () => Promise<unknown>): void => {
    void work().then(
      (value) => reply(id, value),
      (error: unknown) => reply(id, undefined, sideError(error)),
    );
  };

  const init = (message: InitMessage): void => {
    const input = { ...message.input, client: client.standIn } as unknown as PluginInput;
    // A configuration error comes back as hooks that refuse every prompt; anything else thrown here does too.
    void Promise.resolve()
      .then(() => optchatInstance(input, message.options, runnerOf(message)))
      .then(resolveInstance, (error: unknown) =>
        resolveInstance(refusingInstance(`optchat: the plugin could not start: ${sideError(error).message}`)),
      );
  };

  return {
    receive(message) {
      switch (message.type) {
        case "init":
          return init(message);
        case "hook":
          return run(message.id, () => runHook(instance, message.hook, message.input, message.output));
        case "event":
          void hooks.then((h) => h.event?.({ event: message.event as never })).catch(() => {});
          return;
        case "tool":
          return run(message.id, () => runTool(hooks, message.name, message.args, message.context));
        case "signal":
          return run(message.id, () => (message.signal === "close" ? registry.closeAll() : registry.flushAll()));
        case "client-reply":
          return client.answered(message);
      }
    },
    disconnected(reason) {
      gone ??= reason;
      client.disconnected(reason);
    },
  };
}

/** Runs a forwarded hook on this side's copy of its input and output; answers with the output it may have changed. */
async function runHook(
  instance: Promise<OptchatInstance>,
  name: ForwardedHook,
  input: unknown,
  output: unknown,
): Promise<unknown> {
  const plugin = await instance;
  const hook = plugin.hooks[name] as ((input: unknown, output: unknown) => Promise<void>) | undefined;
  await hook?.(input, output);
  if (name !== "experimental.chat.messages.transform") return undefined;
  // With the request, what its chat.params will decide from (plugin/request/checks.ts): OpenCode's side answers it.
  const messages = (output as { messages?: { info?: { sessionID?: string } }[] }).messages;
  const sessionId = messages?.at(-1)?.info?.sessionID;
  const checks = sessionId ? await plugin.requestChecks(sessionId) : undefined;
  return { ...(output as object), checks } satisfies TransformReply;
}

async function runTool(hooks: Promise<Hooks>, name: string, args: unknown, context: ToolCallContext): Promise<string> {
  const tool = (await hooks).tool?.[name];
  // Only hooks without tools exist when the plugin could not start (a configuration error, or a failed start): the
  // tools are declared by OpenCode's side all the same, so say why they cannot run.
  if (!tool)
    throw new Error(
      `${name} failed: optchat memory is not running in this OpenCode process (its configuration or start failed; the reason is the error shown when a prompt is sent)`,
    );
  // Only the fields the memory tools read cross the channel (ToolCallContext).
  return (await tool.execute(args as never, context as never)) as string;
}

/** OpenCode's client as the hooks use it, each call answered by OpenCode's side (see ClientCall). */
function clientStandIn(send: SendToOpencode, gone: () => string | undefined) {
  let nextId = 0;
  const calls = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
  const ask = (call: ClientCall, args?: unknown): Promise<unknown> => {
    const reason = gone();
    if (reason) return Promise.reject(new Error(`OpenCode's client is unavailable: ${reason}`));
    const id = nextId++;
    return new Promise((resolve, reject) => {
      calls.set(id, { resolve, reject });
      send({ type: "client", id, call, args });
    });
  };
  return {
    standIn: {
      session: {
        get: (args: unknown) => ask("session.get", args),
        messages: (args: unknown) => ask("session.messages", args),
      },
      config: { get: () => ask("config.get"), providers: () => ask("config.providers") },
    },
    answered(message: Extract<ToPluginSide, { type: "client-reply" }>): void {
      const pending = calls.get(message.id);
      calls.delete(message.id);
      if (!pending) return;
      if (message.error) pending.reject(Object.assign(new Error(message.error.message), { name: message.error.name }));
      else pending.resolve(message.value);
    },
    disconnected(reason: string): void {
      for (const [id, pending] of calls) {
        calls.delete(id);
        pending.reject(new Error(`OpenCode's client is unavailable: ${reason}`));
      }
    },
  };
}
