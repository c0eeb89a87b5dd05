import { z } from "zod";
import { type JobInserter, producerJobs } from "../compactor/queue.js";
import { OptchatError } from "../core/errors.js";
import type { FoldParams } from "../core/fold.js";
import { ensureEmbeddedServer } from "../embedded/server.js";
import { databaseUnavailable, openPool, type Pool } from "../store/db.js";
import { readSchemaState, SCHEMA_VERSION } from "../store/migrate.js";
import { TREE_CHANNEL, TreeListener } from "../store/notifications.js";
import { listRecords, type SourceRecord } from "../store/records.js";
import { findSession, type Session } from "../store/sessions.js";
import type { Turn, TurnOutcome } from "../store/turns.js";
import {
  type AssembledContext,
  type AssembleFrom,
  type AssembleOptions,
  assembleContext,
  assembledTurn,
  type PreparedContext,
  type PrepareOptions,
  prepareContext,
} from "./assembly.js";
import type { AuditReport } from "./audit.js";
import { type Config, foldParamsOf } from "./config.js";
import { prepareDatabase } from "./database.js";
import type { ForgetOptions, ForgetReport, ForgetRequest, ForgetSummary } from "./forget.js";
import { guardMemory } from "./guard.js";
import { createHostSupport, type HostSupport } from "./host.js";
import { type IngestOptions, type IngestResult, ingest, ingestMany } from "./ingest.js";
import { IngestRouting } from "./ingest-routing.js";
import type { InheritResult, RewindResult } from "./inherit.js";
import { openSession } from "./open-session.js";
import type { PayloadPage, RecordRef } from "./payload-page.js";
import { PinnedNodeCache } from "./pinned-nodes.js";
import {
  isScopeReader,
  isTurn,
  nextTurnOf,
  type ReadAs,
  type ScopeReader,
  type ServedSnapshot,
  scopeReader,
  storedTurnOrThrow,
  type TurnContext,
  turnOrThrow,
} from "./reader.js";
import type { sessionsFor, ZoomAnswer, ZoomOptions } from "./retrieval.js";
import type { IsolateReport } from "./revoke.js";
import {
  admitTurnSchema,
  assembleSchema,
  forgetRequestSchema,
  hostMessageIdsSchema,
  type IngestEvent,
  listRecordsOptionsSchema,
  type OpenSessionInput,
  opaqueId,
  openSessionSchema,
  outcomeSchema,
  parseInput,
  prepareSchema,
  readPayloadOptionsSchema,
  recordRefSchema,
  searchSchema,
  sessionsOptionsSchema,
  settleOptionsSchema,
  turnContextSchema,
  viewOptionsSchema,
  zoomOptionsSchema,
} from "./schemas.js";
import type { SearchAnswer, SearchOptions } from "./shared.js";
import { admitTurn, finishTurn } from "./turns.js";
import {
  type Readiness,
  type RenderedView,
  renderView,
  sessionTreeOrThrow,
  settleTree,
  type ZoomResult,
  zoomTree,
} from "./views.js";

export type { IngestOptions, IngestResult } from "./ingest.js";
export type { InheritResult, RewindResult } from "./inherit.js";
export type { PayloadPage, RecordRef } from "./payload-page.js";

