/**
 * The page shell and the fragments every page uses. All markup is built with hono's html`` tagged templates, which
 * escape every interpolated string (& < > " '), so stored text — records, summaries, queries, errors — is shown as
 * text and never parsed as markup. No page carries a script, and the Content-Security-Policy forbids any.
 */
import { html, raw } from "hono/html";
import { countOf, endOf, startOf } from "../core/tree.js";
import type { BrowseLine, TreeOwner } from "../memory/browse.js";
import type { TimeSpan } from "../store/browse.js";
import type { Links } from "./links.js";

export type Html = ReturnType<typeof html>;

/** No scripts, no remote anything; inline styles only. Sent as a header by the server and as a meta tag in files. */
export const CONTENT_SECURITY_POLICY =
  "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

const STYLE = `
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 72rem; padding: 0 1rem 3rem; color: #1b1b1b; }
nav.crumbs { padding: .6rem 0; border-bottom: 1px solid #ddd; margin-bottom: 1rem; }
nav.crumbs a { text-decoration: none; }
h1 { font-size: 1.35rem; margin: .6rem 0; } h2 { font-size: 1.1rem; margin-top: 1.6rem; }
table { border-collapse: collapse; width: 100%; } th, td { text-align: left; vertical-align: top; padding: .25rem .5rem; border-bottom: 1px solid #eee; }
th { font-weight: 600; background: #fafafa; }
code, pre, .ref { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 13px; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f7f7f5; border: 1px solid #e5e5e0; padding: .5rem .7rem; margin: .3rem 0; }
ol.lines { list-style: none; padding: 0; } ol.lines li { padding: .3rem 0; border-bottom: 1px solid #f0f0f0; }
.meta { color: #666; font-size: 12px; } .text { white-space: pre-wrap; overflow-wrap: anywhere; }
.tag { display: inline-block; padding: 0 .4rem; border-radius: .6rem; font-size: 12px; background: #eee; }
.tag.completed, .tag.injected { background: #d9f2dd; } .tag.interrupted, .tag.skipped, .tag.not_ready { background: #fbeccb; }
.tag.failed, .tag.budget_exceeded { background: #f8d4d4; }
mark { background: #ffe28a; padding: 0 1px; }
.pager { margin: .8rem 0; } .pager a { margin-right: 1rem; }
.note { color: #555; font-style: italic; }
`;

/** A whole HTML document as a string. */
export async function documentOf(title: string, crumbs: Html, body: Html): Promise<string> {
  const page = await html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${CONTENT_SECURITY_POLICY}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · optchat memory</title>
<style>${raw(STYLE)}</style>
</head>
<body>
<nav class="crumbs">${crumbs}</nav>
<main>
<h1>${title}</h1>
${body}
</main>
</body>
</html>
`;
  return page.toString();
}

/** Breadcrumbs: the memory, then the scope and the session the page belongs to. */
export function crumbsOf(links: Links, where: { scopeId?: string; sessionId?: string } = {}): Html {
  return html`<a href="${links.home()}">optchat memory</a>${
    where.scopeId ? html` › <a href="${links.scope(where.scopeId)}">${where.scopeId}</a>` : ""
  }${where.sessionId ? html` › <a href="${links.session(where.sessionId)}">${where.sessionId}</a>` : ""}`;
}

export function timeOf(date: Date | null | undefined): Html | string {
  return date
    ? html`<time datetime="${date.toISOString()}">${date.toISOString().replace("T", " ").slice(0, 19)}</time>`
    : "—";
}

export function spanOf(span: TimeSpan | undefined): Html | string {
  if (!span) return "—";
  return span.first.getTime() === span.last.getTime()
    ? timeOf(span.first)
    : html`${timeOf(span.first)} – ${timeOf(span.last)}`;
}

/** Stored text exactly as stored: the newline after <pre> is the one HTML drops, so a leading newline survives. */
export function literal(text: string, attributes: { id?: string; className?: string } = {}): Html {
  return html`<pre class="${attributes.className ?? "payload"}"${attributes.id ? html` id="${attributes.id}"` : ""}>
${text}</pre>`;
}

export function tag(value: string): Html {
  return html`<span class="tag ${value}">${value}</span>`;
}

/** What a line covers: messages of a session, or publications (turns) of a scope. */
export function rangeOf(owner: TreeOwner, line: Pick<BrowseLine, "node">): string {
  const what = owner.kind === "shared" ? "turns" : "messages";
  return countOf(line.node) === 1
    ? `${what === "turns" ? "publication" : "message"} ${startOf(line.node)}`
    : `${what} ${startOf(line.node)}–${endOf(line.node) - 1}`;
}

/** Tree lines, each a link one level down (a session's single message opens the message). */
export function linesOf(links: Links, owner: TreeOwner, lines: readonly BrowseLine[], empty = "No lines yet."): Html {
  if (lines.length === 0) return html`<p class="note">${empty}</p>`;
  return html`<ol class="lines">${lines.map(
    (line) => html`<li data-ref="${line.ref}"><a class="ref" href="${links.zoom(owner, line.node)}">${line.ref}</a>
<span class="meta">${rangeOf(owner, line)} · ${spanOf(line.span)} · ${line.built ? `${line.bytes} bytes` : "not summarized yet"}</span>
<div class="text">${line.text}</div></li>`,
  )}</ol>`;
}

export function pager(previous: string | undefined, next: string | undefined): Html | string {
  if (!previous && !next) return "";
  return html`<div class="pager">${previous ? html`<a rel="prev" href="${previous}">← previous</a>` : ""}${
    next ? html`<a rel="next" href="${next}">next →</a>` : ""
  }</div>`;
}

/** A value as JSON, shown literally. */
export function json(value: unknown): Html {
  return literal(JSON.stringify(value, null, 2), { className: "json" });
}
