/** The live browser's pages across every project: health, the compactor's cost today, search everywhere. */
import { html } from "hono/html";
import type { CostPage, HealthPage, SearchAllPage } from "../../memory/browse.js";
import type { SessionLabel } from "../../store/sessions.js";
import { crumbsOf, documentOf, type Html, literal } from "../layout.js";
import type { Links } from "../links.js";
import { hitLink } from "./scopes.js";

function labelOf(label: SessionLabel | undefined, sessionId: string): string {
  if (!label) return sessionId;
  const named = label.title ?? label.firstPrompt;
  return `${named ? `${named} · ` : ""}${label.hostSessionId !== sessionId ? `${label.hostSessionId} · ` : ""}${sessionId}`;
}

export function healthPage(links: Links, page: HealthPage | undefined): Promise<string> {
  return documentOf(
    "Health",
    crumbsOf(links),
    page
      ? html`<p>What <code>optchat status</code> says: the verdict first (working, stalled or not set up), then the
workers, the backlog and the jobs that keep failing.</p>
${literal(page.lines.join("\n"), { id: "health", className: `block verdict-${page.state.replace(/\W+/g, "-")}` })}
<p class="meta">Each session's page lists its failing summaries and publications with their errors.</p>`
      : html`<p class="note">No health report here (the static export has none): run <code>optchat status</code>.</p>`,
  );
}

export function costPage(links: Links, page: CostPage | undefined): Promise<string> {
  if (!page) {
    return documentOf(
      "Cost",
      crumbsOf(links),
      html`<p class="note">No cost report here: run <code>optchat cost</code>.</p>`,
    );
  }
  const rows = page.sessions.map(
    (s) =>
      html`<tr><td>${
        s.sessionId
          ? html`<a href="${links.session(s.sessionId)}">${labelOf(s.label, s.sessionId)}</a>`
          : "shared trees (no turn)"
      }</td><td>$${s.costUsd.toFixed(4)}</td><td>${s.calls}</td><td>${s.tokens}</td></tr>`,
  );
  return documentOf(
    "Cost",
    crumbsOf(links),
    html`<p id="spend-today">The compactor today (${page.today.day} UTC): ${page.capText}.</p>
${page.today.notice ? html`<p class="note">${page.today.notice}</p>` : ""}
${page.today.models.map((m) => html`<p class="meta">model ${m.model}: ${m.price}</p>`)}
<h2>By session, today</h2>
${
  rows.length === 0
    ? html`<p class="note">No compactor call today.</p>`
    : html`<table id="cost-sessions"><thead><tr><th>session</th><th>dollars</th><th>calls</th><th>tokens</th></tr></thead>
<tbody>${rows}</tbody></table>`
}
<p class="meta">Earlier days, by model and scope: <code>optchat cost --since 7d</code>. The main model's own cost is
OpenCode's (its session list shows it).</p>`,
  );
}

export function searchAllPage(links: Links, page: SearchAllPage | { query: string; error: string }): Promise<string> {
  const target = links.overview("search") ?? "";
  const form = html`<form class="search" method="get" action="${target}">
<input type="search" name="q" value="${page.query}" placeholder="search every project" aria-label="search every project">
<button type="submit">Search</button></form>`;
  let body: Html;
  if ("error" in page) body = html`<p class="note">${page.error}</p>`;
  else if (page.scopes.length === 0) body = html`<p class="note">No hits in any project.</p>`;
  else
    body = html`${page.scopes.map(
      (scope) => html`<h2><a href="${links.scope(scope.scopeId)}">${scope.scopeId}</a></h2>
<ol class="lines hits">${scope.hits.map(
        (hit) => html`<li><a class="ref" href="${hitLink(links, scope.scopeId, hit.ref)}">${hit.ref}</a>
<span class="meta">${hit.source}${hit.occurredAt ? ` · ${hit.occurredAt}` : ""}${hit.sessionId ? ` · ${labelOf(hit.label, hit.sessionId)}` : ""}</span>
<div class="text excerpt">${hit.segments.map((s) => (s.match ? html`<mark>${s.text}</mark>` : s.text))}</div></li>`,
      )}</ol>`,
    )}`;
  return documentOf(
    "Search every project",
    crumbsOf(links),
    html`${form}<p class="meta">What memory_search finds in each project's published turns, best first.</p>${body}`,
  );
}
