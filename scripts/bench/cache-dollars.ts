/**
 * `bench cache`, the whole bill (issue 39): the compactor's calls read from the plugin's cost ledger after a run, and
 * every figure of a run priced in dollars at list prices (src/compactor/prices.ts), main model and compactor apart.
 *
 * Price pairs: anthropic-sim is priced as claude-sonnet-4-5 (main) + claude-haiku-4-5 (compactor), openai-sim as
 * gpt-4.1 + gpt-4.1-mini: each simulator applies its provider's caching rules (Anthropic's written tokens at 1.25×,
 * OpenAI's automatic prefix cache), so each pair is priced on the wire it would be sent on.
 */
import pg from "pg";
import { costOf, DEFAULT_PRICES, type ModelPrice, priceOf } from "../../src/compactor/prices.js";
import { ratio, round } from "./common.js";

export interface PricePair {
  readonly name: string;
  readonly main: string;
  readonly compactor: string;
}

export const PRICE_PAIRS: Readonly<Record<"anthropic-sim" | "openai-sim", PricePair>> = {
  "anthropic-sim": {
    name: "claude-sonnet-4-5 + claude-haiku-4-5",
    main: "anthropic:claude-sonnet-4-5",
    compactor: "anthropic:claude-haiku-4-5",
  },
  "openai-sim": { name: "gpt-4.1 + gpt-4.1-mini", main: "openai:gpt-4.1", compactor: "openai:gpt-4.1-mini" },
};

/** The compactor's summarizer settings for a run on `provider`: the real SDK provider at the scripted model. */
export function compactorEnv(provider: keyof typeof PRICE_PAIRS, modelUrl: string): Record<string, string> {
  const [summarizer, model] = PRICE_PAIRS[provider].compactor.split(":") as [string, string];
  return {
    OPTCHAT_SUMMARIZER: summarizer,
    OPTCHAT_SUMMARIZER_MODEL: model,
    OPTCHAT_SUMMARIZER_URL: modelUrl,
    OPTCHAT_SUMMARIZER_API_KEY: "bench",
  };
}

export function listPrice(key: string): ModelPrice {
  const [provider, model] = key.split(":") as [string, string];
  const price = priceOf(DEFAULT_PRICES, provider, model);
  if (!price) throw new Error(`bench cache: no list price for ${key} in src/compactor/prices.ts`);
  return price;
}

export interface Tokens {
  inputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  outputTokens: number;
}

export interface CompactorFigures extends Tokens {
  calls: number;
  /** Calls by purpose: leaf, merge, publication, retry. */
  byPurpose: Record<string, number>;
  /** Tokens by purpose: where the compactor's dollars go. */
  tokensByPurpose: Record<string, Tokens>;
  storedRecords: number;
}

export const NO_COMPACTOR: CompactorFigures = {
  calls: 0,
  byPurpose: {},
  tokensByPurpose: {},
  storedRecords: 0,
  inputTokens: 0,
  cacheReadTokens: 0,
  cacheWriteTokens: 0,
  outputTokens: 0,
};

/**
 * The compactor's calls per OpenCode session (by its host id; calls of the scope's shared tree that belong to no
 * session under "shared") and the records each session stored, from the plugin's database.
 */
export async function readCompactorFigures(databaseUrl: string): Promise<Map<string, CompactorFigures>> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const calls = await client.query<{
      host: string;
      purpose: string;
      calls: number;
      input: number;
      read: number;
      write: number;
      output: number;
    }>(
      `SELECT coalesce(s.host_session_id, 'shared') AS host, c.purpose, count(*)::int AS calls,
              sum(c.input_tokens)::float8 AS input, sum(c.cache_read_tokens)::float8 AS read,
              sum(c.cache_write_tokens)::float8 AS write, sum(c.output_tokens)::float8 AS output
         FROM optchat.compactor_calls c LEFT JOIN optchat.sessions s ON s.session_id = c.session_id
        GROUP BY 1, 2`,
    );
    const records = await client.query<{ host: string; n: number }>(
      `SELECT s.host_session_id AS host, count(*)::int AS n
         FROM optchat.records r JOIN optchat.sessions s ON s.session_id = r.session_id GROUP BY 1`,
    );
    const out = new Map<string, CompactorFigures>();
    const of = (host: string) => {
      let figures = out.get(host);
      if (!figures) {
        figures = { ...NO_COMPACTOR, byPurpose: {}, tokensByPurpose: {} };
        out.set(host, figures);
      }
      return figures;
    };
    for (const row of calls.rows) {
      const f = of(row.host);
      f.calls += row.calls;
      f.byPurpose[row.purpose] = (f.byPurpose[row.purpose] ?? 0) + row.calls;
      addTokens(f.tokensByPurpose, row.purpose, {
        inputTokens: row.input,
        cacheReadTokens: row.read,
        cacheWriteTokens: row.write,
        outputTokens: row.output,
      });
      f.inputTokens += row.input;
      f.cacheReadTokens += row.read;
      f.cacheWriteTokens += row.write;
      f.outputTokens += row.output;
    }
    for (const row of records.rows) of(row.host).storedRecords += row.n;
    return out;
  } finally {
    await client.end();
  }
}

