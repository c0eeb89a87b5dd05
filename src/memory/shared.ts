import type { Pool } from "../store/db.js";
import { type ReadAs, readerOf, type ServedSnapshot, served } from "./reader.js";
import { type SearchAnswerHit, type SearchLimits, type SearchOptions, searchPlaces } from "./search.js";

// The service's search entry point (seed 000 §8); the ranking is in search.ts. Turns, retrieval and assembly have
// their own modules (turns.ts, retrieval.ts, assembly.ts).

export type { SearchAnswerHit, SearchOptions } from "./search.js";

export interface SearchAnswer {
  readonly hits: readonly SearchAnswerHit[];
  readonly nextCursor: string | null;
  readonly snapshot: ServedSnapshot;
}

/** BM25 search as distinct places: src/memory/search.ts. */
export async function searchFor(
  deps: { readonly pool: Pool },
  ctx: ReadAs,
  options: SearchOptions,
  limits: SearchLimits = {},
): Promise<SearchAnswer> {
  const reader = await readerOf(deps.pool, ctx);
  // A scope reader has no own session: no session ID is empty, so "" matches none (and boundary 0 shows no history).
  const searcher = {
    sessionId: reader.own?.sessionId ?? "",
    generation: reader.own?.generation ?? 0,
    snapshot: { ...reader.scope, ownBoundary: reader.own?.boundary ?? 0 },
  };
  return { ...(await searchPlaces(deps.pool, searcher, options, limits)), snapshot: served(reader) };
}

// src/cli/render.ts imports these from here; they live in reader.ts and retrieval.ts.
export type { ServedSnapshot } from "./reader.js";
export type { ZoomAnswer } from "./retrieval.js";
