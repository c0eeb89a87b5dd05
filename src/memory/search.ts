/**
 * `search` (seed 000 §8, issue 10): BM25 over the turn's snapshot, as distinct places. The query is a bag of weighted
 * words by default (src/core/search-query.ts); `match: "all"` keeps only texts holding every word. Statistics are the
 * scope's (src/store/search.ts readSearchStatistics), so another scope never changes a score.
 */
import { excerptAround } from "../core/context.js";
import { InputInvalidError } from "../core/errors.js";
import { sessionRef, sharedRef } from "../core/refs.js";
import { distinctPlaces, type Place } from "../core/search-places.js";
import {
  BM25_B,
  BM25_K1,
  candidateTsquery,
  PREFIX_EXPANSION_TERMS,
  planRanking,
  preferredCandidates,
  queryUnits,
} from "../core/search-query.js";
import { termsTsquery, toTsqueryLiteral } from "../core/tokenize.js";
import { refOf } from "../core/tree.js";
import type { Queryable } from "../store/db.js";
import { readRecordHeads, readSearchStatistics, type SearchHit, searchRanked } from "../store/search.js";

/** Who searches: a turn's session and snapshot, or a scope reader's (no own session: sessionId "" matches none). */
export interface Searcher {
  readonly sessionId: string;
  readonly generation: number;
  readonly snapshot: {
    readonly scopeId: string;
    readonly publicationHighWater: number;
    readonly sharedTreeId: number | null;
    readonly ownBoundary: number;
    readonly revisionEpoch: number;
  };
}

export interface SearchOptions {
  readonly query: string;
  readonly sessionId?: string;
  readonly before?: string;
  readonly after?: string;
  readonly cursor?: string;
  readonly limit?: number;
  /** any (default): any word counts, rarer words more; all: every word must occur in the text. */
  readonly match?: "all" | "any";
}

export interface SearchAnswerHit {
  readonly ref: string;
  readonly source: "message" | "summary" | "shared summary";
  readonly sessionId: string | null;
  readonly kind: string | null;
  readonly occurredAt: string | null;
  readonly excerpt: string;
  /** The summary this message was found under (it matched too, and covers the message), when there is one. */
  readonly within: string | null;
}

/** Hits fetched per place wanted: merging a summary with what it covers consumes hits. */
const HITS_PER_PLACE = 4;
/** Most rows one page reads, whatever its offset. */
const MAX_FETCH = 400;
/**
 * Most candidate records scored. Reading and scoring one costs 5-35 µs (its search vector is read from TOAST when
 * long; more under load): at 1M records over 100 scopes, common-word queries (1,000-2,500 candidates) took p99
 * 21.6 ms scoring every candidate and 14.4 ms under this cap, with the same first hit in 90% of them and 94.5% of
 * the first page (`npm run bench -- search-scale`, case `search-scale-candidates`, load average 4.5). When the
 * candidates may be more, the records that score best are read first (src/core/search-query.ts preferredCandidates).
 */
export const CANDIDATE_CAP = 500;

/**
 * Most candidate summaries of each kind scored, in index order (summaries are not in the synthetic 1M load; LoCoMo's
 * scopes have a few hundred each, so this rarely binds).
 */
const NODE_CANDIDATE_CAP = 2_000;

/** Limits a test or benchmark may change: the defaults are the product's. */
export interface SearchLimits {
  readonly candidateCap?: number;
}
/**
 * Most of the caller's own records after its last publication tested one by one against the query with its prefixes
 * (they are not in the statistics yet, so the prefix expansion may miss their word forms): the turns still being
 * published are a few; a session that never publishes (isolated) has its older records found by exact terms and the
 * expansion only.
 */
const OWN_TAIL_RECORDS = 1_000;

function parseDate(value: string | undefined, field: string): Date | undefined {
  if (value === undefined) return undefined;
  const parsed = new Date(value);
  if (Number.isNaN(parsed.getTime()))
    throw new InputInvalidError("search", [{ field, problem: "must be an ISO 8601 date or time" }]);
  return parsed;
}

function parseCursor(cursor: string | undefined): number {
  if (!cursor) return 0;
  const match = /^s2\.(\d{1,9})$/.exec(cursor);
  if (!match)
    throw new InputInvalidError("search", [{ field: "cursor", problem: "is not a cursor from a previous answer" }]);
  return Number(match[1]);
}

