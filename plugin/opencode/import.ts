/**
 * `optchat import --opencode`: the user's existing OpenCode 1.18.33 sessions, read from OpenCode's own storage
 * (plugin/opencode/storage.ts), recorded as the plugin would have recorded them live: the same session registration
 * (host "opencode", OpenCode's session id, the project scope, the parent of a subagent), the same turns
 * (plugin/opencode/history.ts), the same records and finalization keys (plugin/opencode/messages.ts, plugin/opencode/record-events.ts). So a
 * second import, or the plugin later running the same session, finds every record already stored and duplicates
 * nothing; subagent sessions are recorded and not published (their turns do not publish).
 */
import { resolve, sep } from "node:path";
import type { Memory, RecordTally, Session } from "../../src/memory/index.js";
import { HOST, projectScopeId } from "../base/identity.js";
import { type HistoryTurn, type SessionHistory, sessionHistory } from "./history.js";
import { recordEvents } from "./record-events.js";
import type { OpencodeStorage, StoredSession } from "./storage.js";

/** Records per ingestMany call; a batch is also cut at BATCH_BYTES of content. */
const BATCH_RECORDS = 500;
const BATCH_BYTES = 16 * 1024 * 1024;
/** Skipped sessions listed by id in the summary; more are only counted. */
const MAX_LISTED = 100;

export interface OpencodeImportOptions {
  /** Only sessions run in this directory, or in the git project whose worktree it is. */
  readonly project?: string;
  /** Read and map everything, write nothing (no database needed). */
  readonly dryRun?: boolean;
  /** The plugin's scope setting (OPTCHAT_SCOPE): "project", "profile:<name>" or "isolated". */
  readonly scope: string;
  readonly onProgress?: (progress: OpencodeImportProgress) => void;
}

export interface OpencodeImportProgress {
  readonly sessions: number;
  readonly totalSessions: number;
  readonly records: number;
  readonly turns: number;
}

export type SkipReason =
  | "another project"
  | "nothing to store"
  | "a turn is running"
  | "recorded live out of order"
  | "parent not imported";

export interface OpencodeImportSummary {
  readonly databasePath: string;
  readonly dryRun: boolean;
  readonly sessions: {
    /** Sessions in OpenCode's storage. */
    readonly found: number;
    /** Sessions imported (recorded now, or found already complete). */
    readonly imported: number;
    /** Of those, subagent sessions (recorded, never published). */
    readonly subagents: number;
    /** Sessions not imported, by reason. */
    readonly skipped: Readonly<Record<SkipReason, number>>;
    /** The first skipped sessions with their reason. */
    readonly skippedSessions: readonly { readonly id: string; readonly reason: SkipReason; readonly detail: string }[];
  };
  readonly turns: {
    readonly total: number;
    readonly completed: number;
    readonly interrupted: number;
    readonly failed: number;
    /** Finished by this run (each publishes, unless its session is a subagent's or isolated). */
    readonly finished: number;
    /** Already finished (a previous import, or the plugin live): left as they were. */
    readonly alreadyFinished: number;
    /** Of those, stored with another outcome than the history shows; the stored one is kept. */
    readonly outcomeDiffers: number;
    readonly publicationsScheduled: number;
  };
  readonly records: RecordTally;
  /** OpenCode messages that hold no record (see SessionHistory.notStored). */
  readonly messagesNotStored: SessionHistory["notStored"];
  readonly seconds: number;
}

/** Imports every selected session of the storage into memory (nothing is written with dryRun; memory may be undefined). */
export async function importOpencodeSessions(
  memory: Memory | undefined,
  storage: OpencodeStorage,
  options: OpencodeImportOptions,
): Promise<OpencodeImportSummary> {
  const started = performance.now();
  const dryRun = options.dryRun === true || memory === undefined;
  const all = await storage.sessions();
  const project = options.project === undefined ? undefined : resolve(options.project);
  const chosen = all.filter((session) => project === undefined || inProject(session, project));
  const run = new ImportRun(dryRun ? undefined : memory, options.scope);
  for (const session of all) if (!chosen.includes(session)) run.skip(session, "another project", "");

  let done = 0;
  for await (const { session, messages } of storage.readMessages(chosen)) {
    await run.importSession(session, sessionHistory(messages));
    done += 1;
    options.onProgress?.({
      sessions: done,
      totalSessions: chosen.length,
      records: run.counts.records,
      turns: run.counts.turns,
    });
  }
  return run.summary(storage.databasePath, dryRun, all.length, Math.round(performance.now() - started) / 1000);
}

