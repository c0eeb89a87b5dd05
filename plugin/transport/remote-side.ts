/**
 * OpenCode's view of the plugin's side over a channel (plugin/transport/channel.ts): requests waiting for answers, the
 * calls of OpenCode's client the side asks for, and why the side is gone once it is. It is the Closable that
 * plugin/transport/shutdown.ts closes or flushes on a stop signal (signals reach only OpenCode's thread): it has the
 * side do it. The channel may come later than the side's first calls (`attach`): OpenCode gets the hooks at once.
 */
import type { PluginInput } from "@opencode-ai/plugin";
import type { Closable } from "../base/closing.js";
import { PromptRefused } from "../base/prompt-refused.js";
import { withoutRetryTriggers } from "../base/retry-triggers.js";
import type { Channel } from "./channel.js";
import { callClient } from "./client-calls.js";
import { type SideError, sideError, type ToOpencodeSide, type ToPluginSide } from "./protocol.js";

interface Pending {
  resolve(value: unknown): void;
  reject(error: Error): void;
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** A request to the side, without its id (given here). */
export type SideRequest = DistributiveOmit<Extract<ToPluginSide, { id: number }>, "id">;

export class RemoteSide implements Closable {
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private channel: Channel | undefined;
  /** Why the side is gone (it failed, it could not be set up, or it was stopped after the dispose), once it is. */
  stopped: string | undefined;
  /** What the side is called in messages (the channel's name once it is known). */
  sideName = "the plugin's side";
  /** Stops closing this side on signals (set once registered). */
  unregister: () => void = () => {};
  /** Resolves with the channel once attached; rejects when none could be set up. */
  readonly ready: Promise<Channel>;
  /** True once `ready` has settled: calls then go at once, in the order OpenCode makes them. */
  settled = false;
  private settleReady: { resolve(channel: Channel): void; reject(error: Error): void } | undefined;

  constructor(private readonly input: PluginInput) {
    this.ready = new Promise<Channel>((resolve, reject) => {
      this.settleReady = { resolve, reject };
    });
    // A hook that is not waiting for the channel must not see an unhandled rejection.
    this.ready.catch(() => undefined);
  }

  /** The channel is set up: it listens here, never keeps OpenCode alive by itself, and gets `first` before anything. */
  attach(channel: Channel, first: ToPluginSide): void {
    this.channel = channel;
    this.sideName = channel.sideName;
    channel.listen({ message: (data) => this.receive(data), failed: (reason) => this.fail(reason) });
    // Never keeps OpenCode alive by itself: `opencode run` exits once its dispose returned.
    channel.unref();
    this.post(first);
    this.settled = true;
    this.settleReady?.resolve(channel);
  }

  /** No channel could be set up at all: every request is refused with why. */
  setUpFailed(error: unknown): void {
    const reason = `it could not be set up: ${error instanceof Error ? error.message : String(error)}`;
    this.fail(reason);
    this.settled = true;
    this.settleReady?.reject(new Error(reason));
  }

  /**
   * Runs `work` once the channel is set up (or could not be): at once when it is, else after the calls that came
   * before, in order.
   */
  whenReady<T>(work: () => T | Promise<T>): Promise<T> {
    if (this.settled) {
      try {
        return Promise.resolve(work());
      } catch (error) {
        return Promise.reject(error);
      }
    }
    return this.ready.then(work, work);
  }

  /**
   * Sends a request and waits for its answer; rejects at once when the side is gone. While any request waits, the
   * channel holds the process open (an unreferenced one would let `opencode run` exit in the middle of a hook); idle,
   * it never does.
   */
  request(message: SideRequest): Promise<unknown> {
    if (this.stopped || !this.channel)
      return Promise.reject(new Error(`optchat: ${this.sideName} stopped: ${this.stopped ?? "not set up"}`));
    const id = this.nextId++;
    const channel = this.channel;
    return new Promise((resolve, reject) => {
      if (this.pending.size === 0) channel.ref();
      this.pending.set(id, { resolve, reject });
      try {
        this.post({ ...message, id } as ToPluginSide);
      } catch (error) {
        this.settle(id)?.reject(error instanceof Error ? error : new Error(String(error)));
      }
    });
  }

  /** Sends without waiting (events); dropped once the side is gone; throws when the channel cannot send it. */
  post(message: ToPluginSide): void {
    if (this.stopped) return;
    this.channel?.post(message);
  }

  /** SIGTERM/SIGHUP (plugin/transport/shutdown.ts): the side flushes and closes its adapters. */
  async close(): Promise<void> {
    await this.request({ type: "signal", signal: "close" }).catch(() => undefined);
  }

  /** SIGINT: the side flushes, keeping everything open. */
  async flush(): Promise<unknown> {
    return await this.request({ type: "signal", signal: "flush" }).catch(() => undefined);
  }

  /** Ends the channel (after the dispose): requests still waiting are refused. */
  stop(): void {
    this.fail("it was stopped after OpenCode's dispose", false);
    this.channel?.close();
  }

  /**
   * The refusal of a prompt while the side is gone, unless readiness is partial: the one way optchat stops a prompt
   * besides the side's own PromptRefused. Without retry triggers ("unavailable", "terminated"...): a chat.params throw
   * matching one is retried by OpenCode for ~77 s (plugin/base/retry-triggers.ts).
   */
  refusalWhenStopped(partial: boolean): PromptRefused | undefined {
    if (!this.stopped || partial) return undefined;
    return new PromptRefused(
      withoutRetryTriggers(
        `optchat: memory is unavailable: ${this.sideName} stopped (${this.stopped}); restart OpenCode, or set OPTCHAT_READINESS=partial to continue without memory`,
      ),
    );
  }

  private fail(reason: string, report = true): void {
    if (this.stopped) return;
    this.stopped = reason;
    this.unregister();
    if (report) process.stderr.write(`optchat: ${this.sideName} stopped: ${reason}\n`);
    for (const [id, pending] of this.pending) {
      this.settle(id);
      pending.reject(new Error(`optchat: ${this.sideName} stopped: ${reason}`));
    }
  }

  /** Takes a request off the waiting list; the last one lets the channel go unreferenced again. */
  private settle(id: number): Pending | undefined {
    const pending = this.pending.get(id);
    if (!pending) return undefined;
    this.pending.delete(id);
    if (this.pending.size === 0) this.channel?.unref();
    return pending;
  }

  private receive(message: ToOpencodeSide): void {
    if (message.type === "client") {
      this.answerClient(message);
      return;
    }
    const pending = this.settle(message.id);
    if (!pending) return;
    if (message.error) pending.reject(rebuild(message.error));
    else pending.resolve(message.value);
  }

  /** A call of OpenCode's client on the side's behalf (plugin/transport/client-calls.ts). */
  private answerClient(message: Extract<ToOpencodeSide, { type: "client" }>): void {
    const answer = (reply: Omit<Extract<ToPluginSide, { type: "client-reply" }>, "type" | "id">) => {
      try {
        this.post({ type: "client-reply", id: message.id, ...reply });
      } catch (error) {
        this.post({ type: "client-reply", id: message.id, error: sideError(error) });
      }
    };
    void callClient(this.input.client, message.call, message.args).then(
      (value) => answer({ value }),
      (error: unknown) => answer({ error: sideError(error) }),
    );
  }
}

/** The side's error as OpenCode's side throws it: a refused prompt stays a PromptRefused. */
function rebuild(error: SideError): Error {
  if (error.name === "PromptRefused") return new PromptRefused(withoutRetryTriggers(error.message));
  return Object.assign(new Error(error.message), { name: error.name });
}
