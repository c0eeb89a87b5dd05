/** Pages of the memory as a whole and of one scope: scopes, a scope's sessions, its shared tree, publications, search. */
import { html } from "hono/html";
import { parseMemoryRef } from "../../core/refs.js";
import type {
  PublicationsPage,
  ScopePage,
  ScopeRow,
  SearchPage,
  SharedPage,
  TreeOwner,
  TreeView,
} from "../../memory/browse.js";
import type { SessionLabel } from "../../store/sessions.js";
import { crumbsOf, documentOf, type Html, linesOf, literal, pager, tag, timeOf } from "../layout.js";
import type { Links } from "../links.js";

/** The live server's pages beside the scopes: health, cost, search everywhere (none in the static export). */
function overviewLinks(links: Links): Html | string {
  const health = links.overview("health");
  const cost = links.overview("cost");
  const search = links.overview("search");
  if (!health || !cost || !search) return "";
  return html`<p><a href="${health}">Health</a> (is it working?) · <a href="${cost}">Cost</a> (the compactor today)</p>
<form class="search" method="get" action="${search}">
<input type="search" name="q" placeholder="search every project" aria-label="search every project">
<button type="submit">Search</button></form>`;
}

export function homePage(links: Links, scopes: readonly ScopeRow[]): Promise<string> {
  const rows = scopes.map(
    (s) => html`<tr>
<td>${
      s.location
        ? html`<a href="${links.scope(s.scopeId)}">${s.location.directory}</a>${s.location.gitRemote ? html`<div class="meta">${s.location.gitRemote}</div>` : ""}<div class="meta">${s.scopeId}</div>`
        : html`<a href="${links.scope(s.scopeId)}">${s.scopeId}</a>`
    }</td><td>${s.kind}</td>
<td>${s.sessions}${
      Object.keys(s.hosts).length > 0
        ? html` <span class="meta">(${Object.entries(s.hosts)
            .map(([host, n]) => `${host} ${n}`)
            .join(", ")})</span>`
        : ""
    }</td><td>${s.publications}</td><td>${timeOf(s.lastTurnAt)}</td></tr>`,
  );
  return documentOf(
    "Projects",
    crumbsOf(links),
    html`<p>Every project whose sessions share memory here, by its directory and git remote where OpenCode's storage
knows them (a profile shares several projects; an isolated session has its own scope). Read-only.</p>
${overviewLinks(links)}
${
  scopes.length === 0
    ? html`<p class="note">No scopes yet: nothing has been stored.</p>`
    : html`<table id="projects"><thead><tr><th>project</th><th>kind</th><th>sessions</th><th>published turns</th>
<th>last message</th></tr></thead><tbody>${rows}</tbody></table>`
}`,
  );
}

function searchForm(links: Links, scopeId: string, query = ""): Html | string {
  const target = links.search(scopeId);
  if (!target) return html`<p class="note">Search needs the live browser: <code>optchat browse</code>.</p>`;
  return html`<form class="search" method="get" action="${target}">
<input type="search" name="q" value="${query}" placeholder="search this scope" aria-label="search this scope">
<button type="submit">Search</button></form>`;
}

/** A session as a person knows it: its title (or first prompt), OpenCode's id, then optchat's. */
function sessionCell(links: Links, s: ScopePage["sessions"][number], label: SessionLabel | undefined): Html {
  const title = label?.title ?? s.title;
  const prompt = label?.firstPrompt;
  return html`<a href="${links.session(s.sessionId)}">${title ?? prompt ?? s.sessionId}</a>${
    title && prompt ? html`<div class="meta first-prompt">${prompt}</div>` : ""
  }<div class="meta">${s.hostSessionId !== s.sessionId ? `${s.hostSessionId} · ` : ""}${s.sessionId}</div>`;
}

