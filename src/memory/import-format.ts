/**
 * The JSONL import format (docs/import.md), validated line by line: `session` declarations and whole `turn`s with their
 * records. `checkJsonl` (`optchat import --check`) and the import itself (import.ts) use the same checker, so the check
 * refuses exactly what the import would.
 */
import { z } from "zod";
import { type FieldIssue, InputInvalidError } from "../core/errors.js";
import { hostId, issuesOf, MAX_PAYLOAD_BYTES, opaqueId, RECORD_KINDS, safeCount, sessionTitle } from "./schemas.js";

// ---------------------------------------------------------------------------------------------------------------
// The format, validated line by line. Fields that reach a service call use the service's own schemas (hostId,
// sessionTitle, opaqueId from schemas.ts), so the check refuses exactly what the import would: a NUL in a title or
// an ID once passed the check and then failed the import halfway (issue 9).

const recordKind = z.string().superRefine((value, ctx) => {
  if ((RECORD_KINDS as readonly string[]).includes(value)) return;
  ctx.addIssue({
    code: z.ZodIssueCode.custom,
    message: /reason|thinking|thought/i.test(value)
      ? "hidden model reasoning is never stored; drop reasoning records before importing"
      : `must be one of ${RECORD_KINDS.join(", ")}`,
  });
}) as unknown as z.ZodType<(typeof RECORD_KINDS)[number]>;

const importRecordSchema = z
  .object({
    /** The host's message (or part) ID; unique within its session. */
    id: hostId,
    kind: recordKind,
    at: z.string().datetime({
      offset: true,
      message: "must be an ISO 8601 timestamp with a time zone, such as 2026-11-20T10:00:00Z",
    }),
    text: z.string({ invalid_type_error: "must be a string" }).optional(),
    /** The exact payload in base64, for one that is not valid UTF-8 (`optchat export` writes it); instead of text. */
    bytes: z
      .string({ invalid_type_error: "must be a base64 string" })
      .regex(/^[A-Za-z0-9+/]*={0,2}$/, "must be base64 (A-Z, a-z, 0-9, +, /, = padding)")
      .optional(),
    toolCallId: hostId.optional(),
    toolName: hostId.optional(),
    /** The host had already cut this output (and its original size, when known). */
    hostTruncated: z.boolean().optional(),
    hostOriginalBytes: safeCount.optional(),
  })
  .strict()
  .superRefine((record, ctx) => {
    if ((record.text === undefined) === (record.bytes === undefined)) {
      ctx.addIssue({
        code: z.ZodIssueCode.custom,
        path: [record.text === undefined ? "text" : "bytes"],
        message:
          record.text === undefined ? "is required (or bytes, in base64)" : "give either text or bytes, not both",
      });
    }
    if (record.hostOriginalBytes !== undefined && record.hostTruncated !== true) {
      ctx.addIssue({
        code: z.ZodIssueCode.custom,
        path: ["hostOriginalBytes"],
        message: "is only for a record with hostTruncated: true",
      });
    }
    if ((record.kind === "tool_call" || record.kind === "tool_result") && record.toolCallId === undefined) {
      ctx.addIssue({
        code: z.ZodIssueCode.custom,
        path: ["toolCallId"],
        message: `required for kind ${record.kind} (it pairs a call with its result)`,
      });
    }
    // Cheap bound first: a UTF-16 unit is at most 3 UTF-8 bytes; 4 base64 characters are 3 bytes.
    const size = record.text !== undefined ? record.text.length * 3 : Math.floor(((record.bytes?.length ?? 0) * 3) / 4);
    if (size > MAX_PAYLOAD_BYTES) {
      const bytes = record.text !== undefined ? Buffer.byteLength(record.text, "utf8") : payloadOf(record).length;
      if (bytes > MAX_PAYLOAD_BYTES) {
        ctx.addIssue({
          code: z.ZodIssueCode.custom,
          path: [record.text !== undefined ? "text" : "bytes"],
          message: `is ${bytes} bytes, above the ${MAX_PAYLOAD_BYTES}-byte limit of one record`,
        });
      }
    }
  });

