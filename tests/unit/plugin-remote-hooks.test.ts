import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PluginInput } from "@opencode-ai/plugin";
import { afterEach, describe, expect, it, vi } from "vitest";
import { PromptRefused } from "../../plugin/base/prompt-refused.js";
import { HOST_EVENT_TYPES } from "../../plugin/opencode/events.js";
import { wouldBeRetried } from "../../plugin/opencode/messages.js";
import { type BunWorker, type Channel, SIDE_NAMES, workerChannel } from "../../plugin/transport/channel.js";
import { providersForThread } from "../../plugin/transport/client-calls.js";
import type { ToOpencodeSide, ToPluginSide } from "../../plugin/transport/protocol.js";
import { remoteHooks } from "../../plugin/transport/remote-hooks.js";

/**
 * OpenCode's side of the plugin (plugin/transport/remote-hooks.ts) over a worker channel, against a stand-in for Bun's Worker: what it forwards, what it
 * waits for, and what OpenCode sees when the thread answers, fails or never answers. The whole path through a real
 * thread in OpenCode's Bun is in the e2e tests (every e2e file runs the plugin in its thread; plugin-memory's B does not).
 */
class FakeWorker implements BunWorker {
  readonly posted: ToPluginSide[] = [];
  terminated = false;
  /** Whether the worker holds the process open (Bun's ref/unref). */
  referenced = true;
  private readonly listeners = new Map<string, ((event: never) => void)[]>();

  constructor(readonly url: string) {}
  postMessage(message: unknown): void {
    // What a real worker does with a value it cannot copy (a function): a DataCloneError.
    this.posted.push(structuredClone(message) as ToPluginSide);
  }
  addEventListener(type: string, listener: (event: never) => void): void {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), listener]);
  }
  terminate(): void {
    this.terminated = true;
  }
  ref(): void {
    this.referenced = true;
  }
  unref(): void {
    this.referenced = false;
  }
  emit(type: string, event: unknown): void {
    for (const listener of this.listeners.get(type) ?? []) listener(event as never);
  }
  answer(message: ToOpencodeSide): void {
    this.emit("message", { data: message });
  }
  /** The newest request of `type` (with its id), once the bridge posted it. */
  async request<T extends ToPluginSide["type"]>(type: T): Promise<Extract<ToPluginSide, { type: T }>> {
    await vi.waitFor(() => expect(this.posted.some((m) => m.type === type)).toBe(true));
    return this.posted.filter((m) => m.type === type).at(-1) as Extract<ToPluginSide, { type: T }>;
  }
}

function start(options: Record<string, unknown> = {}, client: unknown = {}) {
  const input = { project: { id: "p1" }, worktree: "/w", directory: "/w/d", client } as unknown as PluginInput;
  const worker = new FakeWorker("file:///entry.ts");
  const hooks = remoteHooks(input, options, workerChannel(worker), { listenToSignals: false });
  return { hooks, worker };
}

type Hook = (input: unknown, output: unknown) => Promise<void>;

/** A stand-in for the local server's channel (plugin/transport/local-server/client.ts `SocketChannel`). */
function served(worker: FakeWorker, env: Record<string, string>): Channel {
  return {
    ...workerChannel(worker),
    init: { runner: "local server", env, pid: process.pid },
    sideName: SIDE_NAMES["local server"],
    outlivesProcess: true,
  };
}

afterEach(() => {
  vi.useRealTimers();
});

