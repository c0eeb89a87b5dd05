/**
 * The plugin's main thread: what runs inside OpenCode's own JavaScript thread when the plugin runs in its thread
 * (OPTCHAT_PLUGIN_THREAD=on, the default under OpenCode's Bun). It starts the plugin's thread (plugin/thread-entry.ts),
 * declares the memory tools, and forwards every hook to the thread, waiting for an answer only where OpenCode needs
 * one (a refused prompt, the transformed messages, a tool's result, the flush at close).
 *
 * Why (issue 9 item 2, docs/opencode-notes.md "The plugin's thread"): OpenCode runs plugins on its one JavaScript
 * thread, so every millisecond of the plugin's work (importing ~100 modules, the database client, planning an ingest,
 * the embedded compactor) was a millisecond OpenCode's own work waited for. Here the main thread imports only this
 * module and the tools' declarations, and the thread's work runs beside OpenCode's on another core.
 */
import type { Hooks, PluginInput, ToolContext } from "@opencode-ai/plugin";
import { PromptRefused } from "./prompt-refused.js";
import { onStopSignals } from "./shutdown.js";
import type {
  ClientCall,
  ForwardedHook,
  ThreadError,
  ToMainThread,
  ToolCallContext,
  ToPluginThread,
} from "./thread-protocol.js";
import { jsonSchemaArgs } from "./tool-args.js";
import { MEMORY_TOOL_SPECS } from "./tool-specs.js";

/** The part of Bun's Worker (a web Worker) the bridge uses; the project's types know no DOM or Bun globals. */
export interface BunWorker {
  postMessage(message: unknown): void;
  addEventListener(type: "message", listener: (event: { data: ToMainThread }) => void): void;
  addEventListener(type: "error", listener: (event: { message?: string }) => void): void;
  addEventListener(type: "close", listener: () => void): void;
  terminate(): void;
  unref(): void;
}

/** Bun's global Worker, when this runtime has one. */
export function workerClass(): (new (url: string) => BunWorker) | undefined {
  const found = (globalThis as { Worker?: unknown }).Worker;
  return typeof found === "function" ? (found as new (url: string) => BunWorker) : undefined;
}

/** The bridges of this process: OpenCode may load the plugin again in one process (a new instance after a dispose). */
const bridges = new Set<ThreadBridge>();
let signalsInstalled = false;

interface Pending {
  resolve(value: unknown): void;
  reject(error: Error): void;
}

/** One plugin thread and the requests waiting for its answers. */
class ThreadBridge {
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  /** Why the thread is gone (it failed, or it was stopped after the dispose), once it is. */
  stopped: string | undefined;

  constructor(
    private readonly worker: BunWorker,
    private readonly input: PluginInput,
  ) {
    worker.addEventListener("message", (event) => this.receive(event.data));
    worker.addEventListener("error", (event) => this.fail(`it failed: ${event.message ?? "unknown error"}`));
    worker.addEventListener("close", () => this.fail("it ended"));
  }

