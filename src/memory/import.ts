/**
 * Import of recorded sessions from a JSONL file (docs/import.md): one JSON object per line, each a `session`
 * declaration or one whole `turn` with its records. Every turn goes through the same calls as live traffic
 * (admitTurn, ingestMany, finishTurn), so it is summarized and published exactly like one, and importing the same file
 * again changes nothing: sessions are found by (host "import", id), records by their finalization key, turns by
 * (session, turn id), and a finished turn is never finished (nor published) twice.
 */
import { InputInvalidError, OptchatError } from "../core/errors.js";
import type { Session } from "../store/sessions.js";
import type { TurnOutcome } from "../store/turns.js";
import {
  ImportLineChecker,
  ImportLineError,
  type ImportSessionLine,
  type ImportTurnLine,
  payloadOf,
} from "./import-format.js";
import type { IngestEvent } from "./schemas.js";
import type { IngestResult, Memory } from "./service.js";

export {
  checkJsonl,
  type ImportCheck,
  type ImportLine,
  ImportLineError,
  type ImportRecord,
  type ImportSessionLine,
  type ImportTurnLine,
} from "./import-format.js";

/** The host name every imported session is registered under (its `id` is the host session ID). */
export const IMPORT_HOST = "import";

/** Records sent to one ingestMany call (one transaction); a longer turn is ingested in several batches. */
export const DEFAULT_BATCH_SIZE = 500;

/** A batch is also cut once its payloads reach this many bytes, so a turn of huge tool outputs stays bounded. */
const BATCH_BYTES = 16 * 1024 * 1024;

/** admitTurn keeps at most this much of the first user message as the turn's query. */
const MAX_QUERY_CHARS = 100_000;

/** Non-fatal problems listed in the summary; more are only counted. */
const MAX_LISTED_PROBLEMS = 100;

export interface ImportProgress {
  /** Lines processed so far, blank ones included. */
  readonly lines: number;
  readonly sessions: number;
  readonly turns: number;
  readonly records: number;
  readonly seconds: number;
}

/** Something that did not stop the import but did not land as the file says (listed in the summary). */
export interface ImportProblem {
  readonly line: number;
  readonly field: string;
  readonly problem: string;
}

/** What became of the records an import sent. */
export interface RecordTally {
  readonly total: number;
  /** Newly stored by this run. */
  readonly sealed: number;
  /** Already stored with the same content (a re-import): nothing changed. */
  readonly duplicates: number;
  /** Already stored under the same session and ID with other content: the stored record is kept. */
  readonly conflicts: number;
}

export interface ImportSummary {
  /** Lines read, blank ones included. */
  readonly lines: number;
  /** Session lines (each opened: registered on first import, found again on later ones). */
  readonly sessions: number;
  readonly turns: {
    /** Turn lines. */
    readonly total: number;
    /** Turns this run finished (each scheduled its publication, unless its session does not publish). */
    readonly finished: number;
    /** Turns that were already finished by an earlier import: nothing was scheduled again. */
    readonly alreadyFinished: number;
    /** Publications scheduled by this run (the compactor worker publishes them). */
    readonly publicationsScheduled: number;
  };
  readonly records: RecordTally;
  /** Problems that did not stop the import (conflicts, a different outcome than the stored one). */
  readonly errors: number;
  /** The first problems, in file order. */
  readonly problems: readonly ImportProblem[];
  readonly seconds: number;
}

export interface ImportOptions {
  /** Called after every line. */
  readonly onProgress?: (progress: ImportProgress) => void;
  /** Records per ingestMany call (one transaction); default 500. */
  readonly batchSize?: number;
}

/**
 * Imports JSONL lines in order (format: docs/import.md). Each line is validated before anything of it is written; the
 * first invalid line stops the import with ImportLineError (INPUT_INVALID, naming the line and fields), leaving the
 * lines before it imported. Since every step is idempotent, running the fixed file again completes the import without
 * duplicating anything. Use `checkJsonl` first to refuse an invalid file before importing any of it.
 */
