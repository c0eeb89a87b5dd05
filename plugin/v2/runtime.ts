/**
 * What the V2 host's parts share: the memory service (opened once, in the background, with the compactor worker in
 * the same process), the sessions V2 drove through this plugin instance, each with its ordered job queue, and the
 * problem report (hooks never throw: a throw inside a V2 hook can end the person's turn).
 */
import {
  isOptchatError,
  type Memory,
  openMemory,
  type Summarizer,
  startWorker,
  type Turn,
} from "../../src/memory/index.js";
import { type ResolvedPluginConfig, resolvePluginConfig } from "../base/config.js";
import { projectScopeId } from "../base/identity.js";
import { compactorModel } from "../opencode/compactor-model.js";
import { v2ConfigSource } from "./compactor-source.js";
import type { V2Layout } from "./layout.js";
import { copiedEvents, lineageOf } from "./lineage.js";
import type { V2Context } from "./v2-api.js";
import { modelWindows } from "./window.js";

/** Host name of V2 sessions in optchat (V1's are "opencode"): the two lines keep their own session ids. */
export const V2_HOST = "opencode-v2";

/** How often the finalizer looks whether this process's finished turns are published. */
const PUBLICATION_POLL_MS = 100;
/** How long the finalizer lets events already published arrive before it flushes. */
const CLOSE_GRACE_MS = 300;

export interface SessionEntry {
  sessionId: string;
  /** The session's generation in memory (the V2 host makes no rewinds, so the one it was opened with). */
  generation: number;
  turn: Turn | undefined;
  /** Which user messages the memory leads, with what (layout.ts); kept for the process's life. */
  layout: V2Layout | undefined;
  /** Ingestion and outcomes of this session, in order. */
  queue: Promise<void>;
}

/** What memory_inspect says of this process (plugin/tools/backend.ts `AdapterStatus`). */
export interface V2Health {
  readonly startedAt: Date;
  problems: number;
  lastProblem: string | undefined;
  workerError: string | undefined;
}

export interface V2Runtime {
  readonly config: ResolvedPluginConfig;
  readonly health: V2Health;
  /** The window of the request's model: V2's `limit.context`, else `OPTCHAT_V2_WINDOW_TOKENS` (default 128000). */
  windowTokens(model: { id: string; providerID: string }): Promise<number>;
  /** The memory service, opened at the first call (a failed open is tried again at the next). */
  memory(): Promise<Memory>;
  /** The session V2 knows as `hostSessionId`, opened in memory at its first use. */
  entryOf(hostSessionId: string): Promise<SessionEntry>;
  /** A session already opened by this instance. */
  known(hostSessionId: string): SessionEntry | undefined;
  /** The model V2's requests use (the `context` hook's): the compactor's `auto` model is chosen from it. */
  noteModel(model: { id: string; providerID: string }): void;
  /** Runs `job` after the session's earlier jobs; a failure is reported, never thrown. */
  enqueue(entry: SessionEntry, where: string, job: () => Promise<unknown>): Promise<void>;
  report(where: string, error: unknown): void;
  /** V2's finalizer: late events, a bounded flush, then the worker and the memory service closed. */
  close(): Promise<void>;
}

export function createV2Runtime(ctx: V2Context, env: NodeJS.ProcessEnv = process.env): V2Runtime {
  const config = resolvePluginConfig(ctx.options, env);
  const directory = ctx.location?.directory ?? process.cwd();
  const scopeId = projectScopeId({
    id: ctx.location?.project?.id ?? "global",
    worktree: ctx.location?.project?.directory ?? directory,
    directory,
  });
  const health: V2Health = { startedAt: new Date(), problems: 0, lastProblem: undefined, workerError: undefined };
  const report = (where: string, error: unknown) => {
    const code = isOptchatError(error) ? `${error.code}: ` : "";
    const text = `${where}: ${code}${error instanceof Error ? error.message : String(error)}`;
    health.problems += 1;
    health.lastProblem = text;
    if (where === "compactor worker") health.workerError = text;
    if (env.OPTCHAT_V2_DEBUG) process.stderr.write(`optchat (OpenCode V2): ${text}\n`);
  };
  const compactor = v2Compactor(ctx, config, env, report);
  const opener = memoryOpener(config, report, compactor.summarizer);
  const sessions = new Map<string, SessionEntry>();
  return {
    config,
    health,
    windowTokens: modelWindows(ctx, env, report),
    memory: opener.memory,
    noteModel: compactor.noteModel,
    report,
    known: (hostSessionId) => sessions.get(hostSessionId),
    async entryOf(hostSessionId) {
      const known = sessions.get(hostSessionId);
      if (known) return known;
      const memory = await opener.memory();
      const session = await openWithLineage(ctx, memory, { hostSessionId, scopeId }, report);
      // Another hook may have opened it while this one waited.
      const entry = sessions.get(hostSessionId) ?? {
        sessionId: session.sessionId,
        generation: session.currentGeneration,
        turn: undefined,
        layout: undefined,
        queue: Promise.resolve(),
      };
      sessions.set(hostSessionId, entry);
      return entry;
    },
    enqueue(entry, where, job) {
      entry.queue = entry.queue.then(job).then(
        () => undefined,
        (error) => report(where, error),
      );
      return entry.queue;
    },
    close: () => closeRuntime(config, opener, sessions),
  };
}