  /** Sends a request and waits for its answer; rejects at once when the thread is gone. */
  request(message: DistributiveOmit<Extract<ToPluginThread, { id: number }>, "id">): Promise<unknown> {
    if (this.stopped) return Promise.reject(new Error(`optchat: the plugin's thread stopped: ${this.stopped}`));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.post({ ...message, id } as ToPluginThread);
    });
  }

  /** Sends without waiting (events); dropped once the thread is gone. */
  post(message: ToPluginThread): void {
    if (this.stopped) return;
    try {
      this.worker.postMessage(message);
    } catch {
      // A value that cannot be cloned (a function somewhere in an event): its JSON form is what the hooks read.
      this.worker.postMessage(JSON.parse(JSON.stringify(message)) as ToPluginThread);
    }
  }

  /** Ends the thread (after its dispose): requests still waiting are refused. */
  stop(): void {
    this.fail("it was stopped after OpenCode's dispose", false);
    this.worker.terminate();
  }

  private fail(reason: string, report = true): void {
    if (this.stopped) return;
    this.stopped = reason;
    bridges.delete(this);
    if (report) process.stderr.write(`optchat: the plugin's thread stopped: ${reason}\n`);
    for (const [, pending] of this.pending)
      pending.reject(new Error(`optchat: the plugin's thread stopped: ${reason}`));
    this.pending.clear();
  }

  private receive(message: ToMainThread): void {
    if (message.type === "client") {
      void this.callClient(message.call, message.args).then(
        (value) => this.post({ type: "client-reply", id: message.id, value }),
        (error: unknown) => this.post({ type: "client-reply", id: message.id, error: asThreadError(error) }),
      );
      return;
    }
    const pending = this.pending.get(message.id);
    this.pending.delete(message.id);
    if (!pending) return;
    if (message.error) pending.reject(rebuild(message.error));
    else pending.resolve(message.value);
  }

  /** OpenCode's client, for the thread: only `{ data }` crosses back (the SDK's response objects cannot). */
  private async callClient(call: ClientCall, args: unknown): Promise<unknown> {
    const client = this.input.client;
    const given = args as never;
    const result = (await (call === "session.get"
      ? client.session.get(given)
      : call === "session.messages"
        ? client.session.messages(given)
        : call === "config.get"
          ? client.config.get()
          : client.config.providers())) as { data?: unknown } | undefined;
    return { data: call === "config.providers" ? providersForThread(result?.data) : result?.data };
  }
}

interface ProvidersData {
  providers?: {
    id: string;
    key?: unknown;
    options?: { apiKey?: unknown; baseURL?: unknown };
    models?: Record<string, { api?: { id?: unknown; url?: unknown; npm?: unknown }; limit?: unknown }>;
  }[];
  default?: unknown;
}

/**
 * The providers answer with only what the thread reads (the models' limits for request budgets, and for the compactor's
 * model the credential, base URL and AI SDK package: plugin/client-lookups.ts, plugin/compactor-model.ts). OpenCode's
 * whole answer describes every model of every connected provider (names, costs, capabilities, modalities); copying it
 * to the thread cost more than the lookup itself.
 */