export function scopePage(links: Links, page: ScopePage): Promise<string> {
  const { scope } = page;
  const rows = page.sessions.map(
    (s) => html`<tr>
<td>${sessionCell(links, s, page.labels.get(s.sessionId))}</td>
<td>${s.host}</td>
<td>${s.parentSessionId ? html`<a href="${links.session(s.parentSessionId)}">${s.parentSessionId}</a>` : "—"}</td>
<td>${s.records}</td><td>${s.turns}</td><td>${s.publications}</td><td>${timeOf(s.firstAt)}</td><td>${timeOf(s.lastAt)}</td></tr>`,
  );
  const shared = page.sharedTree;
  const where = page.location;
  return documentOf(
    where ? `Project ${where.directory}` : `Scope ${scope.scopeId}`,
    crumbsOf(links),
    html`<p>${
      where ? html`${where.directory}${where.gitRemote ? ` (${where.gitRemote})` : ""} · ` : ""
    }${scope.kind === "project" ? "a project's" : scope.kind === "profile" ? "a profile's" : "an isolated session's"} memory, scope <code>${scope.scopeId}</code></p>
${
  shared
    ? html`<p><a href="${links.shared(scope.scopeId)}">Shared memory</a>: ${shared.leafCount} published turn(s) ·
<a href="${links.publications(scope.scopeId)}">publications</a></p>
${searchForm(links, scope.scopeId)}`
    : html`<p class="note">An isolated scope: its session neither publishes nor reads shared memory.</p>`
}
<h2>Sessions</h2>
${
  page.sessions.length === 0
    ? html`<p class="note">No sessions.</p>`
    : html`<table id="sessions"><thead><tr><th>session</th><th>host</th><th>parent</th><th>messages</th><th>turns</th>
<th>published</th><th>first message</th><th>last message</th></tr></thead><tbody>${rows}</tbody></table>`
}
${pager(page.from > 0 ? links.scope(scope.scopeId, Math.max(0, page.from - 100)) : undefined, page.next !== null ? links.scope(scope.scopeId, page.next) : undefined)}`,
  );
}

/** A tree's levels with their node counts and sizes, each a link to the level's lines. */
export function levelsOf(links: Links, owner: TreeOwner, view: TreeView): Html {
  if (view.levels.length === 0) return html`<p class="note">Nothing summarized yet.</p>`;
  return html`<table class="levels"><thead><tr><th>level</th><th>lines cover</th><th>nodes</th><th>bytes</th></tr></thead>
<tbody>${view.levels.map(
    (level) => html`<tr><td><a href="${links.level(owner, level.level)}">level ${level.level}</a></td>
<td>${2 ** level.level} ${owner.kind === "shared" ? "turn(s)" : "message(s)"} each</td><td>${level.nodes}</td><td>${level.bytes}</td></tr>`,
  )}</tbody></table>`;
}

/** What the compactor did for a tree; the cost measure that exists (model calls), and what does not (a ledger). */
export function workOf(view: TreeView): Html {
  const rows = view.work.map(
    (w) => html`<tr><td>${w.summarizer}</td><td>${w.nodes}</td><td>${w.calls}</td><td>${w.overshoots}</td></tr>`,
  );
  return html`<table><thead><tr><th>summarizer</th><th>nodes built</th><th>model calls</th><th>over size</th></tr></thead>
<tbody>${rows}</tbody></table>
<p class="note">Model calls are counted per node; a batch's calls are on its first node. Tokens and dollars are in the
cost ledger (<code>optchat cost</code>).</p>`;
}

