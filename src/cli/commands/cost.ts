import { OptchatError } from "../../core/errors.js";
import { pricesOf } from "../../memory/config.js";
import { type CostReport, type CostTotals, readCost } from "../../memory/cost.js";
import { resolveSession } from "../../memory/resolve-session.js";
import { type Command, parseCommand, withMemory } from "../command.js";

const usage = "optchat cost [--since DATE|Nd] [--scope SCOPE] [--session ID] [--json]";

export const costCommand: Command = {
  name: "cost",
  usage: [usage],
  summary: "what the compactor's model calls cost: tokens and dollars per day, scope and session (UTC days)",
  details:
    "--since is a date (2026-01-31), an ISO time, or Nd for the last N days (default 7d: today and the 6 days before). " +
    "--session takes an optchat session id or an OpenCode one. Costs use the built-in price table with OPTCHAT_PRICES " +
    'on top (docs/compactor.md "Cost ledger"); a model with no price shows its tokens and no cost.',
  async run(args, { config, output }) {
    const { values } = parseCommand(
      args,
      { since: { type: "string" }, scope: { type: "string" }, session: { type: "string" } },
      0,
      usage,
    );
    const since = sinceOf(values.since ?? "7d", new Date());
    const report = await withMemory(
      config,
      "optchat-cost",
      async (memory) => {
        const sessionId = values.session ? (await resolveSession(memory, values.session)).sessionId : undefined;
        return await readCost(memory.pool, pricesOf(config), {
          since,
          ...(values.scope ? { scopeId: values.scope } : {}),
          ...(sessionId ? { sessionId } : {}),
        });
      },
      { readOnly: true },
    );
    if (output.json) output.out(JSON.stringify({ ok: true, ...report }));
    else for (const line of renderCost(report, config.prices !== "")) output.out(line);
    return 0;
  },
};

/** `--since`: Nd (the start of the UTC day N-1 days ago), a date, or an ISO time. */
export function sinceOf(value: string, now: Date): Date {
  const days = /^(\d{1,4})d$/.exec(value);
  if (days) {
    const start = new Date(`${now.toISOString().slice(0, 10)}T00:00:00Z`);
    return new Date(start.getTime() - (Number(days[1]) - 1) * 86_400_000);
  }
  const at = /^\d{4}-\d{2}-\d{2}$/.test(value) ? new Date(`${value}T00:00:00Z`) : new Date(value);
  if (Number.isNaN(at.getTime())) {
    throw new OptchatError("INPUT_INVALID", `--since must be a date, an ISO time or Nd, not ${value}\nUsage: ${usage}`);
  }
  return at;
}

const count = new Intl.NumberFormat("en-US");

function usd(value: number | null): string {
  return value === null ? "unpriced" : `$${value.toFixed(4)}`;
}

function percent(part: number, whole: number): string {
  return whole > 0 ? `${Math.round((part / whole) * 100)}%` : "-";
}

function table(header: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const widths = header.map((h, k) => Math.max(h.length, ...rows.map((r) => (r[k] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, k) => (k >= header.length - 6 ? cell.padStart(widths[k] ?? 0) : cell.padEnd(widths[k] ?? 0)))
      .join("  ")
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

const totalsCells = (t: CostTotals) => [
  count.format(t.calls),
  count.format(t.inputTokens),
  percent(t.cacheReadTokens, t.inputTokens),
  count.format(t.cacheWriteTokens),
  count.format(t.outputTokens),
  t.unpricedTokens > 0 && t.costUsd === 0 ? "unpriced" : usd(t.costUsd),
];

/** The report as text: every line, then totals per day, scope and session, then the grand total. */
export function renderCost(report: CostReport, overridden: boolean): string[] {
  const out = [
    `compactor cost since ${report.since} (UTC days; prices: built-in table${overridden ? " + OPTCHAT_PRICES" : ""}, USD)`,
  ];
  if (report.lines.length === 0) {
    out.push("no compactor calls in this period");
    return out;
  }
  const numbers = ["calls", "input", "cached", "written", "output", "cost"];
  out.push(
    "",
    ...table(
      ["day", "scope", "session", "model", ...numbers],
      report.lines.map((l) => [
        l.day,
        l.scopeId ?? "-",
        l.sessionId ?? "-",
        `${l.provider}:${l.model}`,
        count.format(l.calls),
        count.format(l.inputTokens),
        percent(l.cacheReadTokens, l.inputTokens),
        count.format(l.cacheWriteTokens),
        count.format(l.outputTokens),
        usd(l.costUsd),
      ]),
    ),
    "",
    "per day",
    ...table(
      ["day", ...numbers],
      report.byDay.map((d) => [d.day, ...totalsCells(d)]),
    ),
    "",
    "per scope",
    ...table(
      ["scope", ...numbers],
      report.byScope.map((s) => [s.scopeId ?? "-", ...totalsCells(s)]),
    ),
    "",
    "per session",
    ...table(
      ["scope", "session", ...numbers],
      report.bySession.map((s) => [s.scopeId ?? "-", s.sessionId ?? "-", ...totalsCells(s)]),
    ),
    "",
    ...table(["total", ...numbers], [["", ...totalsCells(report.total)]]),
  );
  if (report.total.failedCalls > 0)
    out.push(`${count.format(report.total.failedCalls)} call(s) failed (counted above)`);
  if (report.total.unpricedTokens > 0)
    out.push(`${count.format(report.total.unpricedTokens)} token(s) of models with no price (set OPTCHAT_PRICES)`);
  if (report.fallbackNodes > 0)
    out.push(`${count.format(report.fallbackNodes)} node(s) built as labelled fallbacks while the budget was spent`);
  return out;
}
