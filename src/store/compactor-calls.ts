import type { Queryable } from "./db.js";

/** One model call of the compactor, as the ledger stores it (migrations/009_compactor_calls.sql). */
export interface CompactorCallRow {
  readonly at: Date;
  readonly provider: string;
  readonly model: string;
  readonly purpose: "leaf" | "merge" | "publication" | "retry";
  readonly inputTokens: number;
  readonly cacheReadTokens: number;
  readonly cacheWriteTokens: number;
  readonly outputTokens: number;
  readonly latencyMs: number;
  readonly outcome: string;
  /** Null for a session tree's call: the session's scope is looked up on insert. */
  readonly scopeId: string | null;
  readonly sessionId: string | null;
  readonly treeId: number | null;
  readonly level: number | null;
  readonly index: number | null;
  readonly jobId: string | null;
}

const int = (n: number) => Math.max(0, Math.round(n));

/** Whether the ledger's table exists (a database not migrated this far has none). */
export async function ledgerExists(db: Queryable): Promise<boolean> {
  const result = await db.query<{ found: boolean }>(
    "SELECT to_regclass('optchat.compactor_calls') IS NOT NULL AS found",
  );
  return result.rows[0]?.found ?? false;
}

/** Appends calls in one statement; a session tree's scope is its session's. */
export async function insertCompactorCalls(db: Queryable, rows: readonly CompactorCallRow[]): Promise<void> {
  if (rows.length === 0) return;
  await db.query(
    `INSERT INTO optchat.compactor_calls
       (at, provider, model, purpose, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, latency_ms,
        outcome, scope_id, session_id, tree_id, level, idx, job_id)
     SELECT c.at, c.provider, c.model, c.purpose, c.input, c.cache_read, c.cache_write, c.output, c.latency, c.outcome,
            coalesce(c.scope_id, (SELECT s.scope_id FROM optchat.sessions s WHERE s.session_id = c.session_id)),
            c.session_id, c.tree_id, c.level, c.idx, c.job_id
       FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::int[], $6::int[], $7::int[], $8::int[],
                   $9::int[], $10::text[], $11::text[], $12::text[], $13::bigint[], $14::int[], $15::bigint[], $16::uuid[])
            AS c(at, provider, model, purpose, input, cache_read, cache_write, output, latency, outcome, scope_id,
                 session_id, tree_id, level, idx, job_id)`,
    [
      rows.map((r) => r.at),
      rows.map((r) => r.provider),
      rows.map((r) => r.model),
      rows.map((r) => r.purpose),
      rows.map((r) => int(r.inputTokens)),
      rows.map((r) => int(r.cacheReadTokens)),
      rows.map((r) => int(r.cacheWriteTokens)),
      rows.map((r) => int(r.outputTokens)),
      rows.map((r) => int(r.latencyMs)),
      rows.map((r) => r.outcome),
      rows.map((r) => r.scopeId),
      rows.map((r) => r.sessionId),
      rows.map((r) => r.treeId),
      rows.map((r) => r.level),
      rows.map((r) => r.index),
      rows.map((r) => r.jobId),
    ],
  );
}

/** Token totals of a group of calls. */
export interface CallTotals {
  readonly calls: number;
  readonly failedCalls: number;
  readonly inputTokens: number;
  readonly cacheReadTokens: number;
  readonly cacheWriteTokens: number;
  readonly outputTokens: number;
}

export interface CallGroup extends CallTotals {
  /** UTC day, YYYY-MM-DD. */
  readonly day: string;
  readonly scopeId: string | null;
  readonly sessionId: string | null;
  readonly provider: string;
  readonly model: string;
}

export interface CallFilter {
  /** Calls at or after this instant. */
  readonly since: Date;
  readonly scopeId?: string;
  readonly sessionId?: string;
}

const TOTALS = `count(*)::int AS calls,
  count(*) FILTER (WHERE outcome NOT IN ('ok', 'over_limit', 'reference', 'line_count'))::int AS failed_calls,
  coalesce(sum(input_tokens), 0)::bigint AS input_tokens,
  coalesce(sum(cache_read_tokens), 0)::bigint AS cache_read_tokens,
  coalesce(sum(cache_write_tokens), 0)::bigint AS cache_write_tokens,
  coalesce(sum(output_tokens), 0)::bigint AS output_tokens`;

type TotalsRow = {
  calls: number;
  failed_calls: number;
  input_tokens: string;
  cache_read_tokens: string;
  cache_write_tokens: string;
  output_tokens: string;
};

function toTotals(row: TotalsRow): CallTotals {
  return {
    calls: row.calls,
    failedCalls: row.failed_calls,
    inputTokens: Number(row.input_tokens),
    cacheReadTokens: Number(row.cache_read_tokens),
    cacheWriteTokens: Number(row.cache_write_tokens),
    outputTokens: Number(row.output_tokens),
  };
}

