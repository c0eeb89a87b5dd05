/** Pages of a tree: one level's lines, and a zoomed line with what it summarizes. */
import { html } from "hono/html";
import type { LevelPage, TreeOwner, ZoomPage } from "../../memory/browse.js";
import { PAGE_SIZE } from "../../memory/browse.js";
import { crumbsOf, documentOf, linesOf, pager, rangeOf, spanOf, tag, timeOf } from "../layout.js";
import type { Links } from "../links.js";

const whereOf = (owner: TreeOwner) =>
  owner.kind === "shared" ? { scopeId: owner.scopeId } : { sessionId: owner.sessionId };
const nameOf = (owner: TreeOwner) =>
  owner.kind === "shared" ? `shared tree of ${owner.scopeId}` : `session ${owner.sessionId}`;

export function levelPage(links: Links, page: LevelPage): Promise<string> {
  const { owner } = page;
  const rows = page.lines.map(
    (
      line,
    ) => html`<tr data-ref="${line.ref}"><td><a class="ref" href="${links.zoom(owner, line.node)}">${line.ref}</a></td>
<td>${rangeOf(owner, line)}</td><td>${spanOf(line.span)}</td><td>${line.bytes}</td>
<td>${line.summarizer}${line.attempts > 0 ? ` · ${line.attempts} call(s)` : ""}${line.overshoot ? " · over size" : ""}</td>
<td class="text">${line.text}</td></tr>`,
  );
  const previous = page.from > 0 ? links.level(owner, page.level, Math.max(0, page.from - PAGE_SIZE.nodes)) : undefined;
  return documentOf(
    `Level ${page.level} of the ${nameOf(owner)}`,
    crumbsOf(links, whereOf(owner)),
    html`<p>Each line summarizes ${2 ** page.level} ${owner.kind === "shared" ? "published turn(s)" : "message(s)"}; click
one to open it.</p>
${
  page.lines.length === 0
    ? html`<p class="note">No lines at this level yet.</p>`
    : html`<table><thead><tr><th>ref</th><th>range</th><th>time span</th><th>bytes</th><th>built by</th><th>summary</th></tr>
</thead><tbody>${rows}</tbody></table>`
}
${pager(previous, page.next !== null ? links.level(owner, page.level, page.next) : undefined)}`,
  );
}

export function zoomPage(links: Links, page: Exclude<ZoomPage, { kind: "message" }>): Promise<string> {
  if (page.kind === "publication") {
    const p = page.publication;
    const session = { kind: "session" as const, sessionId: p.sessionId };
    return documentOf(
      `${page.line.ref}: a published turn`,
      crumbsOf(links, { scopeId: page.scopeId }),
      html`<p>${tag(p.outcome)} turn <code>${p.turnId}</code> of <a href="${links.session(p.sessionId)}">${p.sessionId}</a>,
messages ${p.records}, completed ${timeOf(p.completedAt)}, published ${timeOf(p.publishedAt)}.</p>
<h2>The shared line</h2>
${linesOf(links, { kind: "shared", scopeId: page.scopeId }, [page.line])}
<h2>The turn's messages, as its session's lines</h2>
${linesOf(
  links,
  session,
  page.cover.map((c) => ({
    ref: c.ref,
    node: c.node,
    text: c.text,
    built: true,
    bytes: Buffer.byteLength(c.text),
    span: undefined,
  })),
)}`,
    );
  }
  const { owner } = page;
  return documentOf(
    `${page.line.ref} of the ${nameOf(owner)}`,
    crumbsOf(links, whereOf(owner)),
    html`${linesOf(links, owner, [page.line])}
<h2>What it summarizes</h2>
${linesOf(links, owner, page.children)}
<p class="meta"><a href="${links.level(owner, page.line.node.level)}">all of level ${page.line.node.level}</a></p>`,
  );
}
