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

  async of(providerId: string, modelId: string): Promise<Limits | undefined> {
    const key = `${providerId}/${modelId}`;
    const known = this.known.get(key);
    if (known) return known;
    const found = await this.lookup(providerId, modelId).catch(() => undefined);
    if (found) this.known.set(key, found);
    return found;
  }
}