const sessionLineSchema = z
  .object({
    type: z.literal("session"),
    /** The host session ID; the session is registered as (host "import", id), or (host, id) with `host`. */
    id: hostId,
    /**
     * The host that recorded the session live (`optchat export --jsonl` writes it for OpenCode's sessions): it is then
     * registered as that host's session and its record ids are read back as the host's finalization keys, so that the
     * host's own records of it (the plugin, `optchat import --opencode`) are recognised and nothing is stored twice.
     */
    host: z.enum(["opencode"], { errorMap: () => ({ message: "must be opencode (or left out)" }) }).optional(),
    project: opaqueId,
    title: sessionTitle.optional(),
    sharing: z.enum(["shared", "isolated"], { errorMap: () => ({ message: "must be shared or isolated" }) }).optional(),
    /** A profile scope (`profile:<name>`) shared across projects, instead of the project's own scope. */
    scope: opaqueId
      .refine((value) => value.startsWith("profile:"), "must be profile:<name> (a project's scope comes from project)")
      .optional(),
    /** The `id` of a session declared on an earlier line: this session is its subagent (it does not publish). */
    parent: hostId.optional(),
  })
  .strict();

const turnLineSchema = z
  .object({
    type: z.literal("turn"),
    /** The `id` of a session declared on an earlier line. */
    session: hostId,
    id: opaqueId,
    outcome: z.enum(["completed", "interrupted", "failed"], {
      errorMap: () => ({ message: "must be completed, interrupted or failed" }),
    }),
    records: z.array(importRecordSchema).min(1, "must hold at least one record"),
  })
  .strict();

export type ImportSessionLine = z.output<typeof sessionLineSchema>;
export type ImportTurnLine = z.output<typeof turnLineSchema>;
export type ImportRecord = z.output<typeof importRecordSchema>;
export type ImportLine = ImportSessionLine | ImportTurnLine;

/** An invalid line: INPUT_INVALID naming the line number and each bad field (`records[2].kind`). */
export class ImportLineError extends InputInvalidError {
  readonly line: number;

  constructor(line: number, issues: readonly FieldIssue[]) {
    super(`import line ${line}`, issues);
    this.name = "ImportLineError";
    this.line = line;
  }

  override toJSON() {
    const base = super.toJSON();
    return { ...base, details: { ...base.details, line: this.line } };
  }
}

/**
 * Checks lines in file order: each line on its own (JSON, schema) and against the lines before it (sessions declared
 * once and before use, parents declared before their subagents, turn IDs unique per session, record IDs unique per
 * session). Blank lines are allowed and skipped.
 */
export class ImportLineChecker {
  private readonly sessions = new Map<string, { line: number }>();
  private readonly turns = new Map<string, number>();
  private readonly records = new Map<string, number>();

  /** The parsed line, undefined for a blank line; throws ImportLineError. */
  check(lineNumber: number, text: string): ImportLine | undefined {
    const trimmed = (lineNumber === 1 ? text.replace(/^\uFEFF/, "") : text).trim();
    if (trimmed === "") return undefined;
    let value: unknown;
    try {
      value = JSON.parse(trimmed);
    } catch (error) {
      throw new ImportLineError(lineNumber, [
        { field: "(line)", problem: `is not JSON (${(error as Error).message}); each line holds one JSON object` },
      ]);
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      throw new ImportLineError(lineNumber, [{ field: "(line)", problem: "must be a JSON object" }]);
    }
    const type = (value as { type?: unknown }).type;
    if (type === "session") return this.checkSession(lineNumber, parseLine(sessionLineSchema, value, lineNumber));
    if (type === "turn") return this.checkTurn(lineNumber, parseLine(turnLineSchema, value, lineNumber));
    throw new ImportLineError(lineNumber, [
      {
        field: "type",
        problem:
          type === "record"
            ? 'records are imported inside their turn ("records" of a "turn" line), not on lines of their own'
            : `must be "session" or "turn", not ${JSON.stringify(type) ?? "missing"}`,
      },
    ]);
  }

