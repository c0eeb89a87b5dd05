import { type BudgetSettings, type Spend, spendOf } from "../compactor/budget.js";
import { costOf, type PriceTable, priceOf, UNPRICED_PRICE_TEXT } from "../compactor/prices.js";
import { FALLBACK_LABEL } from "../core/fallback.js";
import {
  type CallGroup,
  type CallTotals,
  countFallbackNodes,
  sumCallsToday,
  sumCallsTodayBySession,
  sumCompactorCalls,
} from "../store/compactor-calls.js";
import type { Queryable } from "../store/db.js";

/** One line of `optchat cost`: a day, scope, session and model, with its tokens and what they cost (null: unpriced). */
export interface CostLine extends CallGroup {
  readonly costUsd: number | null;
}

export interface CostTotals extends CallTotals {
  readonly costUsd: number;
  /** Tokens of models the price table does not know: counted, not priced. */
  readonly unpricedTokens: number;
  /** Share of input tokens read from a prompt cache. */
  readonly cacheReadShare: number | null;
}

export interface CostReport {
  readonly since: string;
  readonly scopeId: string | null;
  readonly sessionId: string | null;
  readonly lines: readonly CostLine[];
  readonly byDay: readonly ({ day: string } & CostTotals)[];
  readonly byScope: readonly ({ scopeId: string | null } & CostTotals)[];
  readonly bySession: readonly ({ scopeId: string | null; sessionId: string | null } & CostTotals)[];
  readonly total: CostTotals;
  /** Nodes built as labelled fallbacks in the period (the budget was spent). */
  readonly fallbackNodes: number;
}

/** The ledger since `since`, optionally of one scope or session, priced with `prices` and totalled three ways. */
export async function readCost(
  db: Queryable,
  prices: PriceTable,
  filter: { since: Date; scopeId?: string; sessionId?: string },
): Promise<CostReport> {
  const groups = await sumCompactorCalls(db, filter);
  const lines: CostLine[] = groups.map((group) => {
    const price = priceOf(prices, group.provider, group.model);
    return { ...group, costUsd: price ? costOf(price, group) : null };
  });
  const totalBy = <K extends string>(key: (line: CostLine) => K) => {
    const out = new Map<K, CostLine[]>();
    for (const line of lines) out.set(key(line), [...(out.get(key(line)) ?? []), line]);
    return out;
  };
  return {
    since: filter.since.toISOString(),
    scopeId: filter.scopeId ?? null,
    sessionId: filter.sessionId ?? null,
    lines,
    byDay: [...totalBy((l) => l.day)].map(([day, group]) => ({ day, ...totalsOf(group) })),
    byScope: [...totalBy((l) => l.scopeId ?? "")].map(([scope, group]) => ({
      scopeId: scope || null,
      ...totalsOf(group),
    })),
    bySession: [...totalBy((l) => `${l.scopeId ?? ""}\u0000${l.sessionId ?? ""}`)].map(([, group]) => ({
      scopeId: group[0]?.scopeId ?? null,
      sessionId: group[0]?.sessionId ?? null,
      ...totalsOf(group),
    })),
    total: totalsOf(lines),
    fallbackNodes: await countFallbackNodes(db, filter.since, filter.scopeId),
  };
}

function totalsOf(lines: readonly CostLine[]): CostTotals {
  const sum = (f: (l: CostLine) => number) => lines.reduce((s, l) => s + f(l), 0);
  const inputTokens = sum((l) => l.inputTokens);
  const cacheReadTokens = sum((l) => l.cacheReadTokens);
  return {
    calls: sum((l) => l.calls),
    failedCalls: sum((l) => l.failedCalls),
    inputTokens,
    cacheReadTokens,
    cacheWriteTokens: sum((l) => l.cacheWriteTokens),
    outputTokens: sum((l) => l.outputTokens),
    costUsd: sum((l) => l.costUsd ?? 0),
    unpricedTokens: sum((l) => (l.costUsd === null ? l.inputTokens + l.outputTokens : 0)),
    cacheReadShare: inputTokens > 0 ? Math.round((cacheReadTokens / inputTokens) * 1000) / 1000 : null,
  };
}

/** Today's (UTC) compactor spend, of all scopes and optionally of one, against the caps: for status and inspect. */
export interface TodaySpend {
  readonly day: string;
  readonly all: Spend;
  readonly scope?: Spend & { readonly scopeId: string };
  readonly fallbackNodes: number;
  /** The compactor's models today and the price each is counted at (issue 39: which model, and what it costs). */
  readonly models: readonly { readonly model: string; readonly price: string }[];
  readonly caps: Omit<BudgetSettings, "prices">;
  /** The setting whose cap is reached today, if any. */
  readonly capReached: string | null;
  /** Set when a cap is reached (or fallbacks were built today): what it means and what to change. */
  readonly notice: string | null;
}

