import { type CallTotals, scopeOfTree, sumCallsToday } from "../store/compactor-calls.js";
import type { Queryable } from "../store/db.js";
import { costOf, type PriceTable, priceOf, UNPRICED_PRICE } from "./prices.js";

/** The compactor's daily caps (UTC days); 0 turns one off. Tokens count every input token, cached or not, and output. */
export interface BudgetSettings {
  readonly dailyUsd: number;
  readonly dailyTokens: number;
  readonly scopeDailyUsd: number;
  readonly scopeDailyTokens: number;
  readonly prices: PriceTable;
}

export type BudgetVerdict = { readonly allowed: true } | { readonly allowed: false; readonly reason: string };

/** Spend of a set of calls: tokens, cost, and the tokens no price covers (counted in costUsd at UNPRICED_PRICE). */
export interface Spend {
  readonly calls: number;
  readonly tokens: number;
  readonly costUsd: number;
  readonly unpricedTokens: number;
  /** The part of costUsd that is unpriced tokens at UNPRICED_PRICE. */
  readonly unpricedUsd: number;
}

/** Totals per model priced with the table; a model without a price is counted at UNPRICED_PRICE (and named so). */
export function spendOf(
  rows: readonly (CallTotals & { provider: string; model: string })[],
  prices: PriceTable,
): Spend {
  let calls = 0;
  let tokens = 0;
  let costUsd = 0;
  let unpricedTokens = 0;
  let unpricedUsd = 0;
  for (const row of rows) {
    const rowTokens = row.inputTokens + row.outputTokens;
    calls += row.calls;
    tokens += rowTokens;
    const price = priceOf(prices, row.provider, row.model);
    if (price) costUsd += costOf(price, row);
    else {
      unpricedTokens += rowTokens;
      unpricedUsd += costOf(UNPRICED_PRICE, row);
    }
  }
  return { calls, tokens, costUsd: costUsd + unpricedUsd, unpricedTokens, unpricedUsd };
}

/**
 * How long a "spent" verdict is reused: past the cap every job builds a fallback at once and would check again at
 * once; the answer can only change at the next UTC day. An "allowed" verdict is never reused, so the cap is exact up
 * to the calls already running.
 */
const SPENT_TTL_MS = 5_000;

/**
 * The budget cap (issue 13 item 5). Checked before a job calls the model: past a cap the job builds a labelled
 * fallback node instead (src/core/fallback.ts), so spending stops while memory stays ready. The ledger is the source of
 * truth (every worker's calls are in it), so the cap holds across processes, give or take the jobs already running and
 * the few seconds a "spent" verdict is reused.
 */
export function createBudget(db: Queryable, settings: BudgetSettings, now: () => Date = () => new Date()) {
  const cached = new Map<string, { at: number; verdict: BudgetVerdict }>();
  const limited =
    settings.dailyUsd > 0 || settings.dailyTokens > 0 || settings.scopeDailyUsd > 0 || settings.scopeDailyTokens > 0;

  const judge = async (scopeId: string | undefined): Promise<BudgetVerdict> => {
    const today = now();
    if (settings.dailyUsd > 0 || settings.dailyTokens > 0) {
      const all = spendOf(await sumCallsToday(db, today), settings.prices);
      const over = overLimit(all, settings.dailyUsd, settings.dailyTokens, "OPTCHAT_BUDGET_DAILY", "all scopes");
      if (over) return { allowed: false, reason: over };
    }
    if (scopeId !== undefined && (settings.scopeDailyUsd > 0 || settings.scopeDailyTokens > 0)) {
      const scope = spendOf(await sumCallsToday(db, today, scopeId), settings.prices);
      const over = overLimit(
        scope,
        settings.scopeDailyUsd,
        settings.scopeDailyTokens,
        "OPTCHAT_BUDGET_SCOPE_DAILY",
        `scope ${scopeId}`,
      );
      if (over) return { allowed: false, reason: over };
    }
    return { allowed: true };
  };

  const scopes = new Map<number, string | undefined>();
  let state: "spent" | "available" = "available";

  return {
    limited,
    /** Whether a model call for a tree (its own scope, else its session's) is within every cap today. */
    async checkTree(treeId: number, scopeId: string | null): Promise<BudgetVerdict> {
      if (!limited) return { allowed: true };
      let scope = scopeId ?? scopes.get(treeId);
      if (scope === undefined && !scopes.has(treeId)) {
        scope = await scopeOfTree(db, treeId);
        scopes.set(treeId, scope);
      }
      return await this.check(scope);
    },
    /** Records the latest verdict's state; true when it changed (so it is reported once). */
    noteState(next: "spent" | "available"): boolean {
      const changed = next !== state;
      state = next;
      return changed;
    },
    /** Whether a model call for `scopeId` is within every cap today. */
    async check(scopeId: string | undefined): Promise<BudgetVerdict> {
      if (!limited) return { allowed: true };
      const key = scopeId ?? "";
      const hit = cached.get(key);
      const at = now().getTime();
      if (hit && !hit.verdict.allowed && at - hit.at < SPENT_TTL_MS) return hit.verdict;
      const verdict = await judge(scopeId);
      cached.set(key, { at, verdict });
      return verdict;
    },
  };
}

export type Budget = ReturnType<typeof createBudget>;

function overLimit(spend: Spend, usd: number, tokens: number, setting: string, what: string): string | undefined {
  if (usd > 0 && spend.costUsd >= usd) {
    return `the compactor's budget is spent: $${spend.costUsd.toFixed(4)} today (UTC) for ${what}, cap ${setting}_USD=${usd}`;
  }
  if (tokens > 0 && spend.tokens >= tokens) {
    return `the compactor's budget is spent: ${spend.tokens} tokens today (UTC) for ${what}, cap ${setting}_TOKENS=${tokens}`;
  }
  return undefined;
}
