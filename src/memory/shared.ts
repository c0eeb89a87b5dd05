import { excerptAround } from "../core/context.js";
import { InputInvalidError } from "../core/errors.js";
import { sessionRef, sharedRef } from "../core/refs.js";
import { queryGroups, toTsqueryLiteral } from "../core/tokenize.js";
import { refOf } from "../core/tree.js";
import type { Pool } from "../store/db.js";
import { type SearchHit, searchVisible } from "../store/search.js";
import { type ReadAs, readerOf, type ServedSnapshot, served } from "./reader.js";

// The service's search. Turns, retrieval and assembly have their own modules (turns.ts, retrieval.ts, assembly.ts);
// search stays here until the ranking work moves it to search.ts.

// ---------------------------------------------------------------------------------------------------------------
// Search (seed 000 §8)

export interface SearchOptions {
  readonly query: string;
  readonly sessionId?: string;
  readonly before?: string;
  readonly after?: string;
  readonly cursor?: string;
  readonly limit?: number;
  /** all (default): every word must occur; any: any word, ranked by how well it matches. */
  readonly match?: "all" | "any";
}

export interface SearchAnswer {
  readonly hits: readonly {
    readonly ref: string;
    readonly source: "message" | "summary" | "shared summary";
    readonly sessionId: string | null;
    readonly kind: string | null;
    readonly occurredAt: string | null;
    readonly excerpt: string;
  }[];
  readonly nextCursor: string | null;
  readonly snapshot: ServedSnapshot;
}

export async function searchFor(
  deps: { readonly pool: Pool },
  ctx: ReadAs,
  options: SearchOptions,
): Promise<SearchAnswer> {
  const reader = await readerOf(deps.pool, ctx);
  // A scope reader has no own session: no session ID is empty, so "" matches none (and boundary 0 shows no history).
  const turn = {
    sessionId: reader.own?.sessionId ?? "",
    generation: reader.own?.generation ?? 0,
    snapshot: { ...reader.scope, ownBoundary: reader.own?.boundary ?? 0 },
  };
  const tsquery = toTsqueryLiteral(options.query, options.match ?? "all");
  if (!tsquery) throw new InputInvalidError("search", [{ field: "query", problem: "has no searchable words" }]);
  const date = (value: string | undefined, field: string) => {
    if (value === undefined) return undefined;
    const parsed = new Date(value);
    if (Number.isNaN(parsed.getTime()))
      throw new InputInvalidError("search", [{ field, problem: "must be an ISO 8601 date or time" }]);
    return parsed;
  };
  const limit = Math.min(50, Math.max(1, options.limit ?? 10));
  let offset = 0;
  if (options.cursor) {
    const match = /^s1\.(\d{1,9})$/.exec(options.cursor);
    if (!match)
      throw new InputInvalidError("search", [{ field: "cursor", problem: "is not a cursor from a previous answer" }]);
    offset = Number(match[1]);
  }
  const filters = {
    ...(options.sessionId ? { sessionId: options.sessionId } : {}),
    ...(options.before ? { before: date(options.before, "before") as Date } : {}),
    ...(options.after ? { after: date(options.after, "after") as Date } : {}),
  };
  const hits = await searchVisible(
    deps.pool,
    {
      scopeId: turn.snapshot.scopeId,
      publicationHighWater: turn.snapshot.publicationHighWater,
      sharedTreeId: turn.snapshot.sharedTreeId,
      ownSessionId: turn.sessionId,
      ownGeneration: turn.generation,
      ownBoundary: turn.snapshot.ownBoundary,
    },
    tsquery,
    filters,
    offset,
    limit + 1,
  );
  const terms = queryGroups(options.query).flat();
  const name = (hit: SearchHit) => {
    const node = { level: hit.level, index: hit.index };
    if (hit.source === "shared_node") return sharedRef(node);
    return hit.sessionId === turn.sessionId
      ? refOf(node)
      : sessionRef(hit.sessionId as string, hit.generation ?? 0, node);
  };
  return {
    hits: hits.slice(0, limit).map((hit) => ({
      ref: name(hit),
      source: hit.source === "record" ? "message" : hit.source === "session_node" ? "summary" : "shared summary",
      sessionId: hit.sessionId,
      kind: hit.kind,
      occurredAt: hit.occurredAt?.toISOString() ?? null,
      excerpt: excerptAround(hit.text, terms),
    })),
    nextCursor: hits.length > limit ? `s1.${offset + limit}` : null,
    snapshot: served(reader),
  };
}

// src/cli/render.ts imports these from here (it is outside this change); they live in reader.ts and retrieval.ts.
export type { ServedSnapshot } from "./reader.js";
export type { ZoomAnswer } from "./retrieval.js";
