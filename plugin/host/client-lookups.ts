import type { PluginInput } from "@opencode-ai/plugin";
import type { HostMessage } from "../opencode/messages.js";

/** What the adapter needs from OpenCode beyond hook arguments (absent when the client does not answer). */
export interface HostLookups {
  /** The parent session of a host session, when it is a subagent's. */
  parentOf(hostSessionId: string): Promise<string | undefined>;
  /** A model's context and output limits, in tokens. */
  modelLimits(providerId: string, modelId: string): Promise<{ context: number; output: number } | undefined>;
  /** OpenCode's stored transcript of a session, oldest first (the host transcript is the source, seed 000 §3). */
  transcript(hostSessionId: string): Promise<HostMessage[] | undefined>;
}

/** How long a hook waits for one OpenCode client lookup before going on without it. */
const LOOKUP_TIMEOUT_MS = 2_000;

/** What `client.config.providers()` answers, as far as the plugin reads it. */
interface ProvidersAnswer {
  data?: { providers?: { id: string; models?: Record<string, { limit?: { context?: number; output?: number } }> }[] };
}

/** The adapter's lookups through OpenCode's client (the in-process app inside `opencode run`). */
export function clientLookups(input: PluginInput): HostLookups {
  const client = input.client;
  let providers: Promise<ProvidersAnswer | undefined> | undefined;
  return {
    async parentOf(hostSessionId) {
      const result = await withTimeout(client.session.get({ path: { id: hostSessionId } }));
      const info = (result as { data?: { parentID?: string } } | undefined)?.data;
      return info?.parentID;
    },
    async modelLimits(providerId, modelId) {
      // Kept once OpenCode answered with its providers. A request that failed or answered nothing is forgotten, and
      // a lookup that timed out leaves the request running for the next one: a slow answer (OpenCode still starting
      // its providers under load) must never stand in for the model's limits for the rest of the process (it made a
      // 6k-token model's request go out unrefused, sized for the assumed 32k window).
      providers ??= client.config.providers().then(
        (result) => {
          if (!(result as ProvidersAnswer | undefined)?.data?.providers) providers = undefined;
          return result as ProvidersAnswer | undefined;
        },
        () => {
          providers = undefined;
          return undefined;
        },
      );
      const result = await withTimeout(providers);
      const provider = result?.data?.providers?.find((p) => p.id === providerId);
      const limit = provider?.models?.[modelId]?.limit;
      return limit?.context ? { context: limit.context, output: limit.output ?? 4096 } : undefined;
    },
    async transcript(hostSessionId) {
      // `GET /session/:id/message`: [{info, parts}] oldest first (works inside `opencode run` too: the client calls
      // the in-process app; docs/opencode-notes.md).
      const result = await withTimeout(client.session.messages({ path: { id: hostSessionId } }));
      const data = (result as { data?: unknown } | undefined)?.data;
      return Array.isArray(data) ? (data as HostMessage[]) : undefined;
    },
  };
}

/** The promise's value, or undefined when it takes longer than LOOKUP_TIMEOUT_MS. */
export async function withTimeout<T>(promise: Promise<T>): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), LOOKUP_TIMEOUT_MS);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