/** Calls since a time, optionally of one scope or session, totalled per UTC day, scope, session and model. */
export async function sumCompactorCalls(db: Queryable, filter: CallFilter): Promise<CallGroup[]> {
  const result = await db.query<
    TotalsRow & { day: string; scope_id: string | null; session_id: string | null; provider: string; model: string }
  >(
    `SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, scope_id, session_id, provider, model, ${TOTALS}
       FROM optchat.compactor_calls
      WHERE at >= $1::timestamptz AND ($2::text IS NULL OR scope_id = $2) AND ($3::text IS NULL OR session_id = $3)
      GROUP BY 1, 2, 3, 4, 5
      ORDER BY 1, 2 NULLS FIRST, 3 NULLS FIRST, 4, 5`,
    [filter.since, filter.scopeId ?? null, filter.sessionId ?? null],
  );
  return result.rows.map((row) => ({
    day: row.day,
    scopeId: row.scope_id,
    sessionId: row.session_id,
    provider: row.provider,
    model: row.model,
    ...toTotals(row),
  }));
}

/** Today's (UTC) calls per model, of one scope or of all: what the budget cap and `optchat status` read. */
export async function sumCallsToday(
  db: Queryable,
  now: Date,
  scopeId?: string,
): Promise<(CallTotals & { provider: string; model: string })[]> {
  const result = await db.query<TotalsRow & { provider: string; model: string }>(
    `SELECT provider, model, ${TOTALS}
       FROM optchat.compactor_calls
      WHERE at >= date_trunc('day', $1::timestamptz AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        AND ($2::text IS NULL OR scope_id = $2)
      GROUP BY 1, 2 ORDER BY 1, 2`,
    [now, scopeId ?? null],
  );
  return result.rows.map((row) => ({ provider: row.provider, model: row.model, ...toTotals(row) }));
}

/**
 * Today's (UTC) calls per session and model, of one scope or session or of all, the sessions that spent most first
 * (by tokens), at most `limit` sessions. Calls of a scope's shared tree that belong to no turn have no session (null).
 */
export async function sumCallsTodayBySession(
  db: Queryable,
  now: Date,
  filter: { scopeId?: string; sessionId?: string },
  limit: number,
): Promise<(CallTotals & { sessionId: string | null; provider: string; model: string })[]> {
  const result = await db.query<TotalsRow & { session_id: string | null; provider: string; model: string }>(
    `WITH today AS (
       SELECT * FROM optchat.compactor_calls
        WHERE at >= date_trunc('day', $1::timestamptz AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
          AND ($2::text IS NULL OR scope_id = $2) AND ($3::text IS NULL OR session_id = $3)),
     top AS (
       SELECT session_id FROM today GROUP BY 1
        ORDER BY sum(input_tokens + output_tokens) DESC, session_id LIMIT $4::int)
     SELECT today.session_id, provider, model, ${TOTALS}
       FROM today JOIN top ON top.session_id IS NOT DISTINCT FROM today.session_id
      GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`,
    [now, filter.scopeId ?? null, filter.sessionId ?? null, limit],
  );
  return result.rows.map((row) => ({
    sessionId: row.session_id,
    provider: row.provider,
    model: row.model,
    ...toTotals(row),
  }));
}

/** The scope a tree's calls count against: its own (shared tree) or its session's. */
export async function scopeOfTree(db: Queryable, treeId: number): Promise<string | undefined> {
  const result = await db.query<{ scope_id: string | null }>(
    `SELECT coalesce(t.scope_id, s.scope_id) AS scope_id
       FROM optchat.trees t LEFT JOIN optchat.sessions s ON s.session_id = t.session_id
      WHERE t.tree_id = $1::bigint`,
    [treeId],
  );
  return result.rows[0]?.scope_id ?? undefined;
}

/**
 * Nodes built as labelled fallbacks since a time (not summarized by a model: the budget was spent) and not replaced
 * since by a rebuild (a superseded revision, migration 013).
 */
export async function countFallbackNodes(db: Queryable, since: Date, scopeId?: string): Promise<number> {
  const result = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n
       FROM optchat.nodes n
       JOIN optchat.trees t ON t.tree_id = n.tree_id
       LEFT JOIN optchat.sessions s ON s.session_id = t.session_id
      WHERE n.summarizer = 'fallback' AND NOT n.superseded AND n.built_at >= $1::timestamptz
        AND ($2::text IS NULL OR coalesce(t.scope_id, s.scope_id) = $2)`,
    [since, scopeId ?? null],
  );
  return result.rows[0]?.n ?? 0;
}
