/**
 * The memory browser's page model (`optchat browse`, `optchat export --html`): what each page shows, read through the
 * service API (views, zoom, search, payload pages, health, injections) and the store's read-only listings. Nothing
 * here writes: the browser opens the service read-only (`openMemory(…, { readOnly: true })`), and the session's memory
 * as a model reads it comes from `previewContext`, which pins nothing.
 */
import type { BudgetSettings } from "../compactor/budget.js";
import { renderSharedBlock } from "../core/context.js";
import { OptchatError } from "../core/errors.js";
import { highlightSegments, type Segment } from "../core/highlight.js";
import { queryGroups } from "../core/tokenize.js";
import { refOf } from "../core/tree.js";
import { listSessionsOfScope, type SessionSummary } from "../store/browse.js";
import type { Pool } from "../store/db.js";
import { listNodeFailures } from "../store/nodes.js";
import { listPublicationFailures, listPublications, type PublicationFailure } from "../store/publications.js";
import type { SourceRecord } from "../store/records.js";
import { findScope, type Scope, type Session, type SessionLabel } from "../store/sessions.js";
import { findSharedTreeOfScope, type Tree } from "../store/trees.js";
import type { AssembledContext } from "./assembly.js";
import {
  type BrowseExtras,
  type CostPage,
  costPage,
  type HealthPage,
  healthPage,
  labelsWithTitles,
  type SearchAllPage,
  searchAll,
  sessionWindow,
} from "./browse-overview.js";
import {
  type BrowseLine,
  createTreeReader,
  type LevelPage,
  noScope,
  PAGE_SIZE,
  type PublicationRow,
  pageAfter,
  publicationRow,
  type TreeOwner,
  type TreeView,
  type ZoomPage,
} from "./browse-tree.js";
import { readSessionSpendToday, readTodaySpend, spendText } from "./cost.js";
import type { AdapterProblem, Injection } from "./host.js";
import { inspectStoredSession } from "./inspect.js";
import { resolveSession } from "./resolve-session.js";
import { listScopes, type ScopeSummary } from "./scopes.js";
import type { Memory, PayloadPage } from "./service.js";
import type { SearchAnswer } from "./shared.js";

/** Bytes of each payload shown in a page of records; the message's own page shows it whole, in parts. */
export const RECORD_PREVIEW_BYTES = 64 * 1024;
export const MESSAGE_PART_BYTES = 1024 * 1024;

export type { BrowseExtras, CostPage, HealthPage, SearchAllPage };
export type { BrowseLine, LevelPage, PublicationRow, TreeOwner, TreeView, ZoomPage };
export { PAGE_SIZE };

/**
 * The model the session page assembles memory for: a 200,000-token window with the plugin's default reservations
 * (OPTCHAT_TOOLS_TOKENS, OPTCHAT_OUTPUT_TOKENS' fallback, OPTCHAT_RESERVE_TOKENS), before the turn's own messages.
 */
export const PREVIEW_WINDOW = {
  windowTokens: 200_000,
  instructionsTokens: 10_000,
  activeTokens: 0,
  outputTokens: 4096,
  reserveTokens: 2048,
} as const;

export interface ScopePage {
  readonly scope: Scope;
  readonly sharedTree: Tree | undefined;
  readonly sessions: readonly SessionSummary[];
  /** How a person knows each session: OpenCode's id and title, the first prompt (issue 40). */
  readonly labels: ReadonlyMap<string, SessionLabel>;
  /** The project's directory on disk and git remote, when the host knows them. */
  readonly location?: { readonly directory: string; readonly gitRemote: string | null };
  readonly from: number;
  readonly next: number | null;
}

export interface SharedPage extends TreeView {
  readonly scopeId: string;
  /** The shared block exactly as a new turn of the scope reads it (the unprojected view). */
  readonly block: string;
}

export interface PublicationsPage {
  readonly scopeId: string;
  readonly publications: readonly PublicationRow[];
  readonly from: number;
  readonly next: number | null;
}

export interface SessionPage {
  readonly session: Session;
  readonly view: TreeView;
  /** The memory blocks the session's next request would get, or why they could not be assembled. */
  readonly preview: { readonly context: AssembledContext } | { readonly error: string };
  readonly windowTokens: number;
  /** Where windowTokens comes from: the model's own window from its last request, or the assumed default. */
  readonly windowSource: string;
  readonly health: Record<string, unknown>;
  readonly nodeFailures: readonly { ref: string; failures: number; lastFailedAt: Date; lastError: string }[];
  readonly publicationFailures: readonly PublicationFailure[];
  readonly problems: readonly AdapterProblem[];
  /** The compactor's spend today (UTC), this session's and every session's against the cap (issue 39). */
  readonly spend?: { readonly session: string; readonly all: string };
}