export interface Memory {
  readonly pool: Pool;
  /** Leases, injection records and health for host adapters (the OpenCode plugin). */
  readonly host: HostSupport;
  openSession(input: OpenSessionInput): Promise<Session>;
  getSession(sessionId: string): Promise<Session>;
  /** Ingests one event; throws INGEST_CONFLICT (after recording it) when the key is sealed with other content. */
  ingest(event: IngestEvent): Promise<IngestResult>;
  /**
   * Ingests a batch in one transaction; conflicts are recorded and reported per item, not thrown. `beforeCommit` runs
   * inside the transaction after all writes (crash and lock tests pause there).
   */
  ingestMany(events: readonly IngestEvent[], options?: IngestOptions): Promise<IngestResult[]>;
  /**
   * Takes over, for a fork, the parent's records that OpenCode copied into it (`copies`: the child's copies as ingest
   * events, oldest first): matched to the one session of the scope whose first records they are, by reference, with
   * the parent's summaries; nothing is published again. `has_history` once the child holds records.
   */
  inheritHistory(sessionId: string, copies: readonly IngestEvent[]): Promise<InheritResult>;
  /**
   * A rewind of the host's history (a revert): a new generation keeps the records before the first record of the
   * removed host messages and becomes current; `unchanged` when none of them is stored in the current generation.
   */
  rewindSession(sessionId: string, removedHostMessageIds: readonly string[]): Promise<RewindResult>;
  listRecords(
    sessionId: string,
    options?: { generation?: number; fromSeq?: number; limit?: number },
  ): Promise<SourceRecord[]>;
  readPayload(ref: RecordRef, options?: { cursor?: string; maxBytes?: number }): Promise<PayloadPage>;
  /** Waits until every part of the session's view is a summary; MEMORY_NOT_READY after the timeout. */
  settle(sessionId: string, options?: { timeoutMs?: number }): Promise<Readiness>;
  /** The session's view (latest revision unless given), projected when a smaller budget is asked for. */
  view(sessionId: string, options?: { budget?: number; revision?: number }): Promise<RenderedView>;
  /** Opens a line `start+count` of the session's tree into its two lines, or a single message into its record. */
  zoomSession(sessionId: string, ref: string): Promise<ZoomResult>;
  /** Admits a turn and pins its snapshot (seed 000 §9); re-admitting returns the same turn. */
  admitTurn(input: {
    sessionId: string;
    turnId: string;
    query?: string;
    publishes?: boolean;
    awaitRecent?: boolean;
  }): Promise<Turn>;
  /** Records the turn's outcome once and schedules its publication in the same transaction. */
  finishTurn(ctx: TurnContext, outcome: TurnOutcome): Promise<{ turn: Turn; finished: boolean }>;
  getTurn(ctx: TurnContext): Promise<Turn>;
  /**
   * The memory blocks for one model request of the turn, within the budget (seed 000 §7); with `prepared` (from
   * `prepareContext` for the same turn and options), only the fitting to the budget is left to do.
   */
  assembleContext(ctx: TurnContext, options: AssembleOptions, from?: AssembleFrom): Promise<AssembledContext>;
  /** Everything an assembly reads before it knows its budget (see `PreparedContext`). */
  prepareContext(ctx: TurnContext, options: PrepareOptions): Promise<PreparedContext>;
  /**
   * The memory blocks the session's next turn would get now, assembled exactly as for a real turn but for a turn that
   * is only built in memory: nothing is admitted, pinned or written (partial readiness, no wait).
   */
  previewContext(sessionId: string, options: Omit<AssembleOptions, "readiness" | "waitMs">): Promise<AssembledContext>;
  /** Retrieval under the turn's scope and snapshot (seed 000 §8). */
  zoom(ctx: ReadAs, ref: string, options?: ZoomOptions): Promise<ZoomAnswer>;
  search(ctx: ReadAs, options: SearchOptions): Promise<SearchAnswer>;
  date(ctx: ReadAs, ref: string): Promise<{ ref: string; first: string; last: string; snapshot: ServedSnapshot }>;
  sessions(
    ctx: ReadAs,
    options?: { cursor?: string; limit?: number },
  ): Promise<Awaited<ReturnType<typeof sessionsFor>>>;
  /** An operator's reader of a scope at its latest snapshot, for the retrieval methods (the CLI uses it). */
  readScope(scopeId: string): Promise<ScopeReader>;
  /** Every audit (publication integrity, snapshot visibility, view coverage, reachability, derivation). */
  audit(): Promise<AuditReport>;
  /** What `forget` would remove now (a dry run; nothing changes). */
  planForget(request: ForgetRequest): Promise<ForgetSummary>;
  /** Forgets sessions, a scope, or what is older than a date, in one transaction (forget.ts, docs/deletion.md). */
  forget(request: ForgetRequest, options?: ForgetOptions): Promise<ForgetReport>;
  /** Revokes a session's sharing: moves it to isolated sharing and retires its publications (revoke.ts). */
  isolateSession(sessionId: string): Promise<IsolateReport>;
  /** Hides a session from listings and discovery (archived = true) or shows it again; nothing is forgotten. */
  archiveSession(sessionId: string, archived: boolean): Promise<void>;
  close(): Promise<void>;
}

/**
 * Opens the memory service: a pool, after checking that the database is reachable and migrated. Fails with
 * DATABASE_UNAVAILABLE or SCHEMA_OUT_OF_DATE (naming the fix) instead of failing later inside a query.
 */
export async function openMemory(
  configured: Config,
  options: { applicationName?: string; readOnly?: boolean; poolIdleMs?: number } = {},
): Promise<Memory> {
  // The embedded server is started here when no URL is configured (src/memory/database.ts).
  const config = await prepareDatabase(configured);
  const pool = openPool(config, options.applicationName ?? "optchat", options.readOnly ?? false, options.poolIdleMs);
  try {
    // Not retried: a server that is down when a program starts is reported at once (the CLI should not hang).
    const { version, jobQueue } = await readSchemaState(pool);
    const expected = SCHEMA_VERSION;
    if (version < expected) {
      throw new OptchatError(
        "SCHEMA_OUT_OF_DATE",
        `The optchat schema in ${new URL(config.databaseUrl).pathname.slice(1)} is at version ${version}, this code needs ${expected}: run \`optchat migrate\``,
        { version, expected },
      );
    }
    if (!jobQueue) {
      throw new OptchatError(
        "SCHEMA_OUT_OF_DATE",
        "The job queue (pg-boss schema) is not installed: run `optchat migrate`",
        {},
      );
    }
  } catch (error) {
    await pool.end().catch(() => {});
    if (error instanceof OptchatError) throw error;
    throw databaseUnavailable(config.databaseUrl, error);
  }
  return createMemory(pool, config, { readOnly: options.readOnly ?? false });
}

