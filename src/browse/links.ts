/**
 * Where each page lives: the live server's URLs, or the static export's files. Pages build every link through one of
 * these, so the same pages serve both (`optchat browse`, `optchat export --html`).
 */
import { createHash } from "node:crypto";
import type { NodeAddress } from "../core/tree.js";
import { refOf } from "../core/tree.js";
import type { TreeOwner } from "../memory/browse.js";

/** A later part of a long message: the server pages by the payload cursor, the export by part number. */
export interface MessagePart {
  readonly cursor: string;
  readonly index: number;
}

export interface Links {
  home(): string;
  scope(scopeId: string, from?: number): string;
  shared(scopeId: string): string;
  publications(scopeId: string, from?: number): string;
  level(owner: TreeOwner, level: number, from?: number): string;
  /** A line of a tree; a session's single message opens the message itself. */
  zoom(owner: TreeOwner, node: NodeAddress): string;
  session(sessionId: string): string;
  records(sessionId: string, from?: number): string;
  message(sessionId: string, seq: number, part?: MessagePart): string;
  injections(sessionId: string): string;
  /** The search form's target and a result page; undefined where there is no server to search (the export). */
  search(scopeId: string, query?: string, cursor?: string): string | undefined;
  /** The pages of the live server only (undefined in the export): health, cost, and search across every project. */
  overview(page: "health" | "cost" | "search", query?: string): string | undefined;
}

const segment = encodeURIComponent;

function query(params: Record<string, string | number | undefined>): string {
  const entries = Object.entries(params).filter(([, value]) => value !== undefined && value !== 0 && value !== "");
  return entries.length === 0
    ? ""
    : `?${new URLSearchParams(entries.map(([k, v]): [string, string] => [k, String(v)])).toString()}`;
}

function ownerPath(owner: TreeOwner): string {
  return owner.kind === "shared" ? `/scope/${segment(owner.scopeId)}` : `/session/${segment(owner.sessionId)}`;
}

/** The live server's URLs (absolute paths; the token travels in a cookie, never in a link). */
export const serverLinks: Links = {
  home: () => "/",
  scope: (scopeId, from) => `/scope/${segment(scopeId)}${query({ from })}`,
  shared: (scopeId) => `/scope/${segment(scopeId)}/shared`,
  publications: (scopeId, from) => `/scope/${segment(scopeId)}/publications${query({ from })}`,
  level: (owner, level, from) => `${ownerPath(owner)}/level/${level}${query({ from })}`,
  zoom: (owner, node) =>
    owner.kind === "session" && node.level === 0
      ? serverLinks.message(owner.sessionId, node.index)
      : `${ownerPath(owner)}/zoom/${segment(refOf(node))}`,
  session: (sessionId) => `/session/${segment(sessionId)}`,
  records: (sessionId, from) => `/session/${segment(sessionId)}/messages${query({ from })}`,
  message: (sessionId, seq, part) => `/session/${segment(sessionId)}/message/${seq}${query({ cursor: part?.cursor })}`,
  injections: (sessionId) => `/session/${segment(sessionId)}/injections`,
  search: (scopeId, q, cursor) => `/scope/${segment(scopeId)}/search${query({ q, cursor })}`,
  overview: (page, q) => `/${page}${query({ q })}`,
};

/**
 * A file name for an id: ids are opaque ([A-Za-z0-9_.:-], no "..", not starting with "." or "-"), so replacing ":"
 * (which would read as a URL scheme in a relative link) with "~" (not in the alphabet) keeps names distinct. Anything
 * else gets a hash, so no id can name a path outside the export.
 */
export function fileNameOf(id: string): string {
  const name = id.replaceAll(":", "~");
  return /^[A-Za-z0-9_][A-Za-z0-9_.~-]{0,199}$/.test(name) && !name.includes("..")
    ? name
    : `x-${createHash("sha256").update(id).digest("hex").slice(0, 32)}`;
}

function ownerDirectory(owner: TreeOwner): string {
  return owner.kind === "shared" ? `scopes/${fileNameOf(owner.scopeId)}` : `sessions/${fileNameOf(owner.sessionId)}`;
}

/** The export's file layout, relative to its directory: the index at the top, every other page two levels down. */
export const exportFiles = {
  home: () => "index.html",
  scope: (scopeId: string, from = 0) => `scopes/${fileNameOf(scopeId)}/${from > 0 ? `sessions-${from}` : "index"}.html`,
  shared: (scopeId: string) => `scopes/${fileNameOf(scopeId)}/shared.html`,
  publications: (scopeId: string, from = 0) => `scopes/${fileNameOf(scopeId)}/publications-${from}.html`,
  level: (owner: TreeOwner, level: number, from = 0) => `${ownerDirectory(owner)}/level-${level}-${from}.html`,
  zoom: (owner: TreeOwner, node: NodeAddress) => `${ownerDirectory(owner)}/zoom-${node.level}-${node.index}.html`,
  session: (sessionId: string) => `sessions/${fileNameOf(sessionId)}/index.html`,
  records: (sessionId: string, from = 0) => `sessions/${fileNameOf(sessionId)}/messages-${from}.html`,
  message: (sessionId: string, seq: number, part = 0) =>
    `sessions/${fileNameOf(sessionId)}/message-${seq}${part > 0 ? `-${part}` : ""}.html`,
  injections: (sessionId: string) => `sessions/${fileNameOf(sessionId)}/injections.html`,
};

/** Links between exported files, relative to the page at `file` (so the export opens from anywhere, no server). */
export function exportLinks(file: string): Links {
  const up = "../".repeat(file.split("/").length - 1);
  const at = (path: string) => `${up}${path}`;
  const links: Links = {
    home: () => at(exportFiles.home()),
    scope: (scopeId, from) => at(exportFiles.scope(scopeId, from)),
    shared: (scopeId) => at(exportFiles.shared(scopeId)),
    publications: (scopeId, from) => at(exportFiles.publications(scopeId, from)),
    level: (owner, level, from) => at(exportFiles.level(owner, level, from)),
    zoom: (owner, node) =>
      owner.kind === "session" && node.level === 0
        ? links.message(owner.sessionId, node.index)
        : at(exportFiles.zoom(owner, node)),
    session: (sessionId) => at(exportFiles.session(sessionId)),
    records: (sessionId, from) => at(exportFiles.records(sessionId, from)),
    message: (sessionId, seq, part) => at(exportFiles.message(sessionId, seq, part?.index)),
    injections: (sessionId) => at(exportFiles.injections(sessionId)),
    search: () => undefined,
    overview: () => undefined,
  };
  return links;
}
