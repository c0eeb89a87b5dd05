/**
 * The few named errors optchat raises. Each has a stable `code` that callers (the CLI, the plugin, tests) match on;
 * the message says what failed, where, and how to fix it.
 */
export type ErrorCode =
  | "CONFIG_INVALID"
  | "INPUT_INVALID"
  | "INGEST_CONFLICT"
  | "SESSION_NOT_FOUND"
  | "SESSION_DELETED"
  | "SNAPSHOT_RETIRED"
  | "REF_NOT_FOUND"
  | "SCOPE_DENIED"
  | "MEMORY_NOT_READY"
  | "BUDGET_EXCEEDED"
  | "DATABASE_UNAVAILABLE"
  | "SCHEMA_OUT_OF_DATE"
  | "EMBEDDED_SERVER";

export class OptchatError extends Error {
  readonly code: ErrorCode;
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: ErrorCode, message: string, details: Record<string, unknown> = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "OptchatError";
    this.code = code;
    this.details = Object.freeze({ ...details });
  }

  toJSON(): { code: ErrorCode; message: string; details: Readonly<Record<string, unknown>> } {
    return { code: this.code, message: this.message, details: this.details };
  }
}

/** One invalid field of an input, named by its path (e.g. `events[3].finalization.messageId`). */
export interface FieldIssue {
  readonly field: string;
  readonly problem: string;
}

export class InputInvalidError extends OptchatError {
  readonly issues: readonly FieldIssue[];

  constructor(where: string, issues: readonly FieldIssue[]) {
    const list = issues.map((issue) => `${issue.field}: ${issue.problem}`).join("; ");
    super("INPUT_INVALID", `${where}: invalid input (${list})`, { where, issues });
    this.name = "InputInvalidError";
    this.issues = Object.freeze([...issues]);
  }
}

export function isOptchatError(error: unknown, code?: ErrorCode): error is OptchatError {
  return error instanceof OptchatError && (code === undefined || error.code === code);
}