export async function importJsonl(
  memory: Memory,
  lines: AsyncIterable<string> | Iterable<string>,
  options: ImportOptions = {},
): Promise<ImportSummary> {
  const batchSize = options.batchSize ?? DEFAULT_BATCH_SIZE;
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000) {
    throw new InputInvalidError("importJsonl", [{ field: "batchSize", problem: "must be an integer from 1 to 10000" }]);
  }
  const started = performance.now();
  const seconds = () => Math.round(performance.now() - started) / 1000;
  const checker = new ImportLineChecker();
  const sessions = new Map<string, Session>();
  const problems: ImportProblem[] = [];
  const counts = newCounts();
  const problem = (entry: ImportProblem) => {
    counts.errors += 1;
    if (problems.length < MAX_LISTED_PROBLEMS) problems.push(entry);
  };

  for await (const text of lines) {
    counts.lines += 1;
    const lineNumber = counts.lines;
    const line = checker.check(lineNumber, text);
    await onLine(lineNumber, async () => {
      if (line?.type === "session") {
        sessions.set(line.id, await importSession(memory, line, sessions));
        counts.sessions += 1;
      } else if (line?.type === "turn") {
        const session = sessions.get(line.session) as Session; // the checker saw its declaration
        await importTurn(memory, session, line, lineNumber, batchSize, counts, problem);
        counts.turns += 1;
        counts.records += line.records.length;
      }
    });
    options.onProgress?.({
      lines: counts.lines,
      sessions: counts.sessions,
      turns: counts.turns,
      records: counts.records,
      seconds: seconds(),
    });
  }

  return summaryOf(counts, problems, seconds());
}

/** What an import counts as it goes. */
type ImportCounts = ReturnType<typeof newCounts>;

function newCounts() {
  return {
    lines: 0,
    sessions: 0,
    turns: 0,
    finished: 0,
    alreadyFinished: 0,
    publicationsScheduled: 0,
    records: 0,
    sealed: 0,
    duplicates: 0,
    conflicts: 0,
    errors: 0,
  };
}

/** The import's summary from its counts. */
function summaryOf(counts: ImportCounts, problems: ImportProblem[], seconds: number): ImportSummary {
  return {
    lines: counts.lines,
    sessions: counts.sessions,
    turns: {
      total: counts.turns,
      finished: counts.finished,
      alreadyFinished: counts.alreadyFinished,
      publicationsScheduled: counts.publicationsScheduled,
    },
    records: {
      total: counts.records,
      sealed: counts.sealed,
      duplicates: counts.duplicates,
      conflicts: counts.conflicts,
    },
    errors: counts.errors,
    problems,
    seconds,
  };
}

/** A session line: the session opened (with its parent, declared earlier in the file), as the file names it. */
async function importSession(
  memory: Memory,
  line: ImportSessionLine,
  sessions: ReadonlyMap<string, Session>,
): Promise<Session> {
  const parent = line.parent === undefined ? undefined : sessions.get(line.parent);
  return await memory.openSession({
    host: line.host ?? IMPORT_HOST,
    hostSessionId: line.id,
    projectId: line.project,
    ...(line.title !== undefined ? { title: line.title } : {}),
    ...(line.sharing !== undefined ? { sharing: line.sharing } : {}),
    ...(line.scope !== undefined ? { scopeId: line.scope } : {}),
    ...(parent ? { parentSessionId: parent.sessionId } : {}),
  });
}

/**
 * Runs the service calls of one line. A refusal the line check did not foresee (it should foresee every one) still
 * names its line; so does an unexpected error. DATABASE_UNAVAILABLE and the like pass unchanged: they are not the
 * file's fault, and running the import again continues it.
 */
async function onLine(lineNumber: number, work: () => Promise<void>): Promise<void> {
  try {
    await work();
  } catch (error) {
    if (error instanceof InputInvalidError && !(error instanceof ImportLineError)) {
      throw new ImportLineError(
        lineNumber,
        error.issues.map((issue) => ({
          field: issue.field,
          problem: `${issue.problem} (refused by ${String(error.details.where)})`,
        })),
      );
    }
    if (error instanceof OptchatError) throw error;
    throw new Error(`import line ${lineNumber}: ${error instanceof Error ? error.message : String(error)}`, {
      cause: error,
    });
  }
}

