import { type FieldIssue, InputInvalidError } from "../core/errors.js";
import { eventKeyOf, stageKeyOf } from "../core/ids.js";
import type { RecordToSeal } from "../store/records.js";
import { preparePayload } from "./payload-prep.js";
import { type IngestEvent, ingestEventSchema, issuesOf, MAX_PAYLOAD_BYTES, type ValidIngestEvent } from "./schemas.js";

/**
 * Validates a batch of ingest events and prepares each as a record to seal (payload normalized, hashed, tokenized
 * for search), before any transaction opens. Every problem of every event is reported at once (INPUT_INVALID, fields
 * prefixed `events[i].` unless `where` is the single-event `ingest`).
 */
export async function prepareEvents(
  events: readonly IngestEvent[],
  where: string,
): Promise<{ valid: ValidIngestEvent[]; prepared: RecordToSeal[] }> {
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
  return { valid, prepared };
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
