/**
 * The model's context window under V2: `ctx.model.list()` gives every configured model with its `limit.context`
 * (docs/opencode-v2-notes.md "The V2 host"), read once per process and kept; a model V2 does not list, or a V2
 * without the call, gets `OPTCHAT_V2_WINDOW_TOKENS` (default 128000).
 */
import type { V2Context, V2ModelInfo } from "./v2-api.js";

export const DEFAULT_V2_WINDOW_TOKENS = 128_000;

export function modelWindows(
  ctx: V2Context,
  env: NodeJS.ProcessEnv,
  report: (where: string, error: unknown) => void,
): (model: { id: string; providerID: string }) => Promise<number> {
  const configured = Number(env.OPTCHAT_V2_WINDOW_TOKENS ?? DEFAULT_V2_WINDOW_TOKENS);
  const fallback = Number.isFinite(configured) && configured > 0 ? configured : DEFAULT_V2_WINDOW_TOKENS;
  let listed: Promise<V2ModelInfo[]> | undefined;
  return async (model) => {
    listed ??= Promise.resolve(ctx.model?.list())
      .then((answer) => answer?.data ?? [])
      .catch((error) => {
        report("reading the model's window", error);
        return [];
      });
    return windowOf(await listed, model) ?? fallback;
  };
}

/** The listed model's context limit (matched by provider and id), when V2 states one. */
export function windowOf(
  models: readonly V2ModelInfo[],
  model: { id: string; providerID: string },
): number | undefined {
  const found = models.find(
    (entry) => entry.providerID === model.providerID && (entry.id === model.id || entry.modelID === model.id),
  );
  const limit = found?.limit?.context;
  return typeof limit === "number" && limit > 0 ? limit : undefined;
}