/**
 * The service over an open pool and job queue; every call goes through the retry helper (guard.ts). What a host
 * process seldom calls (retrieval tools, forks and rewinds, deletion, revocation, audits, payload pages) is imported on
 * its first call: a plugin's import is on OpenCode's start-up path, and those modules were about a fifth of the
 * plugin's import in OpenCode's Bun (issue 9 item 2, docs/opencode-notes.md "What a run costs").
 */
export function createMemory(pool: Pool, config: Config, options: { readOnly?: boolean } = {}): Memory {
  const embedded = config.embedded;
  return guardMemory(createUnguardedMemory(pool, config, options.readOnly ?? false), {
    databaseUrl: config.databaseUrl,
    unavailableRetryMs: config.databaseRetryMs,
    // An embedded server that stopped after its idle time (or was killed) is started again by the next call.
    ...(embedded ? { recover: async () => void (await ensureEmbeddedServer(embedded)) } : {}),
  });
}

function createUnguardedMemory(pool: Pool, config: Config, readOnly: boolean): Memory {
  const fold: FoldParams = foldParamsOf(config);
  const listener = new TreeListener(config.databaseUrl, TREE_CHANNEL);
  // Jobs are inserted by the commits that make them due, through one statement each (compactor/queue.ts
  // `producerJobs`): no pg-boss instance is started here. Its start (module, own pool, schema check, timers) was about
  // a third of the plugin's CPU in an `opencode run` (issue 9 item 2, docs/opencode-notes.md "What a run costs").
  const jobQueue = (): Promise<JobInserter> =>
    readOnly
      ? Promise.reject(new Error("a read-only memory service inserts no jobs (it was opened with readOnly)"))
      : Promise.resolve(producerJobs);
  // ingest.ts still declares its queue as a PgBoss; it only hands it to enqueueNodeJobs, which takes a JobInserter.
  const ingestion = {
    pool,
    jobQueue,
    fold,
    routing: new IngestRouting(),
  };

  async function getSession(sessionId: string): Promise<Session> {
    const id = parseInput(recordRefSchema.shape.sessionId, sessionId, "getSession", "sessionId");
    const session = await findSession(pool, id);
    if (!session)
      throw new OptchatError("SESSION_NOT_FOUND", `No session ${id}`, { field: "sessionId", sessionId: id });
    return session;
  }

  async function treeOf(sessionId: string) {
    const session = await getSession(sessionId);
    return await sessionTreeOrThrow(pool, session.sessionId, session.currentGeneration);
  }

  const shared = { pool, jobQueue, listener, config, pinnedNodes: new PinnedNodeCache() };
  // A turn or scope reader the caller holds is taken as it is; a turn named by its IDs is validated.
  const reader = (ctx: ReadAs, where: string): ReadAs =>
    isTurn(ctx) || isScopeReader(ctx) ? ctx : parseInput(turnContextSchema, ctx, where);
  const memory: Memory = {
    pool,
    host: createHostSupport(pool),
    getSession,
    ingest: (event) => ingest(ingestion, event),
    ingestMany: (events, options) => ingestMany(ingestion, events, "ingestMany", options),
    rewindSession: async (sessionId, removed) =>
      (await import("./inherit.js")).rewindSession(
        ingestion,
        parseInput(recordRefSchema.shape.sessionId, sessionId, "rewindSession", "sessionId"),
        parseInput(hostMessageIdsSchema, removed, "rewindSession", "removedHostMessageIds"),
      ),
    inheritHistory: async (sessionId, copies) =>
      (await import("./inherit.js")).inheritHistory(
        ingestion,
        parseInput(recordRefSchema.shape.sessionId, sessionId, "inheritHistory", "sessionId"),
        copies,
      ),

    openSession: (input) =>
      openSession(pool, parseInput(openSessionSchema, input, "openSession"), config.sessionVisibility),

    async listRecords(sessionId, rawOptions = {}) {
      const options = parseInput(listRecordsOptionsSchema, rawOptions, "listRecords");
      const session = await getSession(sessionId);
      return await listRecords(
        pool,
        session.sessionId,
        options.generation ?? session.currentGeneration,
        options.fromSeq ?? 0,
        options.limit ?? 1000,
      );
    },

    readPayload: async (ref, options = {}) =>
      (await import("./payload-page.js")).readPayloadPage(
        pool,
        parseInput(recordRefSchema, ref, "readPayload", "ref"),
        parseInput(readPayloadOptionsSchema, options, "readPayload"),
      ),

    async settle(sessionId, rawOptions = {}) {
      const options = parseInput(settleOptionsSchema, rawOptions, "settle");
      const session = await getSession(sessionId);
      return await settleTree(
        pool,
        listener,
        session.sessionId,
        session.currentGeneration,
        options.timeoutMs ?? config.settleTimeoutMs,
      );
    },

    async view(sessionId, rawOptions = {}) {
      const options = parseInput(viewOptionsSchema, rawOptions, "view");
      return await renderView(pool, await treeOf(sessionId), options);
    },

    async zoomSession(sessionId, ref) {
      return await zoomTree(pool, await treeOf(sessionId), ref);
    },

    admitTurn: (input) => admitTurn(shared, parseInput(admitTurnSchema, input, "admitTurn")),
    finishTurn: (ctx, outcome) =>
      finishTurn(
        shared,
        parseInput(turnContextSchema, ctx, "finishTurn"),
        parseInput(outcomeSchema, outcome, "finishTurn", "outcome"),
      ),
    getTurn: (ctx) => storedTurnOrThrow(pool, parseInput(turnContextSchema, ctx, "getTurn")),
    assembleContext: async (ctx, options, from = {}) => {
      const valid = parseInput(turnContextSchema, ctx, "assembleContext");
      const validOptions = parseInput(assembleSchema, options, "assembleContext");
      // A preparation or an earlier assembly of this turn holds the turn as read (its snapshot pinned at admission):
      // only the retention epoch is read again, once, as for every read of a turn the caller holds.
      const mine = (turn: Turn | undefined) => turn?.sessionId === valid.sessionId && turn.turnId === valid.turnId;
      const held = [from.prepared?.turn, assembledTurn(from.previous)].find(mine);
      return await assembleContext(shared, await turnOrThrow(pool, held ?? valid), validOptions, from);
    },
    prepareContext: async (ctx, options) => {
      const valid = parseInput(turnContextSchema, ctx, "prepareContext");
      const validOptions = parseInput(prepareSchema, options, "prepareContext");
      return await prepareContext(shared, await turnOrThrow(pool, valid), validOptions);
    },
    previewContext: async (sessionId, options) =>
      assembleContext(shared, await nextTurnOf(pool, await getSession(sessionId)), {
        ...parseInput(assembleSchema, options, "previewContext"),
        readiness: "partial",
        waitMs: 0,
      }),
    readScope: (scopeId) => scopeReader(pool, parseInput(opaqueId, scopeId, "readScope", "scope")),
    audit: async () => (await import("./audit.js")).auditAll(pool),
    planForget: async (request) =>
      (await import("./forget.js")).planForget(pool, parseInput(forgetRequestSchema, request, "planForget")),
    forget: async (request, options) =>
      (await import("./forget.js")).forget(
        ingestion,
        parseInput(forgetRequestSchema, request, "forget"),
        options ?? {},
      ),
    isolateSession: async (sessionId) =>
      (await import("./revoke.js")).isolateSession(
        ingestion,
        parseInput(opaqueId, sessionId, "isolateSession", "sessionId"),
      ),
    archiveSession: async (sessionId, archived) =>
      (await import("./revoke.js")).archiveSession(
        ingestion,
        parseInput(opaqueId, sessionId, "archiveSession", "sessionId"),
        archived,
      ),
    zoom: async (ctx, ref, options = {}) =>
      (await import("./retrieval.js")).zoomFor(
        shared,
        reader(ctx, "zoom"),
        parseInput(z.string().max(300), ref, "zoom", "ref"),
        parseInput(zoomOptionsSchema, options, "zoom"),
        (page, cursor, maxBytes) => memory.readPayload(page, { maxBytes, ...(cursor ? { cursor } : {}) }),
      ),
    search: async (ctx, options) =>
      (await import("./shared.js")).searchFor(
        shared,
        reader(ctx, "search"),
        parseInput(searchSchema, options, "search"),
      ),
    date: async (ctx, ref) =>
      (await import("./retrieval.js")).dateFor(
        shared,
        reader(ctx, "date"),
        parseInput(z.string().max(300), ref, "date", "ref"),
      ),
    sessions: async (ctx, options = {}) =>
      (await import("./retrieval.js")).sessionsFor(
        shared,
        reader(ctx, "sessions"),
        parseInput(sessionsOptionsSchema, options, "sessions"),
      ),

    async close() {
      await listener.close();
      await pool.end();
    },
  };
  return memory;
}
