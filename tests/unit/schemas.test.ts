import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { InputInvalidError } from "../../src/core/errors.js";
import {
  admitTurnSchema,
  ingestEventSchema,
  listRecordsOptionsSchema,
  openSessionSchema,
  parseInput,
  recordRefSchema,
  sessionsOptionsSchema,
  settleOptionsSchema,
  viewOptionsSchema,
  zoomOptionsSchema,
} from "../../src/memory/schemas.js";

const valid = {
  sessionId: "ses_1",
  turnId: "t1",
  kind: "tool_call",
  toolCallId: "call_1",
  finalization: { hostSessionId: "h", messageId: "m", partId: "p" },
  occurredAt: "2026-11-20T10:00:00+01:00",
  content: new Uint8Array([0, 255, 1]),
};

describe("ingest event schema", () => {
  it("accepts exactly the timestamps zod's own ISO 8601 check accepts, and Dates", () => {
    const reference = z.string().datetime({ offset: true });
    const pieces = fc.constantFrom(
      "2026",
      "-",
      "11",
      "20",
      "T",
      "10",
      ":",
      "00",
      ".",
      "123",
      "Z",
      "+01:00",
      "+0100",
      " ",
    );
    const candidates = fc.oneof(
      fc.array(pieces, { maxLength: 12 }).map((p) => p.join("")),
      fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
      fc.string({ maxLength: 30 }),
    );
    fc.assert(
      fc.property(candidates, (occurredAt) => {
        const ours = ingestEventSchema.safeParse({ ...valid, occurredAt }).success;
        expect(ours).toBe(reference.safeParse(occurredAt).success);
      }),
      { numRuns: 3000 },
    );
    expect(ingestEventSchema.safeParse({ ...valid, occurredAt: new Date() }).success).toBe(true);
    expect(ingestEventSchema.safeParse({ ...valid, occurredAt: "2026-11-20T10:00:00+01:00" }).success).toBe(true);
  });

  it("accepts a tool call with bytes as content and fills defaults", () => {
    const parsed = parseInput(ingestEventSchema, valid, "test");
    expect(parsed.final).toBe(true);
    expect(parsed.finalization.revision).toBe(0);
    expect(parsed.content).toBeInstanceOf(Uint8Array);
  });

  it("names nested fields with a prefix and lists every problem at once", () => {
    try {
      parseInput(
        ingestEventSchema,
        { ...valid, finalization: { messageId: "" }, hostTruncated: { originalBytes: -1 } },
        "ingestMany",
        "events[2]",
      );
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(InputInvalidError);
      const fields = (error as InputInvalidError).issues.map((i) => i.field).sort();
      expect(fields).toEqual([
        "events[2].finalization.hostSessionId",
        "events[2].finalization.messageId",
        "events[2].hostTruncated.originalBytes",
      ]);
      expect((error as Error).message).toMatch(/^ingestMany: invalid input \(/);
    }
  });

  it("refuses hidden reasoning whatever the host calls it", () => {
    for (const kind of ["reasoning", "thinking", "thought"]) {
      const result = ingestEventSchema.safeParse({ ...valid, kind });
      expect(result.success).toBe(false);
      expect(result.error?.issues[0]?.message).toMatch(/reasoning is never stored/);
    }
  });
});

describe("text and numbers the database cannot store are refused at the boundary, naming the field", () => {
  const fieldsOf = (schema: Parameters<typeof parseInput>[0], input: unknown): string[] => {
    try {
      parseInput(schema, input, "test");
    } catch (error) {
      expect(error).toBeInstanceOf(InputInvalidError);
      return [...new Set((error as InputInvalidError).issues.map((i) => i.field))].sort();
    }
    return [];
  };

  it("refuses NUL and unpaired surrogates in every host ID of an event, and in jsonb attributes at any depth", () => {
    const bad = {
      ...valid,
      toolCallId: "call\u0000",
      toolName: "ba\u0000sh",
      worktreeId: "\uD800",
      finalization: { hostSessionId: "h\u0000", messageId: "m\uDC00", partId: "p\u0000" },
      attributes: { ok: "fine", nul: "a\u0000", nested: { list: ["\uD83D"] }, "k\u0000": 1, big: 1n },
    };
    expect(fieldsOf(ingestEventSchema, bad)).toEqual([
      'attributes."k\\u0000"',
      "attributes.big",
      "attributes.nested.list[0]",
      "attributes.nul",
      "finalization.hostSessionId",
      "finalization.messageId",
      "finalization.partId",
      "toolCallId",
      "toolName",
      "worktreeId",
    ]);
    // Payloads are bytes and keep anything: NUL and a lone surrogate in content are accepted.
    expect(fieldsOf(ingestEventSchema, { ...valid, content: "a\u0000b\uD800" })).toEqual([]);
  });

  it("refuses them in a session's host ID and title", () => {
    const open = { host: "opencode", hostSessionId: "ses\u0000", projectId: "p", title: "t\uDFFF" };
    expect(fieldsOf(openSessionSchema, open)).toEqual(["hostSessionId", "title"]);
  });

  it("repairs a turn's query instead (NUL as U+2400, an unpaired surrogate as U+FFFD): the user's turn must go on", () => {
    const parsed = parseInput(admitTurnSchema, { sessionId: "ses_1", turnId: "t1", query: "a\u0000b\uD800" }, "t");
    expect(parsed.query).toBe("a\u2400b\uFFFD");
  });

  it("refuses integers outside their column's type (integer: 2^31-1; bigint: exact JS integers)", () => {
    expect(fieldsOf(recordRefSchema, { sessionId: "ses_1", generation: 2 ** 31, seq: 2 ** 53 })).toEqual([
      "generation",
      "seq",
    ]);
    expect(fieldsOf(recordRefSchema, { sessionId: "ses_1", generation: 2 ** 31 - 1, seq: 2 ** 53 - 1 })).toEqual([]);
    expect(
      fieldsOf(ingestEventSchema, {
        ...valid,
        generation: 2 ** 31,
        finalization: { ...valid.finalization, revision: 2 ** 31 },
        hostTruncated: { originalBytes: 1e300 },
      }),
    ).toEqual(["finalization.revision", "generation", "hostTruncated.originalBytes"]);
    expect(fieldsOf(listRecordsOptionsSchema, { generation: 2 ** 31, fromSeq: -1, limit: 0 })).toEqual([
      "fromSeq",
      "generation",
      "limit",
    ]);
    expect(fieldsOf(viewOptionsSchema, { budget: 2 ** 31, revision: Number.NaN })).toEqual(["budget", "revision"]);
    expect(fieldsOf(sessionsOptionsSchema, { limit: Number.NaN })).toEqual(["limit"]);
    expect(fieldsOf(settleOptionsSchema, { timeoutMs: -1 })).toEqual(["timeoutMs"]);
    expect(fieldsOf(zoomOptionsSchema, { maxTokens: Number.POSITIVE_INFINITY })).toEqual(["maxTokens"]);
  });
});
