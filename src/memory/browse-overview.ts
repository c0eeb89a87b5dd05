/**
 * The browser's pages a person needs first (issue 40 item 3): where each project is on disk, the sessions by title and
 * first prompt, the health verdict as `optchat status` gives it, the compactor's spend today against the cap, a search
 * across every project, and the window a session's model really has. Read-only, like the rest of the browser.
 */
import type { BudgetSettings } from "../compactor/budget.js";
import { highlightSegments, type Segment } from "../core/highlight.js";
import { queryGroups } from "../core/tokenize.js";
import type { Pool } from "../store/db.js";
import { listInjections } from "../store/injections.js";
import { type SessionLabel, sessionLabels } from "../store/sessions.js";
import { readSessionSpendToday, readTodaySpend, type SessionSpend, spendText, type TodaySpend } from "./cost.js";
import { compactorLines, verdictLines } from "./health-text.js";
import { listScopes } from "./scopes.js";
import type { Memory } from "./service.js";
import type { SearchAnswer } from "./shared.js";
import { readStatusReport } from "./status.js";

/** What the host knows that memory does not: the browse command fills these from OpenCode's storage and git. */
export interface BrowseExtras {
  /** The database the health page reads `optchat status`'s report from. */
  readonly databaseUrl?: string;
  /** Each project scope's directory on disk and git remote. */
  readonly locations?: () => Promise<ReadonlyMap<string, { directory: string; gitRemote: string | null }>>;
  /** Titles by the host's session id (OpenCode titles a session after the plugin recorded it). */
  readonly titles?: () => Promise<ReadonlyMap<string, string>>;
}

export interface HealthPage {
  /** `optchat status`'s lines, verdict first. */
  readonly lines: readonly string[];
  readonly state: string;
}

export interface CostPage {
  readonly today: TodaySpend;
  readonly sessions: readonly (SessionSpend & { readonly label: SessionLabel | undefined })[];
  readonly capText: string;
}

export interface SearchAllPage {
  readonly query: string;
  readonly scopes: readonly {
    readonly scopeId: string;
    readonly hits: readonly (SearchAnswer["hits"][number] & {
      readonly segments: readonly Segment[];
      readonly label: SessionLabel | undefined;
    })[];
  }[];
}

/** Session labels with the host's titles filled in where memory has none. */
export async function labelsWithTitles(
  pool: Pool,
  sessionIds: readonly string[],
  extras: BrowseExtras,
): Promise<Map<string, SessionLabel>> {
  const labels = await sessionLabels(pool, [...new Set(sessionIds)]);
  const untitled = [...labels.values()].filter((label) => label.title === null);
  if (untitled.length > 0 && extras.titles) {
    const titles = await extras.titles().catch(() => new Map<string, string>());
    for (const label of untitled) {
      const title = titles.get(label.hostSessionId);
      if (title) labels.set(label.sessionId, { ...label, title });
    }
  }
  return labels;
}

export async function healthPage(databaseUrl: string, budget?: BudgetSettings): Promise<HealthPage> {
  const report = await readStatusReport(databaseUrl, budget);
  const lines = [...verdictLines(report.verdict)];
  if (report.setUp) lines.push(...compactorLines(report.compactor));
  const status = report.status;
  if (status) {
    const jobs = Object.entries(status.jobs)
      .map(([state, n]) => `${state} ${n}`)
      .join(", ");
    lines.push(
      `backlog    ${status.pendingLeaves} message(s) not summarized yet; jobs: ${jobs || "none"}`,
      `failing    ${status.failingNodes} summary job(s), ${status.failingPublications} publication job(s) (each session's page lists its own with their errors)`,
    );
  }
  return { lines, state: report.verdict.state };
}

export async function costPage(pool: Pool, budget: BudgetSettings, extras: BrowseExtras): Promise<CostPage> {
  const [today, sessions] = await Promise.all([
    readTodaySpend(pool, budget),
    readSessionSpendToday(pool, budget.prices, { limit: 50 }),
  ]);
  const labels = await labelsWithTitles(
    pool,
    sessions.flatMap((s) => (s.sessionId ? [s.sessionId] : [])),
    extras,
  );
  const capText =
    budget.dailyUsd > 0
      ? `${spendText(today.all)} of $${budget.dailyUsd} a day (OPTCHAT_BUDGET_DAILY_USD)`
      : `${spendText(today.all)} (no money cap)`;
  return {
    today,
    capText,
    sessions: sessions.map((s) => ({ ...s, label: s.sessionId ? labels.get(s.sessionId) : undefined })),
  };
}

/** Search in every scope but isolated ones, as a new turn of each would; scopes without hits are left out. */
export async function searchAll(memory: Memory, query: string, extras: BrowseExtras): Promise<SearchAllPage> {
  const terms = queryGroups(query).flat();
  const found = [];
  for (const scope of await listScopes(memory)) {
    const answer = await memory.search(await memory.readScope(scope.scopeId), { query, limit: 10 });
    if (answer.hits.length > 0) found.push({ scopeId: scope.scopeId, hits: answer.hits });
  }
  const labels = await labelsWithTitles(
    memory.pool,
    found.flatMap((s) => s.hits.flatMap((hit) => (hit.sessionId ? [hit.sessionId] : []))),
    extras,
  );
  return {
    query,
    scopes: found.map((s) => ({
      scopeId: s.scopeId,
      hits: s.hits.map((hit) => ({
        ...hit,
        segments: highlightSegments(hit.excerpt, terms),
        label: hit.sessionId ? labels.get(hit.sessionId) : undefined,
      })),
    })),
  };
}

/**
 * The window the session's model really has, from its newest recorded request (the plugin records the budget it
 * assembled for, with the model's `limit.context`), or undefined when no request was recorded.
 */
export async function sessionWindow(
  pool: Pool,
  sessionId: string,
): Promise<{ windowTokens: number; model: string | null } | undefined> {
  for (const injection of await listInjections(pool, sessionId, 20)) {
    const detail = injection.detail as { budget?: { windowTokens?: unknown }; model?: unknown } | null;
    const windowTokens = detail?.budget?.windowTokens;
    if (typeof windowTokens === "number" && windowTokens > 0) {
      const model = detail?.model as { providerID?: string; modelID?: string } | string | undefined;
      return {
        windowTokens,
        model: typeof model === "string" ? model : model?.providerID ? `${model.providerID}/${model.modelID}` : null,
      };
    }
  }
  return undefined;
}