describe("the plugin's main thread", () => {
  it("starts the thread unreferenced and sends it OpenCode's input data and the options first", () => {
    const { worker } = start({ databaseUrl: "postgres://x" });
    expect(worker.referenced).toBe(false);
    expect(worker.url).toBe("file:///entry.ts");
    expect(worker.posted[0]).toEqual({
      type: "init",
      input: { project: { id: "p1" }, worktree: "/w", directory: "/w/d" },
      options: { databaseUrl: "postgres://x" },
      // Which runner serves it travels in init (plugin/transport/channel.ts).
      runner: "thread",
    });
  });

  it("waits for chat.message and rethrows a refused prompt as a PromptRefused with the thread's words", async () => {
    const { hooks, worker } = start();
    const admitted = (hooks["chat.message"] as Hook)({ sessionID: "s1" }, { message: { id: "m1" }, parts: [] });
    const request = await worker.request("hook");
    expect(request).toMatchObject({
      hook: "chat.message",
      input: { sessionID: "s1" },
      output: { message: { id: "m1" } },
    });
    // While OpenCode waits for an answer the thread holds the process open (`opencode run` must not exit mid-hook).
    expect(worker.referenced).toBe(true);
    worker.answer({
      type: "reply",
      id: request.id,
      error: { name: "PromptRefused", message: "held by another process" },
    });
    const error = await admitted.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PromptRefused);
    expect((error as Error).message).toBe("held by another process");
    expect(worker.referenced).toBe(false);

    // Any other error of the thread's admission is its own to record: the prompt goes on.
    const next = (hooks["chat.message"] as Hook)({ sessionID: "s1" }, { message: { id: "m2" }, parts: [] });
    const second = await worker.request("hook");
    worker.answer({ type: "reply", id: second.id, error: { name: "Error", message: "boom" } });
    await expect(next).resolves.toBeUndefined();
  });

  it("replaces the request's messages in place with the thread's, and leaves them alone when the thread fails", async () => {
    const { hooks, worker } = start();
    const transform = hooks["experimental.chat.messages.transform"] as Hook;
    const messages = [{ info: { id: "u1" }, parts: [] }];
    const output = { messages };
    const done = transform({}, output);
    const request = await worker.request("hook");
    expect(request.output).toEqual({ messages });
    const replaced = [
      { info: { id: "memory" }, parts: [] },
      { info: { id: "u1" }, parts: [] },
    ];
    worker.answer({ type: "reply", id: request.id, value: { messages: replaced } });
    await done;
    expect(output.messages).toBe(messages);
    expect(messages).toEqual(replaced);

    const again = transform({}, output);
    const failing = await worker.request("hook");
    worker.answer({ type: "reply", id: failing.id, error: { name: "Error", message: "database down" } });
    await expect(again).resolves.toBeUndefined();
    expect(messages).toEqual(replaced);
  });

  it("answers chat.params itself from the checks the thread sent back with the transformed request", async () => {
    const { hooks, worker } = start();
    const transform = hooks["experimental.chat.messages.transform"] as Hook;
    const params = (sessionID: string, agent: string, context?: number) =>
      (hooks["chat.params"] as Hook)(
        { sessionID, agent, model: { id: "m", providerID: "p", ...(context ? { limit: { context } } : {}) } },
        {},
      );
    const transformed = async (sessionID: string, checks: unknown) => {
      const done = transform({}, { messages: [{ info: { id: "u1", sessionID }, parts: [] }] });
      const request = await worker.request("hook");
      worker.answer({ type: "reply", id: request.id, value: { messages: [], checks } });
      await done;
    };

    // The transform's actionable error: raised for the session's requests (every HTTP attempt), never the title's,
    // and never as one OpenCode would retry for a minute (it retries "unavailable", "terminated", ...).
    await transformed("s1", { pendingError: "optchat: memory is not ready (the database is unavailable)" });
    const refused = (await params("s1", "build").catch((e: unknown) => e)) as Error;
    expect(refused).toBeInstanceOf(PromptRefused);
    expect(wouldBeRetried(refused.message)).toBe(false);
    expect(refused.message.replace(/\u2060/g, "")).toBe("optchat: memory is not ready (the database is unavailable)");
    await expect(params("s1", "build")).rejects.toBeInstanceOf(PromptRefused);
    await expect(params("s1", "title")).resolves.toBeUndefined();
    await expect(params("s2", "build")).resolves.toBeUndefined();
    // The thread is told (it notes the model's limits and the request), without being waited for: nothing answers.
    const told = worker.posted.filter((m) => m.type === "hook" && m.hook === "chat.params");
    expect(told).toHaveLength(4);
    expect(told[0]).toMatchObject({ input: { sessionID: "s1", agent: "build", model: { id: "m", providerID: "p" } } });
    // With what was decided: the side records it (an idle then ends the turn as failed), and decides nothing itself.
    expect(told[0]).toMatchObject({
      input: { checks: { pendingError: expect.stringMatching(/memory is not ready/) } },
    });
    expect(told[2]).toMatchObject({ input: { agent: "title", checks: undefined } });

    // Sized for an assumed window: checked once against the window OpenCode passes, and the refusal then stands.
    await transformed("s1", { unsized: { tokens: 5000, assumedWindow: 32000 } });
    const tooLarge = (await params("s1", "build", 4000).catch((e: unknown) => e)) as Error;
    expect(tooLarge).toBeInstanceOf(PromptRefused);
    expect(tooLarge.message.replace(/\u2060/g, "")).toMatch(
      /needs about 5000 tokens \(memory sized for an assumed window of 32000.*the window of p\/m is 4000/,
    );
    await expect(params("s1", "build", 64000)).rejects.toBeInstanceOf(PromptRefused);
    await transformed("s1", { unsized: { tokens: 5000, assumedWindow: 32000 } });
    await expect(params("s1", "build", 8000)).resolves.toBeUndefined();

    // A new transform replaces the checks; the session's idle ends them; a failed transform leaves none.
    await transformed("s1", { pendingError: "optchat: this request does not fit" });
    await (hooks.event as Hook)({ event: { type: "session.idle", properties: { sessionID: "s1" } } }, undefined);
    await expect(params("s1", "build")).resolves.toBeUndefined();
    await transformed("s1", { pendingError: "optchat: this request does not fit" });
    const failing = transform({}, { messages: [{ info: { id: "u2", sessionID: "s1" }, parts: [] }] });
    const request = await worker.request("hook");
    worker.answer({ type: "reply", id: request.id, error: { name: "Error", message: "database down" } });
    await failing;
    await expect(params("s1", "build")).resolves.toBeUndefined();
  });

  it("refuses prompts once the thread failed (strict), says why, and rejects what was waiting", async () => {
    const { hooks, worker } = start();
    const waiting = (hooks["chat.message"] as Hook)({ sessionID: "s1" }, { message: { id: "m1" }, parts: [] });
    await worker.request("hook");
    worker.emit("error", { message: "out of memory" });
    const first = (await waiting.catch((e: unknown) => e)) as Error;
    expect(first).toBeInstanceOf(PromptRefused);
    expect(first.message.replace(/\u2060/g, "")).toMatch(
      /memory is unavailable: the plugin's thread stopped \(it failed: out of memory\).*OPTCHAT_READINESS=partial/,
    );
    expect(wouldBeRetried(first.message)).toBe(false);
    await expect(
      (hooks["chat.message"] as Hook)({ sessionID: "s1" }, { message: { id: "m2" }, parts: [] }),
    ).rejects.toBeInstanceOf(PromptRefused);
    await expect(
      (hooks["chat.params"] as Hook)({ sessionID: "s1", agent: "build", model: { id: "m", providerID: "p" } }, {}),
    ).rejects.toBeInstanceOf(PromptRefused);
    expect(worker.referenced).toBe(false);
    // The transform never throws, and nothing more is posted to a thread that is gone.
    const posted = worker.posted.length;
    await expect(
      (hooks["experimental.chat.messages.transform"] as Hook)({}, { messages: [] }),
    ).resolves.toBeUndefined();
    expect(worker.posted).toHaveLength(posted);
  });

  it("lets prompts through without memory once the thread failed, when readiness is partial", async () => {
    const { hooks, worker } = start({ readiness: "partial" });
    worker.emit("close", {});
    await expect(
      (hooks["chat.message"] as Hook)({ sessionID: "s1" }, { message: { id: "m1" }, parts: [] }),
    ).resolves.toBeUndefined();
  });

  it("answers the thread's client calls, with only the providers' fields the thread reads, and their errors", async () => {
    const providers = {
      default: { anthropic: "claude" },
      providers: [
        {
          id: "anthropic",
          name: "Anthropic",
          key: "sk-1",
          options: { apiKey: "sk-2", baseURL: "http://x", fetch: "not copied" },
          models: {
            claude: {
              name: "Claude",
              cost: { input: 3 },
              api: { id: "c", url: "u", npm: "@ai-sdk/anthropic" },
              limit: { context: 200000, output: 8000 },
            },
          },
        },
      ],
    };
    const client = {
      config: { providers: async () => ({ data: providers, response: { headers: () => {} } }) },
      session: {
        messages: async () => {
          throw new Error("not found");
        },
      },
    };
    const { worker } = start({}, client);
    worker.answer({ type: "client", id: 7, call: "config.providers", args: undefined });
    const reply = await worker.request("client-reply");
    expect(reply).toEqual({ type: "client-reply", id: 7, value: { data: providersForThread(providers) } });
    expect(reply.value).toEqual({
      data: {
        default: { anthropic: "claude" },
        providers: [
          {
            id: "anthropic",
            key: "sk-1",
            options: { apiKey: "sk-2", baseURL: "http://x" },
            models: {
              claude: {
                api: { id: "c", url: "u", npm: "@ai-sdk/anthropic" },
                limit: { context: 200000, output: 8000 },
              },
            },
          },
        ],
      },
    });
    worker.answer({ type: "client", id: 8, call: "session.messages", args: { path: { id: "s1" } } });
    await vi.waitFor(() => expect(worker.posted.filter((m) => m.type === "client-reply")).toHaveLength(2));
    expect(worker.posted.at(-1)).toEqual({
      type: "client-reply",
      id: 8,
      error: { name: "Error", message: "not found" },
    });
  });

  it("posts the events the adapter reads without waiting (as JSON when they cannot be copied), and no others", async () => {
    const { hooks, worker } = start();
    const event = hooks.event as (input: unknown) => Promise<void>;
    await event({ event: { type: "message.updated", properties: { info: { id: "m1" }, callback: () => 1 } } });
    expect(worker.posted.at(-1)).toEqual({
      type: "event",
      event: { type: "message.updated", properties: { info: { id: "m1" } } },
    });
    const posted = worker.posted.length;
    await event({ event: { type: "message.part.delta", properties: { delta: "tok" } } });
    await event({ event: { type: "session.error", properties: { sessionID: "s1" } } });
    expect(worker.posted).toHaveLength(posted);
    for (const type of HOST_EVENT_TYPES) await event({ event: { type, properties: {} } });
    expect(worker.posted.slice(posted).map((m) => (m as { event: { type: string } }).event.type)).toEqual([
      ...HOST_EVENT_TYPES,
    ]);
  });

  it("passes the system prompt and a compaction's start to the thread without waiting, before the request's chat.params", async () => {
    const { hooks, worker } = start();
    // The stand-in never answers: neither hook may wait for it.
    await (hooks["experimental.chat.system.transform"] as Hook)(
      { sessionID: "s1", model: {} },
      { system: ["You are"] },
    );
    await (hooks["experimental.session.compacting"] as Hook)({ sessionID: "s1" }, { context: [] });
    void (hooks["chat.params"] as Hook)({ sessionID: "s1", agent: "build", model: { id: "m", providerID: "p" } }, {});
    const hooksPosted = worker.posted.filter((m) => m.type === "hook").map((m) => (m as { hook: string }).hook);
    expect(hooksPosted).toEqual([
      "experimental.chat.system.transform",
      "experimental.session.compacting",
      "chat.params",
    ]);
    expect(worker.posted.find((m) => m.type === "hook")).toMatchObject({
      input: { sessionID: "s1" },
      output: { system: ["You are"] },
    });
  });

  it("times each hook OpenCode waits for from OpenCode's side, in the timings file when one is set", async () => {
    const dir = mkdtempSync(join(tmpdir(), "optchat-bridge-"));
    const file = join(dir, "timings.jsonl");
    try {
      const { hooks, worker } = start({ timingsFile: file });
      const admitted = (hooks["chat.message"] as Hook)({ sessionID: "s1" }, { message: { id: "m1" }, parts: [] });
      const request = await worker.request("hook");
      await new Promise((resolve) => setTimeout(resolve, 20));
      worker.answer({ type: "reply", id: request.id });
      await admitted;
      // Not waited for: not timed.
      await (hooks["experimental.chat.system.transform"] as Hook)({ sessionID: "s1", model: {} }, { system: [] });
      const lines = readFileSync(file, "utf8")
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line));
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatchObject({ op: "awaited", hook: "chat.message" });
      expect(lines[0].ms).toBeGreaterThanOrEqual(15);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("declares the memory tools and runs each in the thread with the context fields the tools read", async () => {
    const { hooks, worker } = start();
    expect(Object.keys(hooks.tool ?? {}).sort()).toEqual([
      "memory_date",
      "memory_inspect",
      "memory_search",
      "memory_sessions",
      "memory_zoom",
    ]);
    const zoom = hooks.tool?.memory_zoom as unknown as {
      args: Record<string, unknown>;
      execute(args: unknown, context: unknown): Promise<string>;
    };
    expect(zoom.args.ref).toMatchObject({ type: "string" });
    const context = {
      sessionID: "s1",
      messageID: "m1",
      agent: "build",
      directory: "/d",
      worktree: "/w",
      abort: new AbortController().signal,
      metadata: () => {},
    };
    const result = zoom.execute({ ref: "0+1" }, context);
    const request = await worker.request("tool");
    expect(request).toMatchObject({
      name: "memory_zoom",
      args: { ref: "0+1" },
      context: { sessionID: "s1", messageID: "m1", agent: "build", directory: "/d", worktree: "/w" },
    });
    worker.answer({ type: "reply", id: request.id, value: "<memory_zoom>…</memory_zoom>" });
    await expect(result).resolves.toBe("<memory_zoom>…</memory_zoom>");

    const failing = zoom.execute({ ref: "nope" }, context);
    const second = await worker.request("tool");
    worker.answer({
      type: "reply",
      id: second.id,
      error: { name: "Error", message: "memory_zoom failed: REF_INVALID: …" },
    });
    await expect(failing).rejects.toThrow("memory_zoom failed: REF_INVALID: …");
  });

  it("waits for the thread's flush at dispose, then ends the thread; a thread that never answers is ended after the bound", async () => {
    const { hooks, worker } = start();
    const disposed = (hooks.dispose as () => Promise<void>)();
    const request = await worker.request("hook");
    expect(request.hook).toBe("dispose");
    expect(worker.terminated).toBe(false);
    worker.answer({ type: "reply", id: request.id });
    await disposed;
    expect(worker.terminated).toBe(true);

    vi.useFakeTimers();
    const { hooks: hung, worker: silent } = start({ closeFlushMs: 1000 });
    const waiting = (hung.dispose as () => Promise<void>)();
    await vi.advanceTimersByTimeAsync(2_999);
    expect(silent.terminated).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await waiting;
    expect(silent.terminated).toBe(true);
  });

  it("hands the flush to a side that outlives the process (the local server) at dispose without waiting, ends the channel after it, and sends the settings' environment and pid with init", async () => {
    const input = { project: { id: "p1" }, worktree: "/w", directory: "/w/d", client: {} } as unknown as PluginInput;
    const channel = new FakeWorker("socket");
    const hooks = remoteHooks(input, {}, served(channel, { DATABASE_URL: "postgres://x" }), { listenToSignals: false });
    expect(channel.posted[0]).toMatchObject({
      type: "init",
      runner: "local server",
      env: { DATABASE_URL: "postgres://x" },
      pid: process.pid,
    });
    await (hooks.dispose as () => Promise<void>)();
    // Posted before the channel ended, in the same stream: the server gets it, and flushes when the connection ends
    // in any case.
    expect(channel.posted.at(-1)).toMatchObject({ type: "hook", hook: "dispose" });
    expect(channel.terminated).toBe(true);

    // A server that went away is named as such in the refusal.
    const gone = new FakeWorker("socket");
    const servedHooks = remoteHooks(input, {}, served(gone, {}), { listenToSignals: false });
    gone.emit("close", undefined);
    const refused = (await (servedHooks["chat.message"] as Hook)(
      { sessionID: "s1" },
      { message: { id: "m1" }, parts: [] },
    ).catch((e: unknown) => e)) as Error;
    expect(refused).toBeInstanceOf(PromptRefused);
    expect(refused.message.replace(/\u2060/g, "")).toMatch(
      /memory is unavailable: the optchat local server stopped \(it ended\); restart OpenCode/,
    );
  });
});