export function sharedPage(links: Links, page: SharedPage): Promise<string> {
  const owner: TreeOwner = { kind: "shared", scopeId: page.scopeId };
  return documentOf(
    `Shared memory of ${page.scopeId}`,
    crumbsOf(links, { scopeId: page.scopeId }),
    html`<p>View revision ${page.revision} over ${page.leafCount} published turn(s), ${page.lines.length} line(s),
${page.bytes} bytes${page.unbuilt > 0 ? `, ${page.unbuilt} not summarized yet` : ""} ·
<a href="${links.publications(page.scopeId)}">publications</a></p>
${searchForm(links, page.scopeId)}
<h2>The view, line by line</h2>
<p class="meta">Click a line to open what it summarizes, down to a turn and its messages.</p>
${linesOf(links, owner, page.lines, "Nothing published yet.")}
<h2>As a model reads it</h2>
<p class="meta">The shared block of a new turn in this scope, unprojected (a small window gets a coarser cover).</p>
${literal(page.block, { id: "shared-block", className: "block" })}
<h2>Levels</h2>
${levelsOf(links, owner, page)}
<h2>Compactor</h2>
${workOf(page)}`,
  );
}

export function publicationsPage(links: Links, page: PublicationsPage): Promise<string> {
  const owner: TreeOwner = { kind: "shared", scopeId: page.scopeId };
  const rows = page.publications.map(
    (p) => html`<tr><td><a class="ref" href="${links.zoom(owner, { level: 0, index: p.seq })}">pub:${p.seq}+1</a></td>
<td>${tag(p.outcome)}</td><td><a href="${links.session(p.sessionId)}">${p.sessionId}</a></td><td><code>${p.turnId}</code></td>
<td>${p.records}</td><td>${timeOf(p.completedAt)}</td><td>${timeOf(p.publishedAt)}</td></tr>`,
  );
  return documentOf(
    `Publications of ${page.scopeId}`,
    crumbsOf(links, { scopeId: page.scopeId }),
    html`<p>Every finished turn published to the scope's shared memory, in order, with its outcome.</p>
${
  page.publications.length === 0
    ? html`<p class="note">Nothing published yet.</p>`
    : html`<table><thead><tr><th>ref</th><th>outcome</th><th>session</th><th>turn</th><th>messages</th><th>completed</th>
<th>published</th></tr></thead><tbody>${rows}</tbody></table>`
}
${pager(page.from > 0 ? links.publications(page.scopeId, Math.max(0, page.from - 100)) : undefined, page.next !== null ? links.publications(page.scopeId, page.next) : undefined)}`,
  );
}

export { hitLink };

export function searchPage(
  links: Links,
  page: SearchPage | { scopeId: string; query: string; error: string },
): Promise<string> {
  const body =
    "error" in page
      ? html`<p class="note">${page.error}</p>`
      : page.hits.length === 0
        ? html`<p class="note">No hits.</p>`
        : html`<ol class="lines hits">${page.hits.map(
            (hit) => html`<li><a class="ref" href="${hitLink(links, page.scopeId, hit.ref)}">${hit.ref}</a>
<span class="meta">${hit.source}${hit.kind ? ` · ${hit.kind}` : ""} · ${hit.occurredAt ?? "—"}${hit.sessionId ? ` · ${hit.sessionId}` : ""}</span>
<div class="text excerpt">${hit.segments.map((s) => (s.match ? html`<mark>${s.text}</mark>` : s.text))}</div></li>`,
          )}</ol>${page.nextCursor ? pager(undefined, links.search(page.scopeId, page.query, page.nextCursor)) : ""}`;
  return documentOf(
    `Search ${page.scopeId}`,
    crumbsOf(links, { scopeId: page.scopeId }),
    html`${searchForm(links, page.scopeId, page.query)}
<p class="meta">What a new turn in this scope finds with memory_search: published turns and the shared tree.</p>
${body}`,
  );
}

/** Where a search hit's ref opens: a shared line, a session's line, or its message. */
function hitLink(links: Links, scopeId: string, ref: string): string {
  const parsed = parseMemoryRef(ref);
  if (parsed?.tree === "shared") return links.zoom({ kind: "shared", scopeId }, parsed.node);
  if (parsed?.tree === "session") return links.zoom({ kind: "session", sessionId: parsed.sessionId }, parsed.node);
  return links.scope(scopeId);
}