  private checkSession(lineNumber: number, line: ImportSessionLine): ImportSessionLine {
    const earlier = this.sessions.get(line.id);
    if (earlier) {
      throw new ImportLineError(lineNumber, [
        { field: "id", problem: `session ${line.id} is already declared on line ${earlier.line}` },
      ]);
    }
    if (line.parent !== undefined && !this.sessions.has(line.parent)) {
      throw new ImportLineError(lineNumber, [
        {
          field: "parent",
          problem: `session ${line.parent} is not declared on an earlier line (declare the parent session first)`,
        },
      ]);
    }
    this.sessions.set(line.id, { line: lineNumber });
    return line;
  }

  private checkTurn(lineNumber: number, line: ImportTurnLine): ImportTurnLine {
    if (!this.sessions.has(line.session)) {
      throw new ImportLineError(lineNumber, [
        {
          field: "session",
          problem: `session ${line.session} is not declared on an earlier line (add a "session" line before its turns)`,
        },
      ]);
    }
    const turnKey = `${line.session}\u0000${line.id}`;
    const earlierTurn = this.turns.get(turnKey);
    if (earlierTurn !== undefined) {
      throw new ImportLineError(lineNumber, [
        { field: "id", problem: `turn ${line.id} of session ${line.session} is already on line ${earlierTurn}` },
      ]);
    }
    const issues: FieldIssue[] = [];
    const inLine = new Map<string, number>();
    line.records.forEach((record, index) => {
      const recordKey = `${line.session}\u0000${record.id}`;
      const earlierLine = this.records.get(recordKey);
      const earlierIndex = inLine.get(record.id);
      if (earlierLine !== undefined || earlierIndex !== undefined) {
        issues.push({
          field: `records[${index}].id`,
          problem: `record ${record.id} is already used in session ${line.session} (${earlierIndex !== undefined ? `records[${earlierIndex}] of this line` : `line ${earlierLine}`}); record IDs are unique within a session`,
        });
      }
      inLine.set(record.id, index);
    });
    if (issues.length > 0) throw new ImportLineError(lineNumber, issues);
    this.turns.set(turnKey, lineNumber);
    for (const record of line.records) this.records.set(`${line.session}\u0000${record.id}`, lineNumber);
    return line;
  }
}

function parseLine<S extends z.ZodTypeAny>(schema: S, value: unknown, lineNumber: number): z.output<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  throw new ImportLineError(lineNumber, issuesOf(parsed.error));
}

// ---------------------------------------------------------------------------------------------------------------
// Validation only (no database)

export interface ImportCheck {
  /** Lines read, blank ones included. */
  readonly lines: number;
  readonly sessions: number;
  readonly turns: number;
  readonly records: number;
  /** The first `maxErrors` invalid lines, in file order; empty when the file is valid. */
  readonly errors: readonly ImportLineError[];
  /** Invalid lines in all (some may not be listed). */
  readonly invalidLines: number;
}

/**
 * Checks a whole file without touching the database, collecting up to `maxErrors` invalid lines. An invalid line
 * counts for nothing, so lines that refer to it (a turn of a session whose declaration is invalid) are reported too.
 */
export async function checkJsonl(
  lines: AsyncIterable<string> | Iterable<string>,
  options: { maxErrors?: number } = {},
): Promise<ImportCheck> {
  const maxErrors = options.maxErrors ?? 20;
  const checker = new ImportLineChecker();
  const errors: ImportLineError[] = [];
  let lineNumber = 0;
  let invalidLines = 0;
  let sessions = 0;
  let turns = 0;
  let records = 0;
  for await (const text of lines) {
    lineNumber += 1;
    try {
      const line = checker.check(lineNumber, text);
      if (line?.type === "session") sessions += 1;
      else if (line?.type === "turn") {
        turns += 1;
        records += line.records.length;
      }
    } catch (error) {
      if (!(error instanceof ImportLineError)) throw error;
      invalidLines += 1;
      if (errors.length < maxErrors) errors.push(error);
    }
  }
  return { lines: lineNumber, sessions, turns, records, errors, invalidLines };
}

/** A record's payload as bytes: `text` as UTF-8, or `bytes` in base64. */
export function payloadOf(record: { text?: string | undefined; bytes?: string | undefined }): Buffer {
  return record.text !== undefined ? Buffer.from(record.text, "utf8") : Buffer.from(record.bytes ?? "", "base64");
}
