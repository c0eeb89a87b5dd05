/** Pages of one session: its memory as a model reads it, its messages, one message, and its recorded injections. */
import { html } from "hono/html";
import { omittedText } from "../../memory/assembly.js";
import type { MessagePage, RecordsPage, SessionPage, TreeOwner } from "../../memory/browse.js";
import { PAGE_SIZE } from "../../memory/browse.js";
import type { Injection } from "../../memory/host.js";
import type { Session } from "../../store/sessions.js";
import { crumbsOf, documentOf, type Html, json, linesOf, literal, pager, tag, timeOf } from "../layout.js";
import type { Links, MessagePart } from "../links.js";
import { levelsOf, workOf } from "./scopes.js";

function sessionLinks(links: Links, session: Session): Html {
  return html`<p><a href="${links.records(session.sessionId)}">messages</a> ·
<a href="${links.injections(session.sessionId)}">injections</a> · scope
<a href="${links.scope(session.scopeId)}">${session.scopeId}</a></p>`;
}

function previewOf(page: SessionPage): Html {
  if ("error" in page.preview) return html`<p class="note">Could not assemble the memory: ${page.preview.error}</p>`;
  const { context } = page.preview;
  return html`<p class="meta">The memory blocks the next request of this session would get, assembled as for a real turn
(snapshot: publication ${context.snapshot.publicationHighWater}, own view revision ${context.snapshot.ownViewRevision ?? "none"})
for a ${page.windowTokens}-token window (${page.windowSource}) with the plugin's default reservations: ${context.tokens.used} of
${context.tokens.available} tokens (shared ${context.tokens.shared}, session ${context.tokens.own}, previous exchange
${context.tokens.previous}). The plugin puts its fixed head and a status line around them.</p>
${context.omitted.length > 0 ? html`<p class="note">Not included: ${context.omitted.map(omittedText).join("; ")}</p>` : ""}
${
  context.blocks.length === 0
    ? html`<p class="note">No memory yet: the session's first request gets no blocks.</p>`
    : context.blocks.map((block) => literal(block.text, { id: `block-${block.name}`, className: "block" }))
}`;
}

function healthOf(page: SessionPage): Html {
  const failures = page.nodeFailures.map(
    (f) =>
      html`<tr><td class="ref">${f.ref}</td><td>${f.failures}</td><td>${timeOf(f.lastFailedAt)}</td><td class="text">${f.lastError}</td></tr>`,
  );
  const publications = page.publicationFailures.map(
    (f) =>
      html`<tr><td><code>${f.turnId}</code></td><td>${f.failures}</td><td>${timeOf(f.lastFailedAt)}</td><td class="text">${f.lastError}</td></tr>`,
  );
  const problems = page.problems.map(
    (p) =>
      html`<tr><td>${timeOf(p.createdAt)}</td><td>${p.operation}</td><td>${p.code ?? "—"}</td><td class="text">${p.message}</td></tr>`,
  );
  const table = (head: Html, rows: Html[], none: string) =>
    rows.length === 0
      ? html`<p class="note">${none}</p>`
      : html`<table><thead>${head}</thead><tbody>${rows}</tbody></table>`;
  return html`<p><strong id="verdict">${String(page.health.verdict)}</strong></p>
${json(page.health)}
<h3>Failing summaries</h3>
${table(html`<tr><th>node</th><th>failures</th><th>last</th><th>error</th></tr>`, failures, "None.")}
<h3>Failing publications</h3>
${table(html`<tr><th>turn</th><th>failures</th><th>last</th><th>error</th></tr>`, publications, "None.")}
<h3>Problems the plugin caught</h3>
${table(html`<tr><th>at</th><th>operation</th><th>code</th><th>message</th></tr>`, problems, "None recorded.")}
<h3>Work and cost</h3>
${
  page.spend
    ? html`<p id="spend">Compactor spend today (UTC): this session ${page.spend.session}; every session ${page.spend.all}.
<code>optchat cost</code> has the ledger by day, scope, session and model.</p>`
    : ""
}
${workOf(page.view)}`;
}

export function sessionPage(links: Links, page: SessionPage): Promise<string> {
  const { session, view } = page;
  const owner: TreeOwner = { kind: "session", sessionId: session.sessionId };
  return documentOf(
    session.title ? `Session ${session.sessionId}: ${session.title}` : `Session ${session.sessionId}`,
    crumbsOf(links, { scopeId: session.scopeId }),
    html`<p>${session.host} session <code>${session.hostSessionId}</code>, generation ${session.currentGeneration},
created ${timeOf(session.createdAt)}${
      session.parentSessionId
        ? html`, subagent of <a href="${links.session(session.parentSessionId)}">${session.parentSessionId}</a>`
        : ""
    }.</p>