/** One turn, as live traffic runs it: admitted (pinning its snapshot), its records ingested, finished. */
async function importTurn(
  memory: Memory,
  session: Session,
  line: ImportTurnLine,
  lineNumber: number,
  batchSize: number,
  counts: {
    finished: number;
    alreadyFinished: number;
    publicationsScheduled: number;
    sealed: number;
    duplicates: number;
    conflicts: number;
  },
  problem: (entry: ImportProblem) => void,
): Promise<void> {
  const ctx = { sessionId: session.sessionId, turnId: line.id };
  const firstUser = line.records.find((record) => record.kind === "user");
  const query = firstUser ? (firstUser.text ?? payloadOf(firstUser).toString("utf8")) : undefined;
  await memory.admitTurn({
    ...ctx,
    ...(query !== undefined ? { query: truncateQuery(query) } : {}),
  });

  const events: IngestEvent[] = line.records.map((record) => ({
    sessionId: session.sessionId,
    turnId: line.id,
    kind: record.kind,
    finalization:
      session.host === IMPORT_HOST
        ? { hostSessionId: session.hostSessionId, messageId: record.id }
        : hostFinalization(session.hostSessionId, record.id),
    occurredAt: record.at,
    content: record.text ?? payloadOf(record),
    ...(record.toolCallId !== undefined ? { toolCallId: record.toolCallId } : {}),
    ...(record.toolName !== undefined ? { toolName: record.toolName } : {}),
    ...(record.hostTruncated
      ? { hostTruncated: record.hostOriginalBytes !== undefined ? { originalBytes: record.hostOriginalBytes } : {} }
      : {}),
    ...(session.projectId !== null ? { projectId: session.projectId } : {}),
  }));
  let start = 0;
  while (start < events.length) {
    const end = batchEnd(events, start, batchSize, BATCH_BYTES);
    const results = await memory.ingestMany(events.slice(start, end));
    results.forEach((result, offset) => {
      const index = start + offset;
      tally(result, session, line, index, lineNumber, counts, problem);
    });
    start = end;
  }

  const { turn, finished } = await memory.finishTurn(ctx, line.outcome as TurnOutcome);
  if (finished) {
    counts.finished += 1;
    if (turn.publishes) counts.publicationsScheduled += 1;
  } else {
    counts.alreadyFinished += 1;
    if (turn.state !== line.outcome) {
      problem({
        line: lineNumber,
        field: "outcome",
        problem: `turn ${line.id} is already stored as ${turn.state}; the first outcome is kept`,
      });
    }
  }
}

/**
 * Where the batch starting at `start` ends (exclusive): at most `batchSize` events, and cut once their payloads reach
 * `maxBytes` UTF-8 bytes (a string's length counts UTF-16 code units, a third of the bytes of CJK text). A batch holds
 * at least one event, however large.
 */
export function batchEnd(
  events: readonly Pick<IngestEvent, "content">[],
  start: number,
  batchSize: number,
  maxBytes: number,
): number {
  let end = start;
  let bytes = 0;
  while (end < events.length && end - start < batchSize && (end === start || bytes < maxBytes)) {
    const content = (events[end] as Pick<IngestEvent, "content">).content;
    bytes += typeof content === "string" ? Buffer.byteLength(content, "utf8") : content.length;
    end += 1;
  }
  return end;
}

function tally(
  result: IngestResult,
  session: Session,
  line: ImportTurnLine,
  index: number,
  lineNumber: number,
  counts: { sealed: number; duplicates: number; conflicts: number },
  problem: (entry: ImportProblem) => void,
): void {
  const id = line.records[index]?.id;
  const field = `records[${index}].id`;
  if (result.status === "sealed") counts.sealed += 1;
  else if (result.status === "duplicate") {
    counts.duplicates += 1;
    if (result.sessionId !== session.sessionId) {
      problem({
        line: lineNumber,
        field,
        problem: `record ${id} is already stored in another session (${result.sessionId}) under the same host session and message IDs; it was not stored again`,
      });
    }
  } else if (result.status === "conflict") {
    counts.conflicts += 1;
    problem({
      line: lineNumber,
      field,
      problem: `record ${id} is already stored with different content (conflict #${result.conflictId}); the stored record is unchanged`,
    });
  } else {
    // Imported records are always final; a staged outcome would mean the service changed under us.
    throw new Error(`import line ${lineNumber}: record ${id} was ${result.status}, not sealed`);
  }
}

/** A record's payload as bytes: its text in UTF-8, or its base64 `bytes` decoded. */

function truncateQuery(text: string): string {
  if (text.length <= MAX_QUERY_CHARS) return text;
  const cut = text.slice(0, MAX_QUERY_CHARS);
  // Do not end on half a surrogate pair.
  return /[\uD800-\uDBFF]$/.test(cut) ? cut.slice(0, -1) : cut;
}

/**
 * A host's finalization key from an exported record id, `message[/part][#revision]` (src/memory/export.ts
 * importRecord): the key the host itself recorded it under, so that its own later deliveries are duplicates.
 */
export function hostFinalization(
  hostSessionId: string,
  recordId: string,
): { hostSessionId: string; messageId: string; partId?: string; revision?: number } {
  const revisionMatch = /#(\d{1,9})$/.exec(recordId);
  const rest = revisionMatch ? recordId.slice(0, revisionMatch.index) : recordId;
  const slash = rest.indexOf("/");
  return {
    hostSessionId,
    messageId: slash < 0 ? rest : rest.slice(0, slash),
    ...(slash < 0 ? {} : { partId: rest.slice(slash + 1) }),
    ...(revisionMatch ? { revision: Number(revisionMatch[1]) } : {}),
  };
}
