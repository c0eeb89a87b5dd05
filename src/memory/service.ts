import { randomBytes } from "node:crypto";
import { readdirSync } from "node:fs";
import type { PgBoss } from "pg-boss";
import { z } from "zod";
import { createBoss, enqueueNodeJobs } from "../compactor/queue.js";
import { type FieldIssue, InputInvalidError, OptchatError } from "../core/errors.js";
import type { FoldParams } from "../core/fold.js";
import { eventKeyOf, sessionIdFromRandom, stageKeyOf } from "../core/ids.js";
import { decodePayloadCursor, encodePayloadCursor, hashPrefixOf, utf8SafePrefixLength } from "../core/payload.js";
import { databaseUnavailable, openPool, type Pool, sqlStateOf, withTransaction } from "../store/db.js";
import { sealAndAppend } from "../store/ingest-commit.js";
import { jobQueueInstalled, MIGRATIONS_DIRECTORY, readSchemaVersion } from "../store/migrate.js";
import { TREE_CHANNEL, TreeListener } from "../store/notifications.js";
import {
  findRecord,
  listRecords,
  type RecordToSeal,
  readPayloadBytes,
  type SealOutcome,
  type SourceRecord,
  type StageOutcome,
  stageItem,
} from "../store/records.js";
import { ensureScope, findSession, findSessionByHost, registerSession, type Session } from "../store/sessions.js";
import type { Turn, TurnOutcome } from "../store/turns.js";
import { type AssembledContext, type AssembleOptions, assembleContext } from "./assembly.js";
import { type AuditReport, auditAll } from "./audit.js";
import type { Config } from "./config.js";
import { guardMemory } from "./guard.js";
import { createHostSupport, type HostSupport } from "./host.js";
import { preparePayload } from "./payload-prep.js";
import { PinnedNodeCache } from "./pinned-nodes.js";
import {
  isScopeReader,
  isTurn,
  nextTurnOf,
  type ReadAs,
  type ScopeReader,
  type ServedSnapshot,
  scopeReader,
  type TurnContext,
  turnOrThrow,
} from "./reader.js";
import { dateFor, sessionsFor, type ZoomAnswer, type ZoomOptions, zoomFor } from "./retrieval.js";
import {
  admitTurnSchema,
  assembleSchema,
  type IngestEvent,
  ingestEventSchema,
  issuesOf,
  listRecordsOptionsSchema,
  MAX_PAYLOAD_BYTES,
  type OpenSessionInput,
  opaqueId,
  openSessionSchema,
  outcomeSchema,
  parseInput,
  readPayloadOptionsSchema,
  recordRefSchema,
  searchSchema,
  sessionsOptionsSchema,
  settleOptionsSchema,
  turnContextSchema,
  type ValidIngestEvent,
  viewOptionsSchema,
  zoomOptionsSchema,
} from "./schemas.js";
import { type SearchAnswer, type SearchOptions, searchFor } from "./shared.js";
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

export type IngestResult =
  | SealOutcome
  | { readonly status: StageOutcome; readonly eventKey: string; readonly sessionId: string };

export interface RecordRef {
  readonly sessionId: string;
  readonly generation: number;
  readonly seq: number;
}

export interface PayloadPage {
  readonly ref: RecordRef;
  readonly offset: number;
  /** The exact stored bytes of this page. */
  readonly bytes: Buffer;
  /** The page as text; invalid UTF-8 sequences appear as U+FFFD (see `validUtf8`). */
  readonly text: string;
  readonly totalBytes: number;
  readonly validUtf8: boolean;
  /** Cursor of the next page; null on the last page. */
  readonly nextCursor: string | null;
  /** True when this page reaches the end of the payload. */
  readonly complete: boolean;
  /** The host had already cut the output before we saw it: the full original cannot be recovered. */
  readonly hostTruncated: boolean;
  readonly hostOriginalBytes: number | null;
}

export interface IngestOptions {
  readonly beforeCommit?: () => Promise<void>;
  /**
   * Build the leaves that need no model call (short messages, seed 002 §3 free nodes) in the ingest transaction, so
   * the next request need not wait for a compactor job hop (~100 ms each). For a host's per-message ingestion; bulk
   * imports leave it off (measured: batches of 100 fell from ~5,000 to ~300 records/s with it).
   */
  readonly buildFreeInline?: boolean;
}

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
  admitTurn(input: { sessionId: string; turnId: string; query?: string; publishes?: boolean }): Promise<Turn>;
  /** Records the turn's outcome once and schedules its publication in the same transaction. */
  finishTurn(ctx: TurnContext, outcome: TurnOutcome): Promise<{ turn: Turn; finished: boolean }>;
  getTurn(ctx: TurnContext): Promise<Turn>;
  /** The memory blocks for one model request of the turn, within the budget (seed 000 §7). */
  assembleContext(ctx: TurnContext, options: AssembleOptions): Promise<AssembledContext>;
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
  /** Every audit (publication integrity, snapshot visibility, view coverage, reachability). */
  audit(): Promise<AuditReport>;
  close(): Promise<void>;
}

