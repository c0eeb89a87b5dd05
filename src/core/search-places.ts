/**
 * Distinct places from ranked search hits (issue 10 item 3). A summary and the records and other summaries under it
 * are one place: the near-duplicate ancestors of a session summary (`pub:208+2`, `+4`, `+8`, … opening with the same
 * sentence) filled LoCoMo's top 5 before. Pure; ranges come from src/store/search.ts.
 *
 * Walking the hits best first:
 * - a summary whose range overlaps a place already kept (it contains it, or lies inside it) adds nothing new: dropped;
 * - a record inside a kept summary that has no record yet becomes that place's entry, at the summary's position (the
 *   best-matching record inside, since hits come best first), the summary kept as its context;
 * - any other record is a new place: two records are two places, however close.
 */

/** Records [startSeq, endSeq) of one session generation. */
export interface Span {
  readonly sessionId: string;
  readonly generation: number;
  readonly startSeq: number;
  readonly endSeq: number;
}

export interface PlaceHit {
  readonly source: "record" | "session_node" | "shared_node";
  readonly spans: readonly Span[];
}

export interface Place<H extends PlaceHit> {
  /** The entry: a record when the place has one, else the summary. */
  readonly hit: H;
  /** The summary the record was found under, when the place began as a summary hit. */
  readonly within: H | null;
}

function overlaps(a: readonly Span[], b: readonly Span[]): boolean {
  for (const x of a)
    for (const y of b)
      if (
        x.sessionId === y.sessionId &&
        x.generation === y.generation &&
        x.startSeq < y.endSeq &&
        y.startSeq < x.endSeq
      )
        return true;
  return false;
}

/** The hits as distinct places, in rank order (see the module comment). */
export function distinctPlaces<H extends PlaceHit>(hits: readonly H[]): Place<H>[] {
  const places: { hit: H; within: H | null; summary: H | null; spans: Span[] }[] = [];
  for (const hit of hits) {
    if (hit.source === "record") {
      const host = places.find(
        (place) => place.summary !== null && place.within === null && overlaps(place.spans, hit.spans),
      );
      if (host) {
        host.within = host.summary;
        host.hit = hit;
        continue;
      }
      places.push({ hit, within: null, summary: null, spans: [...hit.spans] });
      continue;
    }
    if (hit.spans.length === 0) continue; // a summary whose range is unknown cannot be told apart: left out
    if (places.some((place) => overlaps(place.spans, hit.spans))) continue;
    places.push({ hit, within: null, summary: hit, spans: [...hit.spans] });
  }
  return places.map(({ hit, within }) => ({ hit, within }));
}