/** The compactor's summarizer: with `auto`, chosen from V2's providers once the first request names the main model. */
function v2Compactor(
  ctx: V2Context,
  config: ResolvedPluginConfig,
  env: NodeJS.ProcessEnv,
  report: (where: string, error: unknown) => void,
) {
  let noteModel: (model: { id: string; providerID: string }) => void = () => {};
  const mainModel = new Promise<{ id: string; providerID: string }>((resolve) => {
    noteModel = resolve;
  });
  const model = compactorModel(v2ConfigSource(ctx, mainModel, env), config.core, (level, message) => {
    if (level === "error") report("compactor model", new Error(message));
    else if (env.OPTCHAT_V2_DEBUG) process.stderr.write(`${message}\n`);
  });
  return { noteModel: (main: { id: string; providerID: string }) => noteModel(main), summarizer: model.summarizer };
}

/**
 * Opens the session in memory. The first time (no session yet): a subagent's with its parent (never published), a
 * fork's with its parent's history taken over (lineage.ts). Asking V2 fails soft: the session opens plain.
 */
async function openWithLineage(
  ctx: V2Context,
  memory: Memory,
  where: { hostSessionId: string; scopeId: string },
  report: (where: string, error: unknown) => void,
) {
  const known = await memory.host.findSession(V2_HOST, where.hostSessionId);
  if (known) return known;
  const lineage = await lineageOf(ctx, where.hostSessionId).catch((error) => {
    report("reading the session's parent or fork", error);
    return { copies: [] } as Awaited<ReturnType<typeof lineageOf>>;
  });
  const parent = lineage.parentHostSessionId
    ? await memory.host.findSession(V2_HOST, lineage.parentHostSessionId)
    : undefined;
  const session = await memory.openSession({
    host: V2_HOST,
    hostSessionId: where.hostSessionId,
    scopeId: where.scopeId,
    ...(parent ? { parentSessionId: parent.sessionId } : {}),
  });
  if (lineage.copies.length > 0) {
    const copies = copiedEvents(session.sessionId, where.hostSessionId, lineage.copies, new Date());
    await memory
      .inheritHistory(session.sessionId, copies)
      .catch((error) => report("inheriting the fork's history", error));
  }
  return session;
}

/** The memory service and its compactor worker, opened once; closing stops the worker, then the service. */
function memoryOpener(
  config: ResolvedPluginConfig,
  report: (where: string, error: unknown) => void,
  summarizer: () => Promise<Summarizer>,
) {
  let memoryOpen: Promise<Memory> | undefined;
  let worker: Promise<{ stop(): Promise<unknown> } | undefined> | undefined;
  const memory = () => {
    memoryOpen ??= openMemory(config.core, { applicationName: `optchat-opencode-v2-${process.pid}` }).then(
      (opened) => {
        // The compactor works in this process too (V2's service is long-lived; a standalone run helps while it lasts).
        // With OPTCHAT_SUMMARIZER=auto its model comes from V2's providers once the first request names the main one.
        worker = startWorker(opened, config.core, () => {}, { summarizer }).catch((error) => {
          report("compactor worker", error);
          return undefined;
        });
        return opened;
      },
      (error) => {
        memoryOpen = undefined;
        throw error;
      },
    );
    return memoryOpen;
  };
  void memory().catch((error) => report("opening memory", error));
  const close = async () => {
    const running = await worker;
    await running?.stop().catch((error: unknown) => report("stopping the compactor worker", error));
    const opened = await memoryOpen?.catch(() => undefined);
    await opened?.close().catch((error: unknown) => report("closing memory", error));
  };
  return { memory, close };
}

/**
 * V2's finalizer: late events, a bounded flush of every session's queue, the publications of the turns finished here
 * (bounded), then the worker and the memory service closed.
 */
async function closeRuntime(
  config: ResolvedPluginConfig,
  opener: { memory(): Promise<Memory>; close(): Promise<void> },
  sessions: ReadonlyMap<string, SessionEntry>,
): Promise<void> {
  // Events published just before the scope closes (the turn's last text, its end) are still on their way.
  await delay(CLOSE_GRACE_MS);
  const flush = Promise.all([...sessions.values()].map((entry) => entry.queue));
  await Promise.race([flush, delay(config.plugin.closeFlushMs)]);
  // A standalone run's worker stops with its process, and the next process's turn sees only what was published
  // when it was admitted: the turns finished here are given the same bound to be published first.
  await Promise.race([publicationsOf(opener, sessions.values()), delay(config.plugin.closeFlushMs)]);
  await opener.close();
}

/** Resolves once no turn finished in this process waits for its publication (polled; the caller bounds it). */
async function publicationsOf(opener: { memory(): Promise<Memory> }, entries: Iterable<SessionEntry>): Promise<void> {
  const memory = await opener.memory().catch(() => undefined);
  const turns = [...entries].flatMap((entry) =>
    entry.turn ? [{ sessionId: entry.sessionId, turnId: entry.turn.turnId }] : [],
  );
  if (!memory || turns.length === 0) return;
  for (;;) {
    const states = await Promise.all(turns.map((turn) => memory.getTurn(turn).catch(() => undefined)));
    if (states.every((turn) => turn?.publicationState !== "pending" || turn.state === "active")) return;
    await delay(PUBLICATION_POLL_MS);
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
