import { datetimeRegex, z } from "zod";
import { type FieldIssue, InputInvalidError } from "../core/errors.js";
import { opaqueIdProblem } from "../core/ids.js";
import {
  jsonbProblems,
  NO_NUL,
  NO_UNPAIRED_SURROGATE,
  NUL_PROBLEM,
  storableText,
  UNPAIRED_SURROGATE_PROBLEM,
} from "../core/text.js";

/** Largest payload accepted in one record. Larger host outputs should be truncated by the host and flagged. */
export const MAX_PAYLOAD_BYTES = 64 * 1024 * 1024;

export const opaqueId = z.string().superRefine((value, ctx) => {
  const problem = opaqueIdProblem(value);
  if (problem) ctx.addIssue({ code: z.ZodIssueCode.custom, message: problem });
});

/**
 * Integers go into PostgreSQL columns: `integer` (generations, revisions, budgets) holds up to 2^31-1, and `bigint`
 * (seqs, byte counts) more than a JS number holds exactly, so those stop at 2^53-1. A larger number is INPUT_INVALID
 * here instead of a raw 22003 (numeric_value_out_of_range) from the query.
 */
export const INT4_MAX = 2_147_483_647;

/** A non-negative integer that fits an `integer` column. */
export const int4 = z
  .number({ invalid_type_error: "must be a number" })
  .int("not an integer")
  .nonnegative("must not be negative")
  .max(INT4_MAX, `above ${INT4_MAX} (the largest value of a PostgreSQL integer column)`);

/** A non-negative integer that a JS number holds exactly (for `bigint` columns). */
export const safeCount = z
  .number({ invalid_type_error: "must be a number" })
  .int("not an integer")
  .nonnegative("must not be negative")
  .max(Number.MAX_SAFE_INTEGER, `above ${Number.MAX_SAFE_INTEGER} (2^53-1, the largest exact integer)`);

/**
 * Refuses text that a `text` column cannot hold exactly (NUL, unpaired surrogates; see src/core/text.ts). Regex checks
 * rather than a refinement: zod runs them in the string's own check loop (measured ~1 µs against ~20 µs per field
 * for superRefine), and every ingested record has up to six host IDs.
 */
function storable(schema: z.ZodString): z.ZodString {
  return schema.regex(NO_NUL, NUL_PROBLEM).regex(NO_UNPAIRED_SURROGATE, UNPAIRED_SURROGATE_PROBLEM);
}

/**
 * A host's identifier (session, message, part, tool call, tool name, worktree). Refused, not repaired, when text
 * cannot hold it exactly: a repaired ID could equal another one.
 */
export const hostId = storable(z.string().min(1, "must not be empty").max(500, "longer than 500 characters"));

/**
 * A session title: a label, refused when text cannot hold it exactly (it is shown as given or not at all; nothing is
 * lost by refusing it, unlike a user's prompt).
 */
export const sessionTitle = storable(z.string().max(1000, "longer than 1000 characters"));

/** Host attributes of a record, stored as jsonb: every key and string must be storable text, every value JSON. */
const attributes = z.record(z.unknown()).superRefine((value, ctx) => {
  for (const { path, problem } of jsonbProblems(value))
    ctx.addIssue({ code: z.ZodIssueCode.custom, path: [...path], message: problem });
});

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

/**
 * An ISO 8601 timestamp (zod's `.datetime({ offset: true })`, its expression compiled once: zod builds it again on every
 * parse), or a Date. The string comes first: hosts send strings, and a failed first alternative costs an issue object
 * on every parse. Both together: an ingest event validated in about 40 us instead of 120 (loaded 2-core machine).
 */
const ISO_TIMESTAMP = datetimeRegex({ precision: null, offset: true, local: false });
const occurredAt = z.union([z.string().regex(ISO_TIMESTAMP, "must be an ISO 8601 timestamp"), z.date()]);