export function providersForThread(data: unknown): unknown {
  const answer = data as ProvidersData | undefined;
  if (!answer || !Array.isArray(answer.providers)) return data;
  return {
    default: answer.default,
    providers: answer.providers.map((provider) => ({
      id: provider.id,
      key: provider.key,
      options: { apiKey: provider.options?.apiKey, baseURL: provider.options?.baseURL },
      models: Object.fromEntries(
        Object.entries(provider.models ?? {}).map(([id, model]) => [
          id,
          { api: { id: model?.api?.id, url: model?.api?.url, npm: model?.api?.npm }, limit: model?.limit },
        ]),
      ),
    })),
  };
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

function asThreadError(error: unknown): ThreadError {
  return error instanceof Error
    ? { name: error.name, message: error.message }
    : { name: "Error", message: String(error) };
}

/** The thread's error as the main thread throws it: a refused prompt stays a PromptRefused. */
function rebuild(error: ThreadError): Error {
  if (error.name === "PromptRefused") return new PromptRefused(error.message);
  return Object.assign(new Error(error.message), { name: error.name });
}

/** SIGTERM/SIGHUP close every thread's adapters (then the signal ends the process), SIGINT flushes them. */
function installSignals(): void {
  if (signalsInstalled) return;
  signalsInstalled = true;
  const forward = (signal: "close" | "flush") =>
    Promise.allSettled([...bridges].map((bridge) => bridge.request({ type: "signal", signal })));
  onStopSignals(
    () => forward("close"),
    () => void forward("flush"),
  );
}

/** Settings the main thread reads itself, before the thread has resolved the whole configuration. */
interface MainSettings {
  readonly partial: boolean;
  /** How long the dispose waits for the thread's flush before it stops the thread anyway. */
  readonly disposeBoundMs: number;
}

function mainSettings(options: Record<string, unknown> | undefined, env: NodeJS.ProcessEnv): MainSettings {
  const readiness = options?.readiness ?? env.OPTCHAT_READINESS;
  const flush = Number(options?.closeFlushMs ?? env.OPTCHAT_CLOSE_FLUSH_MS ?? 10_000);
  return {
    partial: readiness === "partial",
    // The thread bounds its own flush by closeFlushMs (plus 500 ms); this only guards against a thread that hangs.
    disposeBoundMs: (Number.isFinite(flush) ? Math.min(Math.max(flush, 0), 60_000) : 10_000) + 2_000,
  };
}

/**
 * The hooks OpenCode gets when the plugin runs in its thread. `entry` is the thread's module (plugin/thread-entry.ts);
 * `listenToSignals` false leaves the process's signals alone (tests).
 */
export function threadedHooks(
  input: PluginInput,
  options: Record<string, unknown> | undefined,
  entry: URL,
  WorkerClass: new (url: string) => BunWorker,
  { listenToSignals = true }: { readonly listenToSignals?: boolean } = {},
): Hooks {
  const settings = mainSettings(options, process.env);
  const worker = new WorkerClass(entry.href);
  // Never keeps OpenCode alive by itself: `opencode run` exits once its dispose returned.
  worker.unref();
  const bridge = new ThreadBridge(worker, input);
  bridges.add(bridge);
  if (listenToSignals) installSignals();
  bridge.post({
    type: "init",
    input: { project: input.project as never, worktree: input.worktree, directory: input.directory },
    options,
  });

  const hook = (name: ForwardedHook, hookInput: unknown, output: unknown) =>
    bridge.request({ type: "hook", hook: name, input: hookInput, output });
  /** Only a refused prompt reaches OpenCode; a thread that is gone refuses prompts unless readiness is partial. */
  const refusals = (error: unknown): void => {
    if (error instanceof PromptRefused) throw error;
    if (bridge.stopped && !settings.partial)
      throw new PromptRefused(
        `optchat: memory is unavailable: the plugin's thread stopped (${bridge.stopped}); restart OpenCode, or set OPTCHAT_READINESS=partial to continue without memory`,
      );
  };

  const tools: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(MEMORY_TOOL_SPECS)) {
    tools[name] = {
      description: spec.description,
      args: jsonSchemaArgs(spec.args),
      async execute(args: unknown, context: ToolContext): Promise<string> {
        const picked: ToolCallContext = {
          sessionID: context.sessionID,
          messageID: context.messageID,
          agent: context.agent,
          directory: context.directory,
          worktree: context.worktree,
        };
        return (await bridge.request({ type: "tool", name, args, context: picked })) as string;
      },
    };
  }

  return {
    "chat.message": async (hookInput, output) => {
      await hook("chat.message", hookInput, { message: output.message, parts: output.parts }).catch(refusals);
    },

    event: async ({ event }) => {
      bridge.post({ type: "event", event });
    },

    "experimental.chat.messages.transform": async (hookInput, output) => {
      try {
        const changed = (await hook("experimental.chat.messages.transform", hookInput, {
          messages: output.messages,
        })) as { messages: typeof output.messages } | undefined;
        // OpenCode reads the array it passed: the thread's result replaces its contents in place.
        if (changed?.messages) output.messages.splice(0, output.messages.length, ...changed.messages);
      } catch {
        // Never throws (a throw kills the turn in OpenCode 1.18.33); the thread records its own problems.
      }
    },

    "experimental.chat.system.transform": async (hookInput, output) => {
      await hook(
        "experimental.chat.system.transform",
        { sessionID: hookInput.sessionID },
        { system: output.system },
      ).catch(() => undefined);
    },

    "chat.params": async (hookInput) => {
      const model = hookInput.model as unknown as { id?: string; providerID?: string; limit?: unknown };
      await hook(
        "chat.params",
        {
          sessionID: hookInput.sessionID,
          agent: hookInput.agent,
          model: { id: model?.id, providerID: model?.providerID, limit: model?.limit },
        },
        {},
      ).catch(refusals);
    },

    "experimental.session.compacting": async (hookInput) => {
      await hook("experimental.session.compacting", { sessionID: hookInput.sessionID }, {}).catch(() => undefined);
    },

    tool: tools as Hooks["tool"],

    dispose: async () => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        hook("dispose", {}, {}).catch(() => undefined),
        new Promise((resolve) => {
          timer = setTimeout(resolve, settings.disposeBoundMs);
        }),
      ]).finally(() => clearTimeout(timer));
      bridge.stop();
    },
  };
}