/** A session belongs to the project when it ran in that directory or below it, or in that git worktree. */
function inProject(session: StoredSession, project: string): boolean {
  const within = (dir: string) => dir === project || dir.startsWith(project.endsWith(sep) ? project : project + sep);
  return within(session.directory) || (session.worktree !== "/" && session.worktree === project);
}

class ImportRun {
  readonly counts = {
    imported: 0,
    subagents: 0,
    turns: 0,
    completed: 0,
    interrupted: 0,
    failed: 0,
    finished: 0,
    alreadyFinished: 0,
    outcomeDiffers: 0,
    publicationsScheduled: 0,
    records: 0,
    sealed: 0,
    duplicates: 0,
    conflicts: 0,
  };
  private readonly skipped: Record<SkipReason, number> = {
    "another project": 0,
    "nothing to store": 0,
    "a turn is running": 0,
    "recorded live out of order": 0,
    "parent not imported": 0,
  };
  private readonly skippedSessions: { id: string; reason: SkipReason; detail: string }[] = [];
  private readonly notStored = { unfinishedSteps: 0, hostMessages: 0, outsideTurns: 0 };
  /** OpenCode session id → optchat session (or a placeholder in a dry run), for subagents' parents. */
  private readonly opened = new Map<string, Session | "dry">();

  constructor(
    private readonly memory: Memory | undefined,
    private readonly scope: string,
  ) {}

  skip(session: StoredSession, reason: SkipReason, detail: string): void {
    this.skipped[reason] += 1;
    if (reason !== "another project" && this.skippedSessions.length < MAX_LISTED) {
      this.skippedSessions.push({ id: session.id, reason, detail });
    }
  }

  async importSession(stored: StoredSession, history: SessionHistory): Promise<void> {
    for (const [key, n] of Object.entries(history.notStored)) this.notStored[key as keyof typeof this.notStored] += n;
    if (history.turns.length === 0) {
      this.skip(stored, "nothing to store", `${stored.messages} message(s), none a prompt`);
      return;
    }
    const parent = stored.parentId ? await this.parentOf(stored.parentId) : undefined;
    if (stored.parentId && !parent) {
      this.skip(stored, "parent not imported", `its parent ${stored.parentId} is not in memory`);
      return;
    }
    const projectId = projectScopeId({ id: stored.projectId, worktree: stored.worktree, directory: stored.directory });
    if (!this.memory) {
      this.opened.set(stored.id, "dry");
      this.countSession(stored, history, true);
      return;
    }
    const session = await this.memory.openSession({
      host: HOST,
      hostSessionId: stored.id,
      projectId,
      ...(this.scope.startsWith("profile:") ? { scopeId: this.scope } : {}),
      ...(this.scope === "isolated" ? { sharing: "isolated" as const } : {}),
      ...(parent && parent !== "dry" ? { parentSessionId: parent.sessionId } : {}),
      ...(stored.title ? { title: stored.title.slice(0, 1000) } : {}),
    });
    const refusal = await this.refusal(session, history);
    if (refusal) {
      this.skip(stored, refusal.reason, refusal.detail);
      return;
    }
    this.opened.set(stored.id, session);
    for (const turn of history.turns) await this.importTurn(session, stored, projectId, turn);
    this.countSession(stored, history, false);
  }

