/**
 * `optchat export --html DIR`: the browser's pages as static files (seed 002 §10: the whole memory as HTML), linked
 * relatively so the directory opens from disk with no server and no token. Search needs the live browser; every
 * other page is written: scopes, sessions, shared trees, publications, levels, every zoomable line, every message
 * (long ones in parts), injections.
 */
import { mkdir, readdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { OptchatError } from "../core/errors.js";
import type { BrowseModel, TreeOwner, TreeView } from "../memory/browse.js";
import { exportFiles, exportLinks, type Links } from "./links.js";
import { homePage, publicationsPage, scopePage, sharedPage } from "./pages/scopes.js";
import { injectionsPage, messagePage, recordsPage, sessionPage } from "./pages/session.js";
import { levelPage, zoomPage } from "./pages/tree.js";

export interface ExportSummary {
  readonly directory: string;
  readonly pages: number;
  readonly bytes: number;
  readonly scopes: number;
  readonly sessions: number;
  readonly messages: number;
}

/** Writes every page under `directory`, which must be empty or absent (no stale pages of an earlier export). */
export async function exportHtml(
  model: BrowseModel,
  directory: string,
  onPage: (written: { pages: number; file: string }) => void = () => {},
): Promise<ExportSummary> {
  const existing = await readdir(directory).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return [];
    throw error;
  });
  if (existing.length > 0) {
    throw new OptchatError(
      "INPUT_INVALID",
      `export --html: ${directory} is not empty; give a new or empty directory (an export never mixes with older pages)`,
    );
  }
  const totals = { pages: 0, bytes: 0, scopes: 0, sessions: 0, messages: 0 };
  const write = async (file: string, render: (links: Links) => Promise<string>) => {
    const text = await render(exportLinks(file));
    const path = join(directory, file);
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, text);
    totals.pages += 1;
    totals.bytes += Buffer.byteLength(text);
    onPage({ pages: totals.pages, file });
  };

  const scopes = await model.scopes();
  await write(exportFiles.home(), (links) => homePage(links, scopes));
  for (const scope of scopes) {
    totals.scopes += 1;
    const sessionIds: string[] = [];
    for (let from: number | null = 0; from !== null; ) {
      const page = await model.scope(scope.scopeId, from);
      await write(exportFiles.scope(scope.scopeId, from), (links) => scopePage(links, page));
      sessionIds.push(...page.sessions.map((s) => s.sessionId));
      if (from === 0 && page.sharedTree) await exportShared(model, scope.scopeId, write);
      from = page.next;
    }
    for (const sessionId of sessionIds) {
      totals.sessions += 1;
      totals.messages += await exportSession(model, sessionId, write);
    }
  }
  return { directory, ...totals };
}

type Write = (file: string, render: (links: Links) => Promise<string>) => Promise<void>;

async function exportShared(model: BrowseModel, scopeId: string, write: Write): Promise<void> {
  const shared = await model.shared(scopeId);
  await write(exportFiles.shared(scopeId), (links) => sharedPage(links, shared));
  for (let from: number | null = 0; from !== null; ) {
    const page = await model.publications(scopeId, from);
    await write(exportFiles.publications(scopeId, from), (links) => publicationsPage(links, page));
    from = page.next;
  }
  await exportTree(model, { kind: "shared", scopeId }, shared, write);
}

/** Every level's pages and a zoom page for every line that opens into something (a session's leaf is its message). */
async function exportTree(model: BrowseModel, owner: TreeOwner, view: TreeView, write: Write): Promise<void> {
  for (const { level } of view.levels) {
    for (let from: number | null = 0; from !== null; ) {
      const page = await model.level(owner, level, from);
      await write(exportFiles.level(owner, level, from), (links) => levelPage(links, page));
      for (const line of page.lines) {
        if (owner.kind === "session" && level === 0) continue;
        const zoomed = await model.zoom(owner, line.ref);
        if (zoomed.kind !== "message")
          await write(exportFiles.zoom(owner, line.node), (links) => zoomPage(links, zoomed));
      }
      from = page.next;
    }
  }
}

/** The session's pages; returns how many messages it has. */
async function exportSession(model: BrowseModel, sessionId: string, write: Write): Promise<number> {
  const session = await model.session(sessionId);
  await write(exportFiles.session(sessionId), (links) => sessionPage(links, session));
  let messages = 0;
  for (let from: number | null = 0; from !== null; ) {
    const page = await model.records(sessionId, from);
    await write(exportFiles.records(sessionId, from), (links) => recordsPage(links, page));
    for (const { record } of page.records) {
      messages += 1;
      let cursor: string | undefined;
      let part = 0;
      do {
        const message = await model.message(sessionId, record.seq, cursor);
        const index = part;
        await write(exportFiles.message(sessionId, record.seq, index), (links) => messagePage(links, message, index));
        cursor = message.page.nextCursor ?? undefined;
        part += 1;
      } while (cursor);
    }
    from = page.next;
  }
  await exportTree(model, { kind: "session", sessionId }, session.view, write);
  const { injections } = await model.injections(sessionId);
  await write(exportFiles.injections(sessionId), (links) => injectionsPage(links, session.session, injections));
  return messages;
}
