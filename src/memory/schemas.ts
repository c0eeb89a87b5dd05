import { z } from "zod";
import { type FieldIssue, InputInvalidError } from "../core/errors.js";
import { opaqueIdProblem } from "../core/ids.js";

/** Largest payload accepted in one record. Larger host outputs should be truncated by the host and flagged. */
export const MAX_PAYLOAD_BYTES = 64 * 1024 * 1024;

export const opaqueId = z.string().superRefine((value, ctx) => {
  const problem = opaqueIdProblem(value);
  if (problem) ctx.addIssue({ code: z.ZodIssueCode.custom, message: problem });
});

const hostId = z.string().min(1, "must not be empty").max(500, "longer than 500 characters");

export const RECORD_KINDS = ["user", "assistant", "tool_call", "tool_result", "report", "note"] as const;

const kind = z.string().superRefine((value, ctx): value is (typeof RECORD_KINDS)[number] => {
  if ((RECORD_KINDS as readonly string[]).includes(value)) return true;
  const message = /reason|thinking|thought/i.test(value)
    ? "hidden model reasoning is never stored; drop reasoning parts before ingesting"
    : `must be one of ${RECORD_KINDS.join(", ")}`;
  ctx.addIssue({ code: z.ZodIssueCode.custom, message });
  return false;
}) as unknown as z.ZodType<(typeof RECORD_KINDS)[number]>;

const content = z.union([z.string(), z.custom<Uint8Array>((value) => value instanceof Uint8Array)], {
  errorMap: () => ({ message: "must be a string or a Uint8Array/Buffer" }),
});

export const ingestEventSchema = z
  .object({
    sessionId: opaqueId,
    generation: z.number().int("not an integer").nonnegative("must not be negative").optional(),
    turnId: opaqueId,
    kind,
    /** false: a partial, still-changing message or part; it is staged, not sealed. */
    final: z.boolean().default(true),
    finalization: z
      .object({
        hostSessionId: hostId,
        messageId: hostId,
        partId: hostId.optional(),
        revision: z.number().int("not an integer").nonnegative("must not be negative").default(0),
      })
      .strict(),
    occurredAt: z.union([z.date(), z.string().datetime({ offset: true, message: "must be an ISO 8601 timestamp" })]),
    content,
    toolCallId: hostId.optional(),
    toolName: hostId.optional(),
    /** The host already cut this output; we can only say so. */
    hostTruncated: z
      .object({ originalBytes: z.number().int("not an integer").nonnegative("must not be negative").optional() })
      .strict()
      .optional(),
    projectId: opaqueId.optional(),
    worktreeId: hostId.optional(),
    commit: z
      .string()
      .regex(/^[0-9a-f]{7,64}$/, "must be a hex commit id")
      .optional(),
    attributes: z.record(z.unknown()).optional(),
  })
  .strict()
  .superRefine((event, ctx) => {
    if ((event.kind === "tool_call" || event.kind === "tool_result") && event.toolCallId === undefined) {
      ctx.addIssue({
        code: z.ZodIssueCode.custom,
        path: ["toolCallId"],
        message: `required for kind ${event.kind} (it pairs a call with its result)`,
      });
    }
  });

export type IngestEvent = z.input<typeof ingestEventSchema>;
export type ValidIngestEvent = z.output<typeof ingestEventSchema>;

export const openSessionSchema = z
  .object({
    host: z.string().regex(/^[a-z][a-z0-9-]{0,31}$/, "must be a short lowercase host name such as 'opencode'"),
    hostSessionId: hostId,
    projectId: opaqueId.optional(),
    scopeId: opaqueId.optional(),
    parentSessionId: opaqueId.optional(),
    title: z.string().max(1000, "longer than 1000 characters").optional(),
    /** 'isolated': the session neither publishes to nor reads from shared memory. */
    sharing: z.enum(["shared", "isolated"]).optional(),
  })
  .strict()
  .refine((input) => input.projectId !== undefined || input.scopeId !== undefined, {
    message: "give projectId (the default scope is the project) or an explicit scopeId",
    path: ["projectId"],
  });

export type OpenSessionInput = z.input<typeof openSessionSchema>;

/** A record's coordinates; extra fields are ignored so that a listed record can be passed as its own ref. */
export const recordRefSchema = z.object({
  sessionId: opaqueId,
  generation: z.number().int("not an integer").nonnegative("must not be negative"),
  seq: z.number().int("not an integer").nonnegative("must not be negative"),
});

export const readPayloadOptionsSchema = z
  .object({
    cursor: z.string().max(100).optional(),
    maxBytes: z
      .number()
      .int("not an integer")
      .min(16, "below 16")
      .max(4 * 1024 * 1024, "above 4194304")
      .default(64 * 1024),
  })
  .strict();

/** Parses `input` or throws INPUT_INVALID naming each bad field, prefixed by `where`. */
export function parseInput<S extends z.ZodTypeAny>(schema: S, input: unknown, where: string, prefix = ""): z.output<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  throw new InputInvalidError(where, issuesOf(result.error, prefix));
}

export function issuesOf(error: z.ZodError, prefix = ""): FieldIssue[] {
  return error.issues.map((issue) => ({
    field: fieldPath(prefix, issue.path),
    problem: issue.code === "unrecognized_keys" ? `unknown field(s) ${issue.keys.join(", ")}` : issue.message,
  }));
}

function fieldPath(prefix: string, path: readonly (string | number)[]): string {
  let out = prefix;
  for (const part of path) out += typeof part === "number" ? `[${part}]` : out ? `.${part}` : part;
  return out || "(input)";
}

export const turnContextSchema = z.object({ sessionId: opaqueId, turnId: opaqueId });

export const admitTurnSchema = z
  .object({
    sessionId: opaqueId,
    turnId: opaqueId,
    query: z.string().max(100_000, "longer than 100000 characters").optional(),
    publishes: z.boolean().optional(),
  })
  .strict();

export const outcomeSchema = z.enum(["completed", "interrupted", "failed"], {
  errorMap: () => ({ message: "must be completed, interrupted or failed" }),
});

const tokens = z.number().int("not an integer").nonnegative("must not be negative");

export const assembleSchema = z
  .object({
    windowTokens: tokens,
    instructionsTokens: tokens,
    activeTokens: tokens,
    outputTokens: tokens,
    reserveTokens: tokens,
    previousExchange: z.boolean().optional(),
    readiness: z.enum(["strict", "partial"]).optional(),
    waitMs: z.number().int().min(0).max(600_000).optional(),
  })
  .strict();

export const searchSchema = z
  .object({
    query: z.string().min(1, "must not be empty").max(2000, "longer than 2000 characters"),
    sessionId: opaqueId.optional(),
    before: z.string().max(40).optional(),
    after: z.string().max(40).optional(),
    cursor: z.string().max(40).optional(),
    limit: z.number().int().min(1).max(50).optional(),
    /** all (default): every word must occur; any: any word, best matches first. */
    match: z.enum(["all", "any"], { errorMap: () => ({ message: "must be all or any" }) }).optional(),
  })
  .strict();