export interface RecordsPage {
  readonly session: Session;
  readonly records: readonly { readonly record: SourceRecord; readonly page: PayloadPage }[];
  readonly from: number;
  readonly next: number | null;
}

export interface MessagePage {
  readonly session: Session;
  readonly record: SourceRecord;
  readonly page: PayloadPage;
}

export interface SearchPage {
  readonly scopeId: string;
  readonly query: string;
  readonly hits: readonly (SearchAnswer["hits"][number] & { readonly segments: readonly Segment[] })[];
  readonly nextCursor: string | null;
}

export type ScopeRow = ScopeSummary & { readonly location?: { directory: string; gitRemote: string | null } };

export interface BrowseModel {
  scopes(): Promise<ScopeRow[]>;
  scope(scopeId: string, from: number): Promise<ScopePage>;
  shared(scopeId: string): Promise<SharedPage>;
  publications(scopeId: string, from: number): Promise<PublicationsPage>;
  level(owner: TreeOwner, level: number, from: number): Promise<LevelPage>;
  zoom(owner: TreeOwner, ref: string): Promise<ZoomPage>;
  session(sessionId: string, windowTokens?: number): Promise<SessionPage>;
  records(sessionId: string, from: number): Promise<RecordsPage>;
  message(sessionId: string, seq: number, cursor?: string): Promise<MessagePage>;
  injections(sessionId: string): Promise<{ session: Session; injections: readonly Injection[] }>;
  search(scopeId: string, query: string, cursor?: string): Promise<SearchPage>;
  /** Across every project and profile scope. */
  searchAll(query: string): Promise<SearchAllPage>;
  /** `optchat status`'s verdict, backlog and failing jobs (undefined without a database URL, as in the export). */
  health(): Promise<HealthPage | undefined>;
  /** Today's compactor spend against the cap, and per session (undefined without budget settings). */
  cost(): Promise<CostPage | undefined>;
}

/** "$0.0123 (…)" for the session and "$0.4567 (…) of $5 a day" for every session, today (UTC). */
async function spendOfSession(pool: Pool, budget: BudgetSettings, sessionId: string) {
  const [all, own] = await Promise.all([
    readTodaySpend(pool, budget),
    readSessionSpendToday(pool, budget.prices, { sessionId, limit: 1 }),
  ]);
  const cap = budget.dailyUsd > 0 ? ` of $${budget.dailyUsd} a day (OPTCHAT_BUDGET_DAILY_USD)` : " (no money cap)";
  return {
    session: own[0] ? spendText(own[0]) : "$0.0000 (no compactor call today)",
    all: `${spendText(all.all)}${cap}`,
  };
}

const refOfRecord = (r: SourceRecord) => ({ sessionId: r.sessionId, generation: r.generation, seq: r.seq });