export function addFigures(parts: readonly CompactorFigures[]): CompactorFigures {
  const total: CompactorFigures = { ...NO_COMPACTOR, byPurpose: {}, tokensByPurpose: {} };
  for (const f of parts) {
    total.calls += f.calls;
    total.storedRecords += f.storedRecords;
    total.inputTokens += f.inputTokens;
    total.cacheReadTokens += f.cacheReadTokens;
    total.cacheWriteTokens += f.cacheWriteTokens;
    total.outputTokens += f.outputTokens;
    for (const [purpose, n] of Object.entries(f.byPurpose))
      total.byPurpose[purpose] = (total.byPurpose[purpose] ?? 0) + n;
    for (const [purpose, t] of Object.entries(f.tokensByPurpose)) addTokens(total.tokensByPurpose, purpose, t);
  }
  return total;
}

function addTokens(into: Record<string, Tokens>, key: string, t: Tokens): void {
  const sum = into[key] ?? { inputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, outputTokens: 0 };
  sum.inputTokens += t.inputTokens;
  sum.cacheReadTokens += t.cacheReadTokens;
  sum.cacheWriteTokens += t.cacheWriteTokens;
  sum.outputTokens += t.outputTokens;
  into[key] = sum;
}

/** Per purpose: tokens in (read / written / all), out, and dollars at the pair's compactor price. */
function purposeFields(f: CompactorFigures, price: ModelPrice) {
  const out: Record<string, Record<string, number>> = {};
  for (const [purpose, t] of Object.entries(f.tokensByPurpose))
    out[purpose] = {
      input: t.inputTokens,
      read: t.cacheReadTokens,
      write: t.cacheWriteTokens,
      output: t.outputTokens,
      dollars: round(costOf(price, t), 4),
    };
  return out;
}

/** What the compactor line of a run (or a session) reports: calls, cache share, output per call, dollars. */
export function compactorFields(f: CompactorFigures, pair: PricePair) {
  return {
    calls: f.calls,
    callsByPurpose: f.byPurpose,
    storedRecords: f.storedRecords,
    callsPerStoredRecord: ratio(f.calls, f.storedRecords),
    inputTokens: f.inputTokens,
    cacheReadTokens: f.cacheReadTokens,
    cacheWriteTokens: f.cacheWriteTokens,
    outputTokens: f.outputTokens,
    cacheReadShare: ratio(f.cacheReadTokens, f.inputTokens),
    outputTokensPerCall: f.calls > 0 ? round(f.outputTokens / f.calls, 1) : null,
    inputTokensPerCall: f.calls > 0 ? round(f.inputTokens / f.calls, 0) : null,
    dollars: round(costOf(listPrice(pair.compactor), f), 4),
    byPurpose: purposeFields(f, listPrice(pair.compactor)),
  };
}

export function mainDollars(tokens: Tokens, pair: PricePair): number {
  return costOf(listPrice(pair.main), tokens);
}

/**
 * Waits (at most `timeoutMs`) until the plugin's compactor has no open job: the last turns' leaves, merges and
 * publications are then in the ledger, so the bill counts the work the run caused, not just what finished in time.
 */
export async function waitCompactorIdle(databaseUrl: string, timeoutMs: number): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const open = await client.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pgboss.job WHERE name LIKE 'optchat-%' AND state IN ('created', 'retry', 'active')",
      );
      const n = open.rows[0]?.n ?? 0;
      if (n === 0 || Date.now() > deadline) return n;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  } finally {
    await client.end();
  }
}

/** Issue 39's targets on this workload: the project's whole bill and the compactor's share, against native. */
export const TARGETS = { totalVsNative: 0.9, compactorVsNativeMain: 0.15 } as const;

/**
 * The `{"case":"dollars"}` line's figures: per provider (price pair), native's main-model dollars, and per optchat
 * variant its main model, compactor and total dollars with their ratios to native, all measured in this run.
 */
export function dollarRatios(
  providers: readonly (keyof typeof PRICE_PAIRS)[],
  variants: readonly string[],
  dollars: ReadonlyMap<
    string,
    { main: number; compactor: number; compactorFigures: ReturnType<typeof compactorFields> }
  >,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const provider of providers) {
    const native = dollars.get(`${provider}/native`);
    const entry: Record<string, unknown> = {
      prices: PRICE_PAIRS[provider].name,
      nativeMain: native ? round(native.main, 4) : null,
    };
    for (const variant of variants) {
      if (variant === "native") continue;
      const run = dollars.get(`${provider}/${variant}`);
      if (!run) continue;
      const total = run.main + run.compactor;
      const key = variant === "optchat" ? "optchat" : variant.replace(/^optchat-/, "");
      entry[key] = {
        main: round(run.main, 4),
        compactor: round(run.compactor, 4),
        total: round(total, 4),
        mainVsNative: ratio(run.main, native?.main),
        totalVsNative: ratio(total, native?.main),
        compactorVsNativeMain: ratio(run.compactor, native?.main),
        compactorCalls: run.compactorFigures.calls,
        compactorCallsPerStoredRecord: run.compactorFigures.callsPerStoredRecord,
        compactorCacheReadShare: run.compactorFigures.cacheReadShare,
        compactorOutputTokensPerCall: run.compactorFigures.outputTokensPerCall,
        targets: TARGETS,
        met:
          native !== undefined &&
          total <= TARGETS.totalVsNative * native.main &&
          run.compactor <= TARGETS.compactorVsNativeMain * native.main,
      };
    }
    out[provider] = entry;
  }
  return out;
}