export async function readTodaySpend(
  db: Queryable,
  budget: BudgetSettings,
  options: { scopeId?: string; now?: Date } = {},
): Promise<TodaySpend> {
  const now = options.now ?? new Date();
  const day = now.toISOString().slice(0, 10);
  const rows = await sumCallsToday(db, now);
  const all = spendOf(rows, budget.prices);
  const models = [...new Set(rows.map((r) => `${r.provider}:${r.model}`))].map((model) => ({
    model,
    price: priceText(budget.prices, model),
  }));
  const scope = options.scopeId
    ? { scopeId: options.scopeId, ...spendOf(await sumCallsToday(db, now, options.scopeId), budget.prices) }
    : undefined;
  const fallbackNodes = await countFallbackNodes(db, new Date(`${day}T00:00:00Z`), options.scopeId);
  const { prices: _prices, ...caps } = budget;
  const reached =
    (caps.dailyUsd > 0 && all.costUsd >= caps.dailyUsd && "OPTCHAT_BUDGET_DAILY_USD") ||
    (caps.dailyTokens > 0 && all.tokens >= caps.dailyTokens && "OPTCHAT_BUDGET_DAILY_TOKENS") ||
    (scope && caps.scopeDailyUsd > 0 && scope.costUsd >= caps.scopeDailyUsd && "OPTCHAT_BUDGET_SCOPE_DAILY_USD") ||
    (scope &&
      caps.scopeDailyTokens > 0 &&
      scope.tokens >= caps.scopeDailyTokens &&
      "OPTCHAT_BUDGET_SCOPE_DAILY_TOKENS") ||
    undefined;
  const notice = reached
    ? `The compactor's daily budget is spent (${reached}): until the next UTC day, new summaries are built without a model and read "${FALLBACK_LABEL}" (${fallbackNodes} so far today); zoom into them to read the originals, or raise ${reached}. They are not replaced by real summaries later (that waits for node revisions).`
    : fallbackNodes > 0
      ? `${fallbackNodes} node(s) were built today as labelled fallbacks ("${FALLBACK_LABEL}") while the budget was spent; zoom into them to read the originals.`
      : null;
  return { day, all, ...(scope ? { scope } : {}), fallbackNodes, models, caps, capReached: reached || null, notice };
}

/** One session's compactor spend today (UTC); `sessionId` null: a shared tree's calls that belong to no turn. */
export interface SessionSpend extends Spend {
  readonly sessionId: string | null;
}

/**
 * Today's (UTC) compactor spend per session, most first, at most `limit` sessions (of one scope or session, or all):
 * for status, memory_inspect and browse beside today's total against the cap (issue 39). Unpriced models are counted
 * as the caps count them (src/compactor/prices.ts UNPRICED_PRICE).
 */
export async function readSessionSpendToday(
  db: Queryable,
  prices: PriceTable,
  options: { scopeId?: string; sessionId?: string; limit?: number; now?: Date } = {},
): Promise<SessionSpend[]> {
  const rows = await sumCallsTodayBySession(
    db,
    options.now ?? new Date(),
    {
      ...(options.scopeId ? { scopeId: options.scopeId } : {}),
      ...(options.sessionId ? { sessionId: options.sessionId } : {}),
    },
    options.limit ?? 5,
  );
  const bySession = new Map<string | null, typeof rows>();
  for (const row of rows) bySession.set(row.sessionId, [...(bySession.get(row.sessionId) ?? []), row]);
  return [...bySession]
    .map(([sessionId, group]) => ({ sessionId, ...spendOf(group, prices) }))
    .sort((a, b) => b.costUsd - a.costUsd || b.tokens - a.tokens);
}

/** "$0.0123 (4 calls)" or, with unpriced tokens, "$0.0123 (4 calls; 1,200 unpriced tokens counted at $3 in / …)". */
export function spendText(spend: Spend): string {
  const unpriced =
    spend.unpricedTokens > 0
      ? `; ${spend.unpricedTokens} tokens of models with no price counted at ${UNPRICED_PRICE_TEXT}: set OPTCHAT_PRICES`
      : "";
  return `$${spend.costUsd.toFixed(4)} (${spend.calls} call(s), ${spend.tokens} tokens${unpriced})`;
}

/** Lines naming each session's spend today, most first: "session <id>: $0.0123 (4 call(s), …)". */
export function sessionSpendLines(sessions: readonly SessionSpend[]): string[] {
  return sessions.map(
    (s) => `${s.sessionId === null ? "shared trees (no turn)" : `session ${s.sessionId}`}: ${spendText(s)}`,
  );
}
export { UNPRICED_PRICE_TEXT };

/** "$1 in / $5 out per million tokens", or that a model with no price is counted at UNPRICED_PRICE. */
export function priceText(prices: PriceTable, key: string): string {
  const at = key.indexOf(":");
  const price = priceOf(prices, key.slice(0, at), key.slice(at + 1));
  return price
    ? `$${price.input} in / $${price.output} out per million tokens`
    : `no price: counted at ${UNPRICED_PRICE_TEXT} (set OPTCHAT_PRICES)`;
}
