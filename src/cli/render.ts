// Plain-text renderings of memory answers for a terminal, one function per answer kind. --json prints the answer
// itself; these are for people.

import type { Memory } from "../memory/service.js";
import type { SearchAnswer, ServedSnapshot, ZoomAnswer } from "../memory/shared.js";
import { lineAsText, type RenderedView } from "../memory/views.js";
import { describeLabel, type SessionLabel } from "./labels.js";

type SessionsAnswer = Awaited<ReturnType<Memory["sessions"]>>;

/** A retrieval answer's footer: the next page's cursor and the snapshot it was read at. */
function footer(nextCursor: string | null, snapshot: ServedSnapshot): string[] {
  const out: string[] = [];
  if (typeof nextCursor === "string") out.push(`more: --cursor ${nextCursor}`);
  out.push(`(scope ${snapshot.scopeId}, snapshot ${snapshot.publicationHighWater})`);
  return out;
}

/** Hits, each followed by the session it is in (ids, title, first prompt) when labels are given. */
export function renderSearch(
  answer: SearchAnswer,
  labels: ReadonlyMap<string, SessionLabel> = new Map(),
  emptyNote = "",
): string {
  const out = answer.hits.flatMap((hit) => {
    const line = `${hit.ref}  (${hit.source}${hit.occurredAt ? `, ${hit.occurredAt}` : ""})  ${hit.excerpt}`;
    const label = hit.sessionId ? labels.get(hit.sessionId) : undefined;
    return label ? [line, `    in ${label.sessionId}  ${describeLabel(label)}`] : [line];
  });
  if (out.length === 0) out.push(`no hits${emptyNote}`);
  return [...out, ...footer(answer.nextCursor, answer.snapshot)].join("\n");
}

/** Each session on two lines: its ids, title and first prompt, then its published turns. */
export function renderSessions(answer: SessionsAnswer, labels: ReadonlyMap<string, SessionLabel> = new Map()): string {
  const out = answer.sessions.flatMap((raw) => {
    const s = raw as { sessionId: string; title: string | null; publishedTurns: number; lastAt: string | null };
    const label = labels.get(s.sessionId);
    const named = label ? describeLabel(label) : s.title ? `"${s.title}"` : "";
    return [
      `${s.sessionId}${named ? `  ${named}` : ""}`,
      `    ${s.publishedTurns} published turn(s)${s.lastAt ? `, last ${s.lastAt}` : ""}`,
    ];
  });
  if (out.length === 0) out.push("no sessions with published turns");
  return [...out, ...footer(answer.nextCursor, answer.snapshot)].join("\n");
}

/** A scope-level zoom: the lines a range opens into, a publication's cover, or one message. */
export function renderZoom(answer: ZoomAnswer): string {
  const out: string[] = [];
  let nextCursor: string | null = null;
  switch (answer.kind) {
    case "lines":
      for (const line of answer.lines) out.push(lineAsText({ ref: line.ref, text: line.text }));
      break;
    case "publication":
      out.push(
        `${answer.ref}: turn ${answer.turnId} of session ${answer.sessionId} (${answer.outcome}), messages ${answer.range}, completed ${answer.completedAt}`,
      );
      for (const line of answer.cover) out.push(lineAsText(line));
      break;
    case "message":
      out.push(
        `${answer.ref}|${answer.recordKind} at ${answer.occurredAt}${answer.complete ? "" : ` (first part; --cursor ${answer.nextCursor} for more)`}:`,
      );
      out.push(answer.text);
      nextCursor = answer.nextCursor;
      break;
  }
  return [...out, ...footer(nextCursor, answer.snapshot)].join("\n");
}

/** The one-line summary under `optchat view`'s lines (stderr). */
export function describeView(view: RenderedView): string {
  const projection = view.projection
    ? `, projected to ${view.projection.budget} bytes${view.projection.fits ? "" : ` (does not fit: the smallest cover is ${view.projection.minimalBytes} bytes)`}`
    : "";
  return `revision ${view.revision}, ${view.leafCount} messages, ${view.lines.length} lines, ${view.bytes} bytes${view.unbuilt ? `, ${view.unbuilt} not summarized yet` : ""}${projection}`;
}

/** A session's message, read whole, as `optchat zoom <session> <start+1>` prints it. */
export function renderRecord(record: {
  ref: string;
  kind: string;
  toolName: string | null;
  occurredAt: Date;
  text: string;
}): string {
  return `${record.ref}|${record.kind}${record.toolName ? ` ${record.toolName}` : ""} at ${record.occurredAt.toISOString()}:\n${record.text}`;
}