export const ingestEventSchema = z
  .object({
    sessionId: opaqueId,
    generation: int4.optional(),
    turnId: opaqueId,
    kind,
    /** false: a partial, still-changing message or part; it is staged, not sealed. */
    final: z.boolean().default(true),
    finalization: z
      .object({
        hostSessionId: hostId,
        messageId: hostId,
        partId: hostId.optional(),
        revision: int4.default(0),
      })
      .strict(),
    occurredAt,
    content,
    toolCallId: hostId.optional(),
    toolName: hostId.optional(),
    /** The host already cut this output; we can only say so. */
    hostTruncated: z.object({ originalBytes: safeCount.optional() }).strict().optional(),
    projectId: opaqueId.optional(),
    worktreeId: hostId.optional(),
    commit: z
      .string()
      .regex(/^[0-9a-f]{7,64}$/, "must be a hex commit id")
      .optional(),
    attributes: attributes.optional(),
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
    title: sessionTitle.optional(),
    /** 'isolated': the session neither publishes to nor reads from shared memory. */
    sharing: z.enum(["shared", "isolated"]).optional(),
    /** 'private': only its owner (and the operator) reads it, and its turns never publish (docs/team.md). */
    visibility: z.enum(["shared", "private"]).optional(),
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
  generation: int4,
  seq: safeCount,
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
/** Host message ids (a rewind's removed messages): 1 to 10,000 opaque ids. */
export const hostMessageIdsSchema = z.array(opaqueId).min(1).max(10_000);

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
    /**
     * The user's prompt, kept on the turn for inspection. Repaired, never refused (a refusal would drop the user's
     * turn from memory): NUL becomes U+2400 and an unpaired surrogate U+FFFD. Nothing is lost, because the prompt's
     * exact text is stored as the turn's user record, whose payload is bytes (docs/payloads.md).
     */
    query: z.string().max(100_000, "longer than 100000 characters").transform(storableText).optional(),
    publishes: z.boolean().optional(),
    /**
     * True for a person's prompt: first wait (OPTCHAT_ADMISSION_WAIT_MS) for the publications of turns other sessions
     * of the scope just finished, so the snapshot pinned at admission holds them (src/memory/turns.ts).
     */
    awaitRecent: z.boolean().optional(),
  })
  .strict();

export const outcomeSchema = z.enum(["completed", "interrupted", "failed"], {
  errorMap: () => ({ message: "must be completed, interrupted or failed" }),
});

const tokens = safeCount;

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

export const prepareSchema = assembleSchema.pick({ previousExchange: true, readiness: true, waitMs: true }).strict();

export const searchSchema = z
  .object({
    query: z.string().min(1, "must not be empty").max(2000, "longer than 2000 characters"),
    sessionId: opaqueId.optional(),
    before: z.string().max(40).optional(),
    after: z.string().max(40).optional(),
    cursor: z.string().max(40).optional(),
    limit: z.number().int().min(1).max(50).optional(),
    /** any (default): a bag of words ranked by BM25; all: every word must occur. */
    match: z.enum(["all", "any"], { errorMap: () => ({ message: "must be all or any" }) }).optional(),
  })
  .strict();

export const listRecordsOptionsSchema = z
  .object({
    generation: int4.optional(),
    fromSeq: safeCount.optional(),
    limit: z.number().int("not an integer").min(1, "below 1").max(100_000, "above 100000").optional(),
  })
  .strict();

export const viewOptionsSchema = z
  .object({
    /** Bytes; projections are cached per budget in an integer column. */
    budget: int4.min(1, "must be a positive integer number of bytes").optional(),
    revision: int4.optional(),
  })
  .strict();

export const settleOptionsSchema = z
  .object({ timeoutMs: z.number().int("not an integer").min(0, "below 0").max(600_000, "above 600000").optional() })
  .strict();

export const zoomOptionsSchema = z
  .object({ cursor: z.string().max(100).optional(), maxTokens: safeCount.min(1, "below 1").optional() })
  .strict();

export const sessionsOptionsSchema = z
  .object({
    cursor: z.string().max(200).optional(),
    limit: z.number().int("not an integer").min(1, "below 1").max(50, "above 50").optional(),
  })
  .strict();

/** What `forget` removes: sessions by id, a whole scope, or the sessions last active before a date (forget.ts). */
export const forgetRequestSchema = z.union([
  z.object({ sessionIds: z.array(opaqueId).min(1).max(10_000) }).strict(),
  z.object({ scopeId: opaqueId }).strict(),
  z.object({ before: z.date() }).strict(),
]);