  /** Why a session the plugin already holds must not be imported into, if it must not. */
  private async refusal(
    session: Session,
    history: SessionHistory,
  ): Promise<{ reason: SkipReason; detail: string } | undefined> {
    const memory = this.memory as Memory;
    const active = await memory.host.activeTurns(session.sessionId);
    if (active.length > 0) {
      return {
        reason: "a turn is running",
        detail: `turn ${active[0]?.turnId} is active (an OpenCode process may be driving it): import again once it ends`,
      };
    }
    // Records are appended in order: a message the plugin stored live after one it never saw (it was installed
    // mid-session) would put the older message after the newer one. Such a session keeps what the plugin stored.
    const stored = await memory.host.hostMessageSeqs(session.sessionId, session.currentGeneration);
    if (stored.size === 0) return undefined;
    let missing: string | undefined;
    for (const turn of history.turns) {
      for (const message of turn.messages) {
        if (message.drafts.length === 0) continue;
        if (!stored.has(message.messageId)) missing ??= message.messageId;
        else if (missing) {
          return {
            reason: "recorded live out of order",
            detail: `message ${message.messageId} is stored but the earlier ${missing} is not (the plugin started mid-session); the stored records are kept as they are`,
          };
        }
      }
    }
    return undefined;
  }

  private async parentOf(hostParentId: string): Promise<Session | "dry" | undefined> {
    const known = this.opened.get(hostParentId);
    if (known) return known;
    return await this.memory?.host.findSession(HOST, hostParentId);
  }

  private countSession(stored: StoredSession, history: SessionHistory, dryRun: boolean): void {
    this.counts.imported += 1;
    if (stored.parentId) this.counts.subagents += 1;
    for (const turn of history.turns) {
      this.counts.turns += 1;
      this.counts[turn.outcome] += 1;
      if (dryRun) this.counts.records += turn.messages.reduce((n, m) => n + m.drafts.length, 0);
    }
  }

  /** One turn as the plugin runs it: admitted (pinning its snapshot), its messages' records ingested, finished. */
  private async importTurn(session: Session, stored: StoredSession, projectId: string, turn: HistoryTurn) {
    const memory = this.memory as Memory;
    const ctx = { sessionId: session.sessionId, turnId: turn.turnId };
    await memory.admitTurn({ ...ctx, ...(turn.query ? { query: turn.query } : {}) });
    const events = turn.messages.flatMap((message) =>
      recordEvents(
        {
          sessionId: session.sessionId,
          hostSessionId: stored.id,
          turnId: turn.turnId,
          messageId: message.messageId,
          at: message.at,
          fallbackAt: stored.updatedAt,
          projectId,
        },
        message.drafts,
      ),
    );
    for (let start = 0; start < events.length; ) {
      let end = start;
      let bytes = 0;
      while (end < events.length && end - start < BATCH_RECORDS && (end === start || bytes < BATCH_BYTES)) {
        const content = events[end]?.content;
        bytes += typeof content === "string" ? Buffer.byteLength(content, "utf8") : (content?.length ?? 0);
        end += 1;
      }
      for (const result of await memory.ingestMany(events.slice(start, end))) {
        this.counts.records += 1;
        if (result.status === "sealed") this.counts.sealed += 1;
        else if (result.status === "duplicate") this.counts.duplicates += 1;
        else if (result.status === "conflict") this.counts.conflicts += 1;
      }
      start = end;
    }
    const { turn: stored_, finished } = await memory.finishTurn(ctx, turn.outcome);
    if (finished) {
      this.counts.finished += 1;
      if (stored_.publishes) this.counts.publicationsScheduled += 1;
    } else {
      this.counts.alreadyFinished += 1;
      if (stored_.state !== turn.outcome) this.counts.outcomeDiffers += 1;
    }
  }

  summary(databasePath: string, dryRun: boolean, found: number, seconds: number): OpencodeImportSummary {
    const c = this.counts;
    return {
      databasePath,
      dryRun,
      sessions: {
        found,
        imported: c.imported,
        subagents: c.subagents,
        skipped: { ...this.skipped },
        skippedSessions: this.skippedSessions,
      },
      turns: {
        total: c.turns,
        completed: c.completed,
        interrupted: c.interrupted,
        failed: c.failed,
        finished: c.finished,
        alreadyFinished: c.alreadyFinished,
        outcomeDiffers: c.outcomeDiffers,
        publicationsScheduled: c.publicationsScheduled,
      },
      records: { total: c.records, sealed: c.sealed, duplicates: c.duplicates, conflicts: c.conflicts },
      messagesNotStored: { ...this.notStored },
      seconds,
    };
  }
}
