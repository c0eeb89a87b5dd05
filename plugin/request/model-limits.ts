/** A model's context and output limits, in tokens. */
export interface Limits {
  readonly context: number;
  readonly output: number;
}

/**
 * Limits that other OpenCode processes served by the same local server learned, by the processes' directory and the
 * model (plugin/transport/local-server/server.ts keeps one for its lifetime; a process of its own has none).
 */
export type RememberedLimits = Map<string, Limits>;

/** A model's limits for a request; `confirmed` false: remembered from another process, to be checked at chat.params. */
export interface FoundLimits {
  readonly limits: Limits;
  readonly confirmed: boolean;
}

/**
 * The models' limits as this process learned them: from `chat.params` (OpenCode passes the model there) or, before
 * the first one, from OpenCode's client (a lookup that may fail or time out: then the request assumes a window).
 *
 * Served by the local server, a process first takes what an earlier process of the same directory learned, without
 * the lookup: the lookup was a round trip to OpenCode's event loop, busy starting up, inside the first request's
 * transform (11-18 ms of its 22-31 ms in the server, measured December 2026), and OpenCode's answer lists every model of
 * every provider. Such limits are not confirmed: the request is sized with them as with an assumed window, and its
 * `chat.params` checks it against the model's real window (plugin/request/checks.ts), which it then remembers.
 */
export class ModelLimits {
  private readonly known = new Map<string, Limits>();

  constructor(
    private readonly lookup: (providerId: string, modelId: string) => Promise<Limits | undefined>,
    private readonly remembered?: { readonly store: RememberedLimits; readonly directory: string },
  ) {}

  note(providerId: string, modelId: string, limit: { context?: number; output?: number } | undefined): void {
    if (limit?.context)
      this.learn(`${providerId}/${modelId}`, { context: limit.context, output: limit.output ?? 4096 });
  }

  /**
   * Starts the lookup of a model the session is about to use, without waiting for it: the transform that needs the
   * limits then waits only for what is left of it. Called when OpenCode announces a step's assistant message, which it
   * creates once the model is resolved, 16-20 ms before that step's `experimental.chat.messages.transform` in
   * `opencode run` (docs/opencode-notes.md "The plugin's thread"); the providers are up by then, so the lookup does not
   * hold up the plugin's other client calls behind OpenCode's provider start-up, as a lookup at `chat.message` did.
   */
  prefetch(providerId: string | undefined, modelId: string | undefined): void {
    if (!providerId || !modelId) return;
    const key = `${providerId}/${modelId}`;
    if (this.known.has(key) || this.rememberedOf(key)) return;
    void this.of(providerId, modelId).catch(() => undefined);
  }

  async of(providerId: string, modelId: string): Promise<FoundLimits | undefined> {
    const key = `${providerId}/${modelId}`;
    const known = this.known.get(key);
    if (known) return { limits: known, confirmed: true };
    const remembered = this.rememberedOf(key);
    if (remembered) return { limits: remembered, confirmed: false };
    const found = await this.lookup(providerId, modelId).catch(() => undefined);
    if (!found) return undefined;
    this.learn(key, found);
    return { limits: found, confirmed: true };
  }

  private learn(key: string, limits: Limits): void {
    this.known.set(key, limits);
    this.remembered?.store.set(`${this.remembered.directory}\0${key}`, limits);
  }

  private rememberedOf(key: string): Limits | undefined {
    return this.remembered?.store.get(`${this.remembered.directory}\0${key}`);
  }
}