${sessionLinks(links, session)}
<h2>As a model reads it</h2>
${previewOf(page)}
<h2>The view, line by line</h2>
<p class="meta">Revision ${view.revision} over ${view.leafCount} message(s): ${view.lines.length} line(s), ${view.bytes}
bytes${view.unbuilt > 0 ? `, ${view.unbuilt} not summarized yet` : ""}. Click a line to zoom down to the messages.</p>
${linesOf(links, owner, view.lines, "No messages yet.")}
<h2>Levels</h2>
${levelsOf(links, owner, view)}
<h2>Compactor health</h2>
${healthOf(page)}`,
  );
}

function recordHead(links: Links, record: RecordsPage["records"][number]["record"]): Html {
  return html`<a class="ref" href="${links.message(record.sessionId, record.seq)}">${record.seq}+1</a>
<span class="meta">${record.kind}${record.toolName ? ` ${record.toolName}` : ""} · turn ${record.turnId} ·
${timeOf(record.occurredAt)} · ${record.payloadBytes} bytes${record.validUtf8 ? "" : " · not valid UTF-8 (shown with U+FFFD)"}${
    record.hostTruncated ? ` · cut by the host (originally ${record.hostOriginalBytes ?? "?"} bytes)` : ""
  }</span>`;
}

export function recordsPage(links: Links, page: RecordsPage): Promise<string> {
  const { session } = page;
  const items = page.records.map(
    ({ record, page: payload }) => html`<li id="m${record.seq}">${recordHead(links, record)}
${literal(payload.text, { id: `payload-${record.seq}` })}${
  payload.complete
    ? ""
    : html`<p class="meta">… ${payload.totalBytes - payload.bytes.length} more bytes:
<a href="${links.message(session.sessionId, record.seq)}">the whole message</a></p>`
}</li>`,
  );
  const previous =
    page.from > 0 ? links.records(session.sessionId, Math.max(0, page.from - PAGE_SIZE.records)) : undefined;
  const next = page.next !== null ? links.records(session.sessionId, page.next) : undefined;
  return documentOf(
    `Messages of ${session.sessionId}`,
    crumbsOf(links, { scopeId: session.scopeId, sessionId: session.sessionId }),
    html`<p>Every stored message, tool call and result, verbatim, in order (from ${page.from}).</p>
${pager(previous, next)}
${items.length === 0 ? html`<p class="note">No messages here.</p>` : html`<ol class="lines records">${items}</ol>`}
${pager(previous, next)}`,
  );
}

/** One message; `part` numbers the pages of a payload longer than one page (the export's file names use it). */
export function messagePage(links: Links, page: MessagePage, part = 0): Promise<string> {
  const { session, record, page: payload } = page;
  const nextPart: MessagePart | undefined = payload.nextCursor
    ? { cursor: payload.nextCursor, index: part + 1 }
    : undefined;
  return documentOf(
    `Message ${record.seq} of ${session.sessionId}`,
    crumbsOf(links, { scopeId: session.scopeId, sessionId: session.sessionId }),
    html`<p>${recordHead(links, record)}</p>
<p class="meta">Event key <code>${record.eventKey}</code>${record.toolCallId ? html` · tool call <code>${record.toolCallId}</code>` : ""} ·
sealed ${timeOf(record.sealedAt)} ·
<a href="${links.records(session.sessionId, record.seq - (record.seq % PAGE_SIZE.records))}#m${record.seq}">in the list</a></p>
${payload.offset > 0 ? html`<p class="meta">Bytes from ${payload.offset} of ${payload.totalBytes}.</p>` : ""}
${literal(payload.text, { id: "payload" })}
${nextPart ? html`<p><a rel="next" href="${links.message(session.sessionId, record.seq, nextPart)}">the next part →</a></p>` : ""}
<h2>Attributes</h2>
${json(record.attributes)}`,
  );
}

export function injectionsPage(links: Links, session: Session, injections: readonly Injection[]): Promise<string> {
  const rows = injections.map(
    (i) => html`<tr><td>${timeOf(i.createdAt)}</td><td>${tag(i.status)}</td><td><code>${i.turnId ?? "—"}</code></td>
<td>${i.mode}</td><td class="text">${i.query ?? "—"}</td><td class="text">${i.error ?? "—"}</td><td>${json(i.detail)}</td></tr>`,
  );
  return documentOf(
    `Injections of ${session.sessionId}`,
    crumbsOf(links, { scopeId: session.scopeId, sessionId: session.sessionId }),
    html`<p>What optchat put into each recorded model request of this session (the newest
${injections.length} kept), newest first: status, the turn, the sizes and blocks, the snapshot, and any error.</p>
${
  rows.length === 0
    ? html`<p class="note">No injections recorded (the plugin records one per model request).</p>`
    : html`<table><thead><tr><th>at</th><th>status</th><th>turn</th><th>mode</th><th>query</th><th>error</th><th>detail</th></tr>
</thead><tbody>${rows}</tbody></table>`
}`,
  );
}
