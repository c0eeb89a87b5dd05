import { z } from "zod";

/** US dollars per million tokens. `cacheWrite` applies to tokens written to a prompt cache (Anthropic: 1.25x input). */
export interface ModelPrice {
  readonly input: number;
  readonly cacheRead: number;
  readonly cacheWrite: number;
  readonly output: number;
}

export type PriceTable = Readonly<Record<string, ModelPrice>>;

/**
 * The built-in price table, keyed `provider:model` (a key ending in `*` matches any model of that prefix; a dated
 * model id such as claude-haiku-4-5-20251001 matches its undated key). Figures are the `cost` fields of the models.dev
 * catalogue bundled with OpenCode 1.18.33 (what `client.config.providers()` reports, per million tokens), checked when
 * this was written; OPTCHAT_PRICES overrides or extends them (docs/compactor.md "Cost ledger"). A model that no key
 * matches is unpriced: the caps count it at UNPRICED_PRICE (issue 39: every token counts against the daily cap).
 */
export const DEFAULT_PRICES: PriceTable = Object.freeze({
  "anthropic:claude-haiku-4-5": { input: 1, cacheRead: 0.1, cacheWrite: 1.25, output: 5 },
  "anthropic:claude-3-5-haiku": { input: 0.8, cacheRead: 0.08, cacheWrite: 1, output: 4 },
  "anthropic:claude-sonnet-4-5": { input: 3, cacheRead: 0.3, cacheWrite: 3.75, output: 15 },
  "anthropic:claude-sonnet-4-6": { input: 3, cacheRead: 0.3, cacheWrite: 3.75, output: 15 },
  "anthropic:claude-sonnet-5": { input: 2, cacheRead: 0.2, cacheWrite: 2.5, output: 10 },
  "anthropic:claude-opus-4-5": { input: 5, cacheRead: 0.5, cacheWrite: 6.25, output: 25 },
  "openai:gpt-4.1-mini": { input: 0.4, cacheRead: 0.1, cacheWrite: 0.4, output: 1.6 },
  "openai:gpt-4.1": { input: 2, cacheRead: 0.5, cacheWrite: 2, output: 8 },
  "openai:gpt-4o-mini": { input: 0.15, cacheRead: 0.075, cacheWrite: 0.15, output: 0.6 },
  "openai:gpt-5-nano": { input: 0.05, cacheRead: 0.005, cacheWrite: 0.05, output: 0.4 },
  "openai:gpt-5-mini": { input: 0.25, cacheRead: 0.025, cacheWrite: 0.25, output: 2 },
  "openai:gpt-5": { input: 1.25, cacheRead: 0.125, cacheWrite: 1.25, output: 10 },
  // The deterministic summarizer costs nothing; local servers are free unless OPTCHAT_PRICES says otherwise.
  "fake:*": { input: 0, cacheRead: 0, cacheWrite: 0, output: 0 },
});

/**
 * What a model with no price is counted at against the money caps: claude-sonnet-4-5's list price, dearer than any
 * model the compactor is meant to run on, so an unknown model never spends more than the cap says. A free local
 * server is priced with OPTCHAT_PRICES, e.g. {"openai-compatible:*": {"input": 0, "output": 0}}.
 */
export const UNPRICED_PRICE: ModelPrice = Object.freeze({ input: 3, cacheRead: 0.3, cacheWrite: 3.75, output: 15 });

/** "$3 in / $15 out per million tokens": how UNPRICED_PRICE is named in messages. */
export const UNPRICED_PRICE_TEXT = `$${UNPRICED_PRICE.input} in / $${UNPRICED_PRICE.output} out per million tokens`;

const priceSchema = z
  .object({
    input: z.number().min(0),
    cacheRead: z.number().min(0).optional(),
    cacheWrite: z.number().min(0).optional(),
    output: z.number().min(0),
  })
  .strict();

/**
 * OPTCHAT_PRICES: a JSON object of `provider:model` keys to `{input, output, cacheRead?, cacheWrite?}` in USD per
 * million tokens (cacheRead defaults to input, cacheWrite to input). Throws with the key that is wrong.
 */
export function parsePriceOverrides(json: string): PriceTable {
  if (json.trim() === "") return {};
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch (error) {
    throw new Error(`not JSON (${(error as Error).message})`);
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw new Error("not a JSON object");
  const table: Record<string, ModelPrice> = {};
  for (const [key, value] of Object.entries(raw)) {
    if (!/^[a-z0-9-]+:.+$/.test(key)) throw new Error(`key '${key}' is not provider:model`);
    const parsed = priceSchema.safeParse(value);
    if (!parsed.success) throw new Error(`'${key}' needs {input, output, cacheRead?, cacheWrite?} as numbers >= 0`);
    const { input, output } = parsed.data;
    table[key] = {
      input,
      output,
      cacheRead: parsed.data.cacheRead ?? input,
      cacheWrite: parsed.data.cacheWrite ?? input,
    };
  }
  return table;
}

/** The built-in table with the overrides on top. */
export function priceTable(overrides: PriceTable = {}): PriceTable {
  return Object.freeze({ ...DEFAULT_PRICES, ...overrides });
}

/** The price of a provider's model: an exact key, else a dated id's undated key, else the longest `*` prefix. */
export function priceOf(table: PriceTable, provider: string, model: string): ModelPrice | undefined {
  const key = `${provider}:${model}`;
  if (table[key]) return table[key];
  const undated = key.replace(/-\d{8}$/, "").replace(/-latest$/, "");
  if (table[undated]) return table[undated];
  let best: { length: number; price: ModelPrice } | undefined;
  for (const [pattern, price] of Object.entries(table)) {
    if (!pattern.endsWith("*")) continue;
    const prefix = pattern.slice(0, -1);
    if (key.startsWith(prefix) && (!best || prefix.length > best.length)) best = { length: prefix.length, price };
  }
  return best?.price;
}

export interface TokenCounts {
  /** Every input token, cached or not. */
  readonly inputTokens: number;
  readonly cacheReadTokens: number;
  readonly cacheWriteTokens: number;
  readonly outputTokens: number;
}

/** What the tokens cost at `price`, in USD. */
export function costOf(price: ModelPrice, tokens: TokenCounts): number {
  const uncached = Math.max(0, tokens.inputTokens - tokens.cacheReadTokens - tokens.cacheWriteTokens);
  return (
    (uncached * price.input +
      tokens.cacheReadTokens * price.cacheRead +
      tokens.cacheWriteTokens * price.cacheWrite +
      tokens.outputTokens * price.output) /
    1_000_000
  );
}