/** Number of migration files this code expects to be applied. */
export function expectedSchemaVersion(): number {
  return readdirSync(MIGRATIONS_DIRECTORY).filter((name) => /^\d+[-_].*\.sql$/.test(name)).length;
}

/**
 * Opens the memory service: a pool, after checking that the database is reachable and migrated. Fails with
 * DATABASE_UNAVAILABLE or SCHEMA_OUT_OF_DATE (naming the fix) instead of failing later inside a query.
 */
export async function openMemory(
  config: Config,
  options: { applicationName?: string; readOnly?: boolean } = {},
): Promise<Memory> {
  const pool = openPool(config, options.applicationName ?? "optchat", options.readOnly ?? false);
  try {
    // Not retried: a server that is down when a program starts is reported at once (the CLI should not hang).
    const version = await readSchemaVersion(pool);
    const expected = expectedSchemaVersion();
    if (version < expected) {
      throw new OptchatError(
        "SCHEMA_OUT_OF_DATE",
        `The optchat schema in ${new URL(config.databaseUrl).pathname.slice(1)} is at version ${version}, this code needs ${expected}: run \`optchat migrate\``,
        { version, expected },
      );
    }
    if (!(await jobQueueInstalled(pool))) {
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
  const boss = createBoss(config.databaseUrl, "producer");
  boss.on("error", () => {}); // producer errors surface from the calls that hit them
  // A read-only service never enqueues, so its job queue is not started (starting one opens connections that may write).
  if (options.readOnly) return createMemory(pool, boss, config);
  try {
    await boss.start();
  } catch (error) {
    await pool.end().catch(() => {});
    throw databaseUnavailable(config.databaseUrl, error);
  }
  return createMemory(pool, boss, config);
}

/** The service over an open pool and job queue; every call goes through the retry helper (guard.ts). */
export function createMemory(pool: Pool, boss: PgBoss, config: Config): Memory {
  return guardMemory(createUnguardedMemory(pool, boss, config), {
    databaseUrl: config.databaseUrl,
    unavailableRetryMs: config.databaseRetryMs,
  });
}

function createUnguardedMemory(pool: Pool, boss: PgBoss, config: Config): Memory {
  const fold: FoldParams = { upperBytes: config.viewBytes, lowerBytes: config.viewLowerBytes };
  const listener = new TreeListener(config.databaseUrl, TREE_CHANNEL);

  async function getSession(sessionId: string): Promise<Session> {
    const id = parseInput(recordRefSchema.shape.sessionId, sessionId, "getSession", "sessionId");
    const session = await findSession(pool, id);
    if (!session)
      throw new OptchatError("SESSION_NOT_FOUND", `No session ${id}`, { field: "sessionId", sessionId: id });
    return session;
  }

  async function ingestMany(
    events: readonly IngestEvent[],
    where = "ingestMany",
    options: IngestOptions = {},
  ): Promise<IngestResult[]> {
    if (!Array.isArray(events)) throw new InputInvalidError(where, [{ field: "events", problem: "must be an array" }]);
    const issues: FieldIssue[] = [];
    const valid: ValidIngestEvent[] = [];
    const prepared: RecordToSeal[] = [];
    for (const [index, event] of events.entries()) {
      const prefix = where === "ingest" ? "" : `events[${index}]`;
      const parsed = ingestEventSchema.safeParse(event);
      if (!parsed.success) {
        issues.push(...issuesOf(parsed.error, prefix));
        continue;
      }
      valid.push(parsed.data);
      prepared.push(await prepareRecord(parsed.data, prefix ? `${prefix}.` : "", issues));
    }
    if (issues.length > 0) throw new InputInvalidError(where, issues);

    return await retryOnTwinInsert(() =>
      withTransaction(pool, async (client) => {
        const results: (IngestResult | undefined)[] = new Array(prepared.length);
        const finals: { index: number; record: RecordToSeal }[] = [];
        for (const [index, item] of prepared.entries()) {
          const event = valid[index] as ValidIngestEvent;
          if (event.final) {
            finals.push({ index, record: item });
          } else {
            const status = await stageItem(client, {
              stageKey: item.stageKey,
              sessionId: item.sessionId,
              generation: item.generation,
              turnId: item.turnId,
              kind: item.kind,
              revision: event.finalization.revision,
              payload: item.payload,
            });
            results[index] = { status, eventKey: item.eventKey, sessionId: item.sessionId };
          }
        }
        if (finals.length > 0) {
          // Sealed records become leaves of their generation's tree in the same transaction: the view folds and the
          // leaf jobs that became ready are enqueued (seed 000 §10: sealing a record schedules its leaf).
          const sealed = await sealAndAppend(
            client,
            finals.map((f) => f.record),
            fold,
            { buildFreeInline: options.buildFreeInline ?? false },
          );
          finals.forEach((f, n) => {
            results[f.index] = sealed.outcomes[n];
          });
          for (const { treeId, nodes } of sealed.ready) await enqueueNodeJobs(boss, client, treeId, nodes);
        }
        await options.beforeCommit?.();
        return results as IngestResult[];
      }),
    );
  }

  async function ingest(event: IngestEvent): Promise<IngestResult> {
    const [result] = await ingestMany([event], "ingest");
    if (!result) throw new Error("ingest: no result");
    if (result.status === "conflict") {
      throw new OptchatError(
        "INGEST_CONFLICT",
        `ingest: finalization ${result.eventKey} is already sealed as ${result.sessionId}:${result.generation}:${result.seq} with different content; the sealed record is unchanged and the conflict is recorded (#${result.conflictId}). A host rewrite must use a new revision.`,
        { ...result },
      );
    }
    return result;
  }

  async function treeOf(sessionId: string) {
    const session = await getSession(sessionId);
    return await sessionTreeOrThrow(pool, session.sessionId, session.currentGeneration);
  }

  const shared = { pool, boss, listener, config, pinnedNodes: new PinnedNodeCache() };
  // A turn or scope reader the caller holds is taken as it is; a turn named by its IDs is validated.
  const reader = (ctx: ReadAs, where: string): ReadAs =>
    isTurn(ctx) || isScopeReader(ctx) ? ctx : parseInput(turnContextSchema, ctx, where);
  const memory: Memory = {
    pool,
    host: createHostSupport(pool),
    getSession,
    ingest,
    ingestMany: (events, options) => ingestMany(events, "ingestMany", options),

    async openSession(input) {
      const valid = parseInput(openSessionSchema, input, "openSession");
      // Scope (seed 000 §11): the project by default; an explicit profile scope shares several projects; an isolated
      // session gets a scope of its own, with no shared tree: it neither publishes nor reads shared memory.
      const sessionId = sessionIdFromRandom(randomBytes(16));
      const kind = valid.sharing === "isolated" ? "isolated" : valid.scopeId !== undefined ? "profile" : "project";
      const scopeId = kind === "isolated" ? `isolated:${sessionId}` : (valid.scopeId ?? `project:${valid.projectId}`);
      // A known session is returned as it is (no scope is created for it again: an isolated one would leak a scope).
      const known = await findSessionByHost(pool, valid.host, valid.hostSessionId);
      if (known) return known;
      return await withTransaction(pool, async (client) => {
        await ensureScope(client, scopeId, kind);
        const { session } = await registerSession(client, {
          sessionId,
          scopeId,
          host: valid.host,
          hostSessionId: valid.hostSessionId,
          projectId: valid.projectId ?? null,
          parentSessionId: valid.parentSessionId ?? null,
          title: valid.title ?? null,
        });
        return session;
      });
    },

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

    async readPayload(ref, options = {}) {
      const validRef = parseInput(recordRefSchema, ref, "readPayload", "ref");
      const validOptions = parseInput(readPayloadOptionsSchema, options, "readPayload");
      const record = await findRecord(pool, validRef.sessionId, validRef.generation, validRef.seq);
      if (!record) {
        throw new OptchatError(
          "REF_NOT_FOUND",
          `readPayload: no record ${validRef.sessionId}:${validRef.generation}:${validRef.seq}`,
          {
            ref: validRef,
          },
        );
      }
      const hashPrefix = hashPrefixOf(record.payloadHash);
      let offset = 0;
      if (validOptions.cursor !== undefined) {
        const cursor = decodePayloadCursor(validOptions.cursor);
        if (!cursor || cursor.hashPrefix !== hashPrefix || cursor.offset > record.payloadBytes) {
          throw new InputInvalidError("readPayload", [
            { field: "cursor", problem: "is not a cursor of this payload (use nextCursor from the previous page)" },
          ]);
        }
        offset = cursor.offset;
      }
      const chunk = await readPayloadBytes(pool, record.payloadHash, offset, validOptions.maxBytes);
      const reachesEnd = offset + chunk.length >= record.payloadBytes;
      // Valid UTF-8 pages end on code point boundaries so each page decodes on its own; binary pages cut anywhere.
      const length = record.validUtf8 ? utf8SafePrefixLength(chunk, reachesEnd) : chunk.length;
      const bytes = chunk.subarray(0, length);
      const end = offset + length;
      return {
        ref: validRef,
        offset,
        bytes,
        text: bytes.toString("utf8"),
        totalBytes: record.payloadBytes,
        validUtf8: record.validUtf8,
        nextCursor: end < record.payloadBytes ? encodePayloadCursor({ hashPrefix, offset: end }) : null,
        complete: end >= record.payloadBytes,
        hostTruncated: record.hostTruncated,
        hostOriginalBytes: record.hostOriginalBytes,
      };
    },

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
    getTurn: (ctx) => turnOrThrow(pool, parseInput(turnContextSchema, ctx, "getTurn")),
    assembleContext: async (ctx, options) => {
      const valid = parseInput(turnContextSchema, ctx, "assembleContext");
      const validOptions = parseInput(assembleSchema, options, "assembleContext");
      return await assembleContext(shared, await turnOrThrow(pool, valid), validOptions);
    },
    previewContext: async (sessionId, options) =>
      assembleContext(shared, await nextTurnOf(pool, await getSession(sessionId)), {
        ...parseInput(assembleSchema, options, "previewContext"),
        readiness: "partial",
        waitMs: 0,
      }),
    readScope: (scopeId) => scopeReader(pool, parseInput(opaqueId, scopeId, "readScope", "scope")),
    audit: () => auditAll(pool),
    zoom: (ctx, ref, options = {}) =>
      zoomFor(
        shared,
        reader(ctx, "zoom"),
        parseInput(z.string().max(300), ref, "zoom", "ref"),
        parseInput(zoomOptionsSchema, options, "zoom"),
        (page, cursor, maxBytes) => memory.readPayload(page, { maxBytes, ...(cursor ? { cursor } : {}) }),
      ),
    search: (ctx, options) => searchFor(shared, reader(ctx, "search"), parseInput(searchSchema, options, "search")),
    date: (ctx, ref) => dateFor(shared, reader(ctx, "date"), parseInput(z.string().max(300), ref, "date", "ref")),
    sessions: (ctx, options = {}) =>
      sessionsFor(shared, reader(ctx, "sessions"), parseInput(sessionsOptionsSchema, options, "sessions")),

    async close() {
      await listener.close();
      await boss.stop({ graceful: false, close: true }).catch(() => {});
      await pool.end();
    },
  };
  return memory;
}

async function prepareRecord(event: ValidIngestEvent, prefix: string, issues: FieldIssue[]): Promise<RecordToSeal> {
  const content = event.content as string | Uint8Array;
  // A string has at least one UTF-8 byte per code unit: one longer than the limit is refused without encoding it.
  const surelyTooLarge = content.length > MAX_PAYLOAD_BYTES;
  const prepared = await preparePayload(surelyTooLarge ? "" : content, event.toolName);
  const bytes = surelyTooLarge ? content.length : prepared.payload.length;
  if (surelyTooLarge || bytes > MAX_PAYLOAD_BYTES) {
    issues.push({
      field: `${prefix}content`,
      problem: `is ${surelyTooLarge && typeof content === "string" ? "at least " : ""}${bytes} bytes, above the ${MAX_PAYLOAD_BYTES}-byte limit; truncate it at the host and set hostTruncated`,
    });
  }
  const attributes: Record<string, unknown> = { ...(event.attributes ?? {}) };
  if (prepared.loneSurrogatesReplaced > 0) attributes.loneSurrogatesReplaced = prepared.loneSurrogatesReplaced;
  return {
    sessionId: event.sessionId,
    generation: event.generation,
    eventKey: eventKeyOf(event.finalization),
    stageKey: stageKeyOf(event.finalization),
    turnId: event.turnId,
    kind: event.kind,
    occurredAt: typeof event.occurredAt === "string" ? new Date(event.occurredAt) : event.occurredAt,
    payload: prepared.payload,
    payloadHash: prepared.payloadHash,
    validUtf8: prepared.validUtf8,
    toolCallId: event.toolCallId ?? null,
    toolName: event.toolName ?? null,
    hostTruncated: event.hostTruncated !== undefined,
    hostOriginalBytes: event.hostTruncated?.originalBytes ?? null,
    projectId: event.projectId ?? null,
    worktreeId: event.worktreeId ?? null,
    commitId: event.commit ?? null,
    attributes,
    search: prepared.search,
  };
}

/**
 * Two writers can deliver the same finalization key to different sessions' locks at the same moment; the loser gets
 * unique_violation on records.event_key. Running the transaction again then sees the winner's record and reports a
 * duplicate or a conflict, as a sequential delivery would.
 */
async function retryOnTwinInsert<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (sqlStateOf(error) === "23505" && (error as { constraint?: string }).constraint === "records_event_key_key")
      return await run();
    throw error;
  }
}