/** The page of distinct places for `options` in the turn's snapshot, and the cursor of the next page. */
export async function searchPlaces(
  db: Queryable,
  turn: Searcher,
  options: SearchOptions,
  limits: SearchLimits = {},
): Promise<{ hits: SearchAnswerHit[]; nextCursor: string | null }> {
  const candidateCap = limits.candidateCap ?? CANDIDATE_CAP;
  const units = queryUnits(options.query);
  const required = options.match === "all" ? toTsqueryLiteral(options.query, "all") : undefined;
  if (units.length === 0)
    throw new InputInvalidError("search", [{ field: "query", problem: "has no searchable words" }]);
  const before = parseDate(options.before, "before");
  const after = parseDate(options.after, "after");
  const limit = Math.min(50, Math.max(1, options.limit ?? 10));
  const offset = parseCursor(options.cursor);

  const ranking = await rankingPlan(db, turn.snapshot.scopeId, units, required, candidateCap);
  const hits = await searchRanked(
    db,
    {
      scopeId: turn.snapshot.scopeId,
      publicationHighWater: turn.snapshot.publicationHighWater,
      sharedTreeId: turn.snapshot.sharedTreeId,
      ownSessionId: turn.sessionId,
      ownGeneration: turn.generation,
      ownBoundary: turn.snapshot.ownBoundary,
      revisionEpoch: turn.snapshot.revisionEpoch,
    },
    ranking,
    {
      ...(options.sessionId ? { sessionId: options.sessionId } : {}),
      ...(before ? { before } : {}),
      ...(after ? { after } : {}),
    },
    Math.min(MAX_FETCH, (offset + limit + 1) * HITS_PER_PLACE),
  );
  const places = distinctPlaces(hits);
  const page = places.slice(offset, offset + limit);
  return {
    hits: await answerHits(
      db,
      turn,
      page,
      units.flatMap((unit) => unit.terms),
    ),
    nextCursor: places.length > offset + limit ? `s2.${offset + limit}` : null,
  };
}

/**
 * How the query's units are weighed in the scope (their document frequencies, the prefixes' expansions): the ranking
 * the search runs with (its units' weights, the tsqueries that match, that generate candidates, and that are preferred
 * when the candidates are capped; BM25's constants and caps).
 */
async function rankingPlan(
  db: Queryable,
  scopeId: string,
  units: ReturnType<typeof queryUnits>,
  required: string | undefined,
  candidateCap: number,
) {
  const statistics = await readSearchStatistics(
    db,
    scopeId,
    units.filter((unit) => !unit.prefix).flatMap((unit) => unit.terms),
    units.filter((unit) => unit.prefix).map((unit) => unit.terms[0] as string),
    PREFIX_EXPANSION_TERMS,
  );
  const ranked = planRanking(units, (term) => statistics.documentFrequency.get(term) ?? 0, statistics.records);
  const generating = ranked.filter((unit) => unit.generates);
  const matches = generating.map((unit) => termsTsquery(unit.terms, unit.prefix)).join(" | ");
  const expansionOf = (stem: string) => statistics.expansions.get(stem);
  const candidates = generating.map((unit) => candidateTsquery(unit, expansionOf(unit.terms[0] as string))).join(" | ");
  const preferred = required ?? preferredCandidates(ranked, expansionOf, candidateCap) ?? candidates;
  return {
    matches: required ?? matches,
    candidates: required ?? candidates,
    preferred,
    ownTail: OWN_TAIL_RECORDS,
    units: ranked.map((unit) => ({ tsquery: termsTsquery(unit.terms, unit.prefix), weight: unit.weight })),
    recordAverageLength: statistics.records.averageLength,
    nodeAverageLength: statistics.nodes.averageLength,
    k1: BM25_K1,
    b: BM25_B,
    candidateCap,
    nodeCandidateCap: NODE_CANDIDATE_CAP,
  };
}

/** A page of places as the answer names them (refs the searcher can zoom to), each with its excerpt. */
async function answerHits(
  db: Queryable,
  turn: Searcher,
  page: readonly Place<SearchHit>[],
  terms: readonly string[],
): Promise<SearchAnswerHit[]> {
  const name = (hit: SearchHit) => {
    const node = { level: hit.level, index: hit.index };
    if (hit.source === "shared_node") return sharedRef(node);
    return hit.sessionId === turn.sessionId
      ? refOf(node)
      : sessionRef(hit.sessionId as string, hit.generation ?? 0, node);
  };
  const heads = await readRecordHeads(
    db,
    page.flatMap(({ hit }) => (hit.payloadHash ? [hit.payloadHash] : [])),
  );
  return page.map(({ hit, within }) => ({
    ref: name(hit),
    source: hit.source === "record" ? "message" : hit.source === "session_node" ? "summary" : "shared summary",
    sessionId: hit.sessionId,
    kind: hit.kind,
    occurredAt: hit.occurredAt?.toISOString() ?? null,
    excerpt: excerptAround(hit.text ?? heads.get(hit.payloadHash?.toString("hex") ?? "") ?? "", terms),
    within: within ? name(within) : null,
  }));
}
