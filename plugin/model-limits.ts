/** A model's context and output limits, in tokens. */
export interface Limits {
  readonly context: number;
  readonly output: number;
}

/**
 * The models' limits as this process learned them: from `chat.params` (OpenCode passes the model there) or, before
 * the first one, from OpenCode's client (a lookup that may fail or time out: then the request assumes a window).
 */
export class ModelLimits {
  private readonly known = new Map<string, Limits>();

  constructor(private readonly lookup: (providerId: string, modelId: string) => Promise<Limits | undefined>) {}

  note(providerId: string, modelId: string, limit: { context?: number; output?: number } | undefined): void {
    if (limit?.context)
      this.known.set(`${providerId}/${modelId}`, { context: limit.context, output: limit.output ?? 4096 });
  }

  /**
   * Starts the lookup of a model the session is about to use, without waiting for it: the transform that needs the
   * limits then waits only for what is left of it. Called when OpenCode announces a step's assistant message, which it
   * creates once the model is resolved, 16-20 ms before that step's `experimental.chat.messages.transform` in
   * `opencode run` (docs/opencode-notes.md "The plugin's thread"); the providers are up by then, so the lookup does not
   * hold up the plugin's other client calls behind OpenCode's provider start-up, as a lookup at `chat.message` did.
   */
  prefetch(providerId: string | undefined, modelId: string | undefined): void {
    if (!providerId || !modelId || this.known.has(`${providerId}/${modelId}`)) return;
    void this.of(providerId, modelId).catch(() => undefined);
  }

  async of(providerId: string, modelId: string): Promise<Limits | undefined> {
    const key = `${providerId}/${modelId}`;
    const known = this.known.get(key);
    if (known) return known;
    const found = await this.lookup(providerId, modelId).catch(() => undefined);
    if (found) this.known.set(key, found);
    return found;
  }
}
