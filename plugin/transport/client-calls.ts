/**
 * What the plugin's thread may ask of OpenCode's client, answered on OpenCode's thread (plugin/transport/remote-hooks.ts): only
 * `{ data }` crosses back (the SDK's response objects cannot be copied), and of the providers only what the thread reads.
 */
import type { PluginInput } from "@opencode-ai/plugin";
import type { ClientCall } from "./protocol.js";

/** One call of OpenCode's client on the thread's behalf. */
export async function callClient(client: PluginInput["client"], call: ClientCall, args: unknown): Promise<unknown> {
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
 * model the credential, base URL and AI SDK package: plugin/host/client-lookups.ts, plugin/opencode/compactor-model.ts). OpenCode's
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