export function createBrowseModel(memory: Memory, budget?: BudgetSettings, extras: BrowseExtras = {}): BrowseModel {
  const pool = memory.pool;
  const trees = createTreeReader(memory);
  const { treeOf, sharedTreeOf, treeView } = trees;
  const locations = once(() => extras.locations?.().catch(() => new Map()) ?? Promise.resolve(new Map()));

  return {
    async scopes() {
      const [scopes, where] = await Promise.all([listScopes(memory, { includeIsolated: true }), locations()]);
      return scopes.map((scope) => {
        const location = where.get(scope.scopeId);
        return location ? { ...scope, location } : scope;
      });
    },
    searchAll: (query) => searchAll(memory, query, extras),
    health: async () => (extras.databaseUrl ? await healthPage(extras.databaseUrl, budget) : undefined),
    cost: async () => (budget ? await costPage(pool, budget, extras) : undefined),

    async scope(scopeId, from) {
      const scope = await findScope(pool, scopeId);
      if (!scope) throw noScope(scopeId);
      const [sessions, sharedTree] = await Promise.all([
        listSessionsOfScope(pool, scopeId, from, PAGE_SIZE.sessions + 1),
        findSharedTreeOfScope(pool, scopeId),
      ]);
      const shown = sessions.slice(0, PAGE_SIZE.sessions);
      const [labels, where] = await Promise.all([
        labelsWithTitles(
          pool,
          shown.map((s) => s.sessionId),
          extras,
        ),
        locations(),
      ]);
      const location = where.get(scopeId);
      return {
        scope,
        sharedTree,
        labels,
        ...(location ? { location } : {}),
        sessions: shown,
        from,
        next: sessions.length > PAGE_SIZE.sessions ? from + PAGE_SIZE.sessions : null,
      };
    },

    async shared(scopeId) {
      const view = await treeView(await sharedTreeOf(scopeId));
      // The block a new turn reads: every built line, the same rendering context assembly uses (core/context.ts).
      const block = renderSharedBlock(
        { scopeId },
        view.lines.filter((line) => line.built),
      ).text;
      return { ...view, scopeId, block };
    },

    async publications(scopeId, from) {
      if (!(await findScope(pool, scopeId))) throw noScope(scopeId);
      const rows = await listPublications(pool, scopeId, from, PAGE_SIZE.publications + 1);
      return {
        scopeId,
        publications: rows.slice(0, PAGE_SIZE.publications).map(publicationRow),
        from,
        next: rows.length > PAGE_SIZE.publications ? from + PAGE_SIZE.publications : null,
      };
    },

    level: trees.level,
    zoom: trees.zoom,

    async session(sessionId, asked) {
      const session = await resolveSession(memory, sessionId);
      // The model's own window when its requests were recorded (issue 40 item 8), else the assumed default.
      const known = asked === undefined ? await sessionWindow(pool, session.sessionId) : undefined;
      const windowTokens = asked ?? known?.windowTokens ?? PREVIEW_WINDOW.windowTokens;
      const windowSource =
        asked !== undefined
          ? "the window asked for"
          : known
            ? `the window of ${known.model ?? "its model"}, from its last request`
            : "an assumed window: no request of this session was recorded";
      const tree = await treeOf({ kind: "session", sessionId: session.sessionId });
      const [view, preview, health, nodeFailures, publicationFailures, problems] = await Promise.all([
        treeView(tree),
        memory
          .previewContext(session.sessionId, { ...PREVIEW_WINDOW, windowTokens })
          .then((context) => ({ context }))
          .catch((error: Error) => ({ error: error.message })),
        inspectStoredSession(memory, session),
        listNodeFailures(pool, tree.treeId),
        listPublicationFailures(pool, session.sessionId),
        memory.host.listProblems(session.host, session.hostSessionId, 100),
      ]);
      const spend = budget ? await spendOfSession(pool, budget, session.sessionId) : undefined;
      return {
        ...(spend ? { spend } : {}),
        session,
        view,
        preview,
        windowTokens,
        windowSource,
        health: health.health as Record<string, unknown>,
        nodeFailures: nodeFailures.map((f) => ({
          ref: refOf(f),
          failures: f.failures,
          lastFailedAt: f.lastFailedAt,
          lastError: f.lastError,
        })),
        publicationFailures,
        problems,
      };
    },

    async records(sessionId, from) {
      const session = await resolveSession(memory, sessionId);
      const tree = await treeOf({ kind: "session", sessionId: session.sessionId });
      const shown = await memory.listRecords(session.sessionId, { fromSeq: from, limit: PAGE_SIZE.records });
      const records = [];
      for (const record of shown) {
        const page = await memory.readPayload(refOfRecord(record), { maxBytes: RECORD_PREVIEW_BYTES });
        records.push({ record, page });
      }
      // Seqs are gap-free from 0 and every record is a leaf: pages start at multiples of the page size.
      return { session, records, from, next: pageAfter(from, PAGE_SIZE.records, tree.leafCount) };
    },

    async message(sessionId, seq, cursor) {
      const session = await resolveSession(memory, sessionId);
      const [record] = await memory.listRecords(session.sessionId, { fromSeq: seq, limit: 1 });
      if (!record || record.seq !== seq)
        throw new OptchatError("REF_NOT_FOUND", `Session ${session.sessionId} has no message ${seq}`, { seq });
      const page = await memory.readPayload(refOfRecord(record), {
        maxBytes: MESSAGE_PART_BYTES,
        ...(cursor ? { cursor } : {}),
      });
      return { session, record, page };
    },

    async injections(sessionId) {
      const session = await resolveSession(memory, sessionId);
      return { session, injections: await memory.host.listInjections(session.sessionId, 100) };
    },

    async search(scopeId, query, cursor) {
      const answer = await memory.search(await memory.readScope(scopeId), {
        query,
        limit: PAGE_SIZE.hits,
        ...(cursor ? { cursor } : {}),
      });
      const terms = queryGroups(query).flat();
      return {
        scopeId,
        query,
        hits: answer.hits.map((hit) => ({ ...hit, segments: highlightSegments(hit.excerpt, terms) })),
        nextCursor: answer.nextCursor,
      };
    },
  };
}

/** A lazy value computed at most once (the host's locations: OpenCode's storage is read once per browser run). */
function once<T>(make: () => Promise<T>): () => Promise<T> {
  let made: Promise<T> | undefined;
  return () => {
    made ??= make();
    return made;
  };
}
